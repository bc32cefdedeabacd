"""Derive the bundled demo corpus `monitor/data/corpus.jsonl` from the public QA sets.

Run from the repository root:  python bench/make_corpus.py --data DIR  (or set RAGMON_QA_DATA),
DIR holding the public QA data sets listed in tests/data/lexical_judge_sample.README.md:

    DIR/clapnq_dev/clapnq_dev_answerable.jsonl, clapnq_dev_unanswerable.jsonl,
                   question_dev_answerable.tsv                     ClapNQ dev
    DIR/squad2_sample500/queries.json, ground_truth.json           SQuAD 2.0 dev
    DIR/multihop_rag_sample500/queries.json, ground_truth.json     MultiHop-RAG
    DIR/hotpotqa_hipporag100/hotpotqa_train.json                   HotpotQA (HippoRAG's copy)

The output is deterministic: items are chosen by a hash
of their upstream id, never by `random`, so re-running it reproduces the file byte for byte and
a changed upstream row only changes its own lines.

Output: one JSON object per line, chunks first, then questions.
  {"kind": "chunk", "id", "title", "text", "source", "license"}
  {"kind": "question", "id", "query", "query_type", "relevant_chunk_ids", "reference_answer",
   "answerable", "evidence", "related_chunk_ids", "source", "license"}
Question rows are golden rows (docs/contract.md, Golden rows) plus `evidence` (the sentences of
the relevant chunks that carry the answer: what a grounded answer quotes) and `related_chunk_ids`
(for unanswerable questions, the on-topic passage that does not answer them: a retriever's natural
near miss).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "monitor" / "data" / "corpus.jsonl"
DATA_ENV = "RAGMON_QA_DATA"  # the data directory when --data is not given

LICENSES = {
    "clapnq": "Apache-2.0",
    "squad2": "CC-BY-SA-4.0",
    "multihop_rag": "ODC-BY-1.0",
    "hotpotqa": "CC-BY-SA-4.0",
}

# How many questions of each kind to take. Chosen so that every query type of the allow-list has
# 12-24 questions and the whole file stays well under 400 KB.
N_CLAPNQ_ANSWERABLE = 24  # abstractive (long-form answers)
N_CLAPNQ_UNANSWERABLE = 10  # out_of_corpus
N_SQUAD_NUMERIC = 12  # exact_match (answer is a number, date or code)
N_SQUAD_FACTOID = 12  # lookup
N_SQUAD_UNANSWERABLE = 8  # out_of_corpus
N_SQUAD_EXTRA_CONTEXTS = 16  # distractor-only chunks
N_MHRAG = {"comparison_query": 8, "temporal_query": 4, "inference_query": 10, "null_query": 5}
MHRAG_TYPE = {
    "comparison_query": "comparison",
    "temporal_query": "comparison",
    "inference_query": "multi_hop",
    "null_query": "out_of_corpus",
}
N_HOTPOT = {"bridge": 10, "comparison": 8}
HOTPOT_TYPE = {"bridge": "multi_hop", "comparison": "comparison"}


def _h(s: str) -> str:
    return hashlib.sha1(s.encode()).hexdigest()


def _by_hash(items: Iterable[Any], key: str) -> list[Any]:
    """A stable pseudo-random order: sort by the hash of the upstream id."""
    return sorted(items, key=lambda it: _h(str(it[key])))


def detok(s: str) -> str:
    """Undo the PTB-style tokenisation of ClapNQ text ("year ." -> "year.") for realistic chunks."""
    s = s.replace("`` ", '"').replace(" ''", '"').replace(" -- ", " - ")
    s = re.sub(r" ([,.;:?!%])", r"\1", s)
    s = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", s)
    s = s.replace("( ", "(").replace(" )", ")").replace("$ ", "$")
    s = re.sub(r"(\w) - (\w)", r"\1-\2", s)
    s = re.sub(r"(\d): (\d)", r"\1:\2", s)  # "11: 00" -> "11:00"
    return re.sub(r"\s+", " ", s).strip()


_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(])")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if s.strip()]


class Builder:
    def __init__(self) -> None:
        self.chunks: dict[str, dict[str, Any]] = {}
        self.questions: list[dict[str, Any]] = []

    def chunk(self, cid: str, title: str, text: str, source: str) -> str:
        if cid not in self.chunks:
            self.chunks[cid] = {
                "kind": "chunk",
                "id": cid,
                "title": title,
                "text": text,
                "source": source,
                "license": LICENSES[source],
            }
        return cid

    def question(
        self,
        qid: str,
        query: str,
        query_type: str,
        relevant: list[str],
        reference: str,
        answerable: bool,
        evidence: list[str],
        source: str,
        related: list[str] | None = None,
    ) -> None:
        texts = [self.chunks[c]["text"] for c in relevant]
        for sent in evidence:  # a grounded answer quotes evidence: it must really be in the chunks
            assert any(sent in t for t in texts), (qid, sent)
        assert answerable == bool(relevant) == bool(evidence), qid
        self.questions.append(
            {
                "kind": "question",
                "id": qid,
                "query": query.strip(),
                "query_type": query_type,
                "relevant_chunk_ids": relevant,
                "reference_answer": reference.strip(),
                "answerable": answerable,
                "evidence": evidence,
                "related_chunk_ids": related or [],
                "source": source,
                "license": LICENSES[source],
            }
        )


def clapnq(b: Builder, data: Path) -> None:
    d = data / "clapnq_dev"
    doc_ids = {
        r["id"]: r["doc-id-list"]
        for r in csv.DictReader((d / "question_dev_answerable.tsv").open(), delimiter="\t")
    }
    rows = [json.loads(line) for line in (d / "clapnq_dev_answerable.jsonl").open()]
    taken = 0
    for r in _by_hash(rows, "id"):
        if taken == N_CLAPNQ_ANSWERABLE:
            break
        p = r["passages"][0]
        text = detok(p["text"])
        out = r["output"][0]
        evidence = [detok(s) for s in out["selected_sentences"]]
        answer = detok(out["answer"])
        if not (200 <= len(text) <= 1400 and 0 < len(answer) <= 500 and 0 < len(evidence) <= 3):
            continue
        if not all(e in text for e in evidence):
            continue
        cid = b.chunk(f"clapnq:{doc_ids[r['id']]}", p["title"], text, "clapnq")
        b.question(f"clapnq:{r['id']}", r["input"], "abstractive", [cid], answer, True, evidence, "clapnq")
        taken += 1
    rows = [json.loads(line) for line in (d / "clapnq_dev_unanswerable.jsonl").open()]
    taken = 0
    for r in _by_hash(rows, "id"):
        if taken == N_CLAPNQ_UNANSWERABLE:
            break
        p = r["passages"][0]
        text = detok(p["text"])
        if not 200 <= len(text) <= 1400:
            continue
        cid = b.chunk(f"clapnq:{r['id']}-p0", p["title"], text, "clapnq")
        b.question(
            f"clapnq:{r['id']}", r["input"], "out_of_corpus", [], "", False, [], "clapnq", related=[cid]
        )
        taken += 1


def squad2(b: Builder, data: Path) -> None:
    d = data / "squad2_sample500"
    rows = json.loads((d / "queries.json").read_text())["queries"]
    truth = json.loads((d / "ground_truth.json").read_text())
    want = {"exact_match": N_SQUAD_NUMERIC, "lookup": N_SQUAD_FACTOID, "out_of_corpus": N_SQUAD_UNANSWERABLE}
    used_ctx: set[str] = set()
    for r in _by_hash(rows, "id"):
        t = truth[r["id"]]
        ctx = r["context"].strip()
        if ctx in used_ctx or not 200 <= len(ctx) <= 1200:
            continue
        cid = f"squad2:{_h(ctx)[:12]}"
        if t["is_impossible"]:
            qtype = "out_of_corpus"
            if want[qtype] == 0:
                continue
            b.chunk(cid, "", ctx, "squad2")
            b.question(f"squad2:{r['id']}", r["question"], qtype, [], "", False, [], "squad2", related=[cid])
        else:
            answer = t["answers"][0].strip()
            qtype = "exact_match" if any(ch.isdigit() for ch in answer) else "lookup"
            evidence = [s for s in sentences(ctx) if answer in s][:1]
            if want[qtype] == 0 or not answer or not evidence:
                continue
            b.chunk(cid, "", ctx, "squad2")
            b.question(f"squad2:{r['id']}", r["question"], qtype, [cid], answer, True, evidence, "squad2")
        want[qtype] -= 1
        used_ctx.add(ctx)
    extra = N_SQUAD_EXTRA_CONTEXTS
    for r in _by_hash(rows, "context"):
        ctx = r["context"].strip()
        if extra == 0:
            break
        if ctx in used_ctx or not 200 <= len(ctx) <= 1000:
            continue
        b.chunk(f"squad2:{_h(ctx)[:12]}", "", ctx, "squad2")
        used_ctx.add(ctx)
        extra -= 1


def multihop_rag(b: Builder, data: Path) -> None:
    d = data / "multihop_rag_sample500"
    rows = json.loads((d / "queries.json").read_text())["queries"]
    truth = json.loads((d / "ground_truth.json").read_text())
    want = dict(N_MHRAG)
    for r in _by_hash(rows, "id"):
        qt = r["question_type"]
        t = truth[r["id"]]
        facts = [e for e in t["evidence_list"]]
        if want.get(qt, 0) == 0 or len(facts) > 3 or len(r["question"]) > 400:
            continue
        if any(len(e["fact"]) > 600 for e in facts):
            continue
        ids = []
        for e in facts:
            fact = e["fact"].strip()
            ids.append(b.chunk(f"mhrag:{_h(fact)[:12]}", e["title"], fact, "multihop_rag"))
        answerable = qt != "null_query"
        evidence = [b.chunks[c]["text"] for c in ids]
        b.question(
            f"mhrag:{r['id']}",
            r["question"],
            MHRAG_TYPE[qt],
            ids,
            t["answer"] if answerable else "",
            answerable,
            evidence,
            "multihop_rag",
        )
        want[qt] -= 1


def hotpotqa(b: Builder, data: Path) -> None:
    d = data / "hotpotqa_hipporag100"
    rows = json.loads((d / "hotpotqa_train.json").read_text())
    want = dict(N_HOTPOT)
    for r in _by_hash(rows, "_id"):
        if want[r["type"]] == 0:
            continue
        paras = {title: sents for title, sents in r["context"]}
        gold_titles = list(dict.fromkeys(t for t, _ in r["supporting_facts"]))
        if not all(t in paras for t in gold_titles):
            continue
        text = {t: "".join(paras[t]).strip() for t in gold_titles}
        if any(len(x) > 1500 for x in text.values()):
            continue
        ids = [b.chunk(f"hotpot:{t.replace(' ', '_')}", t, text[t], "hotpotqa") for t in gold_titles]
        evidence = []
        for t, i in r["supporting_facts"]:
            if i < len(paras[t]):
                s = paras[t][i].strip()
                if s and s not in evidence:
                    evidence.append(s)
        # one hard negative per question: a paragraph HotpotQA itself put next to the gold ones
        negatives = [
            t for t in sorted(paras, key=_h) if t not in gold_titles and len("".join(paras[t])) < 900
        ]
        if negatives:
            n = negatives[0]
            b.chunk(f"hotpot:{n.replace(' ', '_')}", n, "".join(paras[n]).strip(), "hotpotqa")
        b.question(
            f"hotpot:{r['_id']}",
            r["question"],
            HOTPOT_TYPE[r["type"]],
            ids,
            r["answer"],
            True,
            evidence,
            "hotpotqa",
        )
        want[r["type"]] -= 1


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        default=os.environ.get(DATA_ENV) or None,
        help=f"directory of the QA data sets (layout above; default ${DATA_ENV})",
    )
    args = p.parse_args(argv)
    if args.data is None:
        p.error(f"give --data DIR (or set {DATA_ENV})")
    data: Path = args.data
    b = Builder()
    clapnq(b, data)
    squad2(b, data)
    multihop_rag(b, data)
    hotpotqa(b, data)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as f:
        for row in [*b.chunks.values(), *b.questions]:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")
    by_type: dict[str, int] = {}
    for q in b.questions:
        by_type[q["query_type"]] = by_type.get(q["query_type"], 0) + 1
    by_src: dict[str, int] = {}
    for c in b.chunks.values():
        by_src[c["source"]] = by_src.get(c["source"], 0) + 1
    print(
        f"{OUT.relative_to(ROOT)}: {len(b.chunks)} chunks {by_src}, {len(b.questions)} questions "
        f"{by_type}, {OUT.stat().st_size} bytes"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
