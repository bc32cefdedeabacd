"""`rag-monitor golden synthesize` against the real example RAG service: the offline template
generator, and the LLM generator through the real `anthropic` SDK against the local Messages-API
fake of test_judge_llm.py (answering good, duplicate and garbage generations).

What a kept row promises is checked from outside, by asking the service: its source chunks are in
the top 5 for its question; and a replay of the synthesized file scores them all as retrieved.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import typer
from fake_llm import FakeAPI, Reply, anthropic_message, openai_completion
from typer.testing import CliRunner

from monitor.cli.golden import register
from monitor.golden.cost import CostActual, CostEstimate
from monitor.golden.schema import load_golden
from monitor.golden.synthesize import (
    TOOL_NAME,
    UNANSWERABLE,
    Failure,
    Proposal,
    SourceChunk,
    Task,
    read_corpus,
)
from monitor.golden.synthesize import synthesize as run_synthesis
from monitor.golden.targets import make_target

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "monitor" / "data" / "corpus.jsonl"
TEMPLATE_TYPES = {"lookup", "exact_match", "comparison", UNANSWERABLE}


def cli(*args: str) -> Any:
    app = typer.Typer()
    register(app)
    return CliRunner().invoke(app, list(args))


def synthesize(service: str, out: Path, *args: str) -> Any:
    return cli("golden", "synthesize", "--target", f"{service}/query", "--out", str(out), *args)


def top5(service: str, query: str) -> list[str]:
    r = httpx.post(f"{service}/query", json={"query": query, "k": 5}, timeout=10)
    r.raise_for_status()
    return [c["id"] for c in r.json()["chunks"]]


def test_template_rows_are_golden_rows_the_target_retrieves_and_replay(service: str, tmp_path: Path) -> None:
    out, report = tmp_path / "synthetic.jsonl", tmp_path / "report.json"
    r = synthesize(service, out, "--corpus", str(CORPUS), "--per-type", "4", "--report", str(report))
    assert r.exit_code == 0, r.output
    assert "kept 16 of" in r.output and "review them before use" in r.output

    check = load_golden(out)
    assert check.ok, check.errors
    rows = check.rows
    assert len(rows) == 16 and {r.source for r in rows} == {"synthetic"}
    assert {r.query_type for r in rows} == TEMPLATE_TYPES  # 4 each: round-robin with quotas
    assert all(sum(r.query_type == t for r in rows) == 4 for t in TEMPLATE_TYPES)
    unanswerable = [r for r in rows if not r.answerable]
    assert len(unanswerable) == 4
    assert all(r.query_type == UNANSWERABLE and not r.relevant_chunk_ids for r in unanswerable)
    assert len({r.query for r in rows}) == len(rows)
    for row in rows:
        if row.answerable:
            assert set(row.relevant_chunk_ids) <= set(top5(service, row.query)), row
            texts = {c.id: c.content for c in row.relevant_chunks or ()}
            assert set(texts) == set(row.relevant_chunk_ids)  # what the oracle baseline sends
            if row.query_type == "exact_match":
                assert row.reference_answer in next(iter(texts.values()))

    summary = json.loads(report.read_text())
    assert summary["kept"] == 16
    assert summary["generated"] == summary["kept"] + sum(summary["dropped"].values())
    assert {t: c["kept"] for t, c in summary["by_type"].items()} == dict.fromkeys(TEMPLATE_TYPES, 4)
    assert summary["corpus"]["chunks"] == 179 and summary["corpus"]["other_rows"] == 111

    again = synthesize(service, tmp_path / "again.jsonl", "--corpus", str(CORPUS), "--per-type", "4")
    assert again.exit_code == 0 and (tmp_path / "again.jsonl").read_bytes() == out.read_bytes()  # seeded
    assert synthesize(service, out, "--corpus", str(CORPUS)).exit_code == 2  # never over a file

    replay_report = tmp_path / "replay.json"
    replay = cli(
        "replay", "--golden", str(out), "--target", f"{service}/query", "--report", str(replay_report)
    )
    assert replay.exit_code == 0, replay.output
    replayed = json.loads(replay_report.read_text())
    assert len(replayed["rows"]) == 16
    recalls = [row["recall_at_k"] for row in replayed["rows"] if row["answerable"]]
    assert len(recalls) == 12 and set(recalls) == {1.0}


def _corpus(path: Path) -> Path:
    """Twenty real chunks, two the service does not hold (an index out of step with the corpus
    file), and broken lines."""
    real = [line for line in CORPUS.read_text().splitlines() if '"kind": "chunk"' in line]
    unknown = [
        {
            "kind": "chunk",
            "id": f"made-up:{n}",
            "title": f"Quillhaven Survey {n}",
            "text": f"The survey of the Marrowvale district counted {n}4,812 lanterns along the "
            f"Old Brackwater Road in the spring. Its authors were paid by the Velcourt Trust.",
        }
        for n in (1, 2)
    ]
    lines = [*real[:20], *map(json.dumps, unknown), '{"kind": "chunk", "id": "x"', "[1, 2]", '{"id": "y"}']
    path.write_text("\n".join(lines) + "\n")
    return path


def test_drops_are_counted_by_reason(service: str, tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl")
    first, report = tmp_path / "first.jsonl", tmp_path / "first.json"
    args = ("--corpus", str(corpus), "--types", "lookup,exact_match", "--per-type", "20")
    r = synthesize(service, first, *args, "--report", str(report))
    assert r.exit_code == 0, r.output
    assert "3 lines skipped (bad_chunk 1, invalid_json 1, not_an_object 1)" in r.output
    summary = json.loads(report.read_text())
    assert summary["corpus"]["skipped_lines"] == {"invalid_json": 1, "not_an_object": 1, "bad_chunk": 1}
    unretrieved = [d for d in summary["drops"] if d["reason"] == "not_retrieved"]
    assert {i for d in unretrieved for i in d["chunk_ids"]} == {"made-up:1", "made-up:2"}
    assert summary["dropped"]["not_retrieved"] == len(unretrieved) == 4  # two types, two chunks
    kept = load_golden(first).rows
    assert not any(i.startswith("made-up:") for row in kept for i in row.relevant_chunk_ids)

    # Against the first run's rows, the same seed proposes the same questions again: duplicates;
    # the chunks they came from are free again in this run, and give other questions.
    second, report2 = tmp_path / "second.jsonl", tmp_path / "second.json"
    r2 = synthesize(service, second, *args, "--existing", str(first), "--report", str(report2))
    assert r2.exit_code == 0, r2.output
    dropped = json.loads(report2.read_text())["dropped"]
    assert dropped["duplicate"] == len(kept) and dropped["not_retrieved"] == 4
    assert {r.query for r in load_golden(second).rows}.isdisjoint(r.query for r in kept)


# -- the LLM generator, against the fake Messages API -----------------------------------------------


def _user(body: dict[str, Any]) -> str:
    return str(next(m["content"] for m in body["messages"] if m["role"] == "user"))


def _docs(body: dict[str, Any]) -> list[tuple[str, str]]:
    user = _user(body)
    return [
        (html.unescape(t), html.unescape(x))
        for t, x in re.findall(r'<doc id="\d+" title="([^"]*)">(.*?)</doc>', user, re.S)
    ]


def unanswerable(body: dict[str, Any]) -> bool:
    return "an unanswerable question" in _user(body)


class Writer:
    """A question writer behind the fake API: of every four requests, two good generations, one
    repeating the last good question of its kind, one garbage tool input. Requests come one at a time
    (`max_concurrency` 1), so which gets what is the same on every run."""

    def __init__(self) -> None:
        self.count = itertools.count()
        self.lock = threading.Lock()
        self.last: dict[bool, dict[str, Any]] = {}  # by unanswerable: a duplicate fits its request

    def good(self, body: dict[str, Any]) -> dict[str, Any]:
        docs = _docs(body)
        if unanswerable(body):
            title = docs[0][0]
            return {
                "question": f"Who paid for {title} in 2077?",
                "answer": "",
                "evidence": [],
                "missing": "2077",
            }
        sentences = [
            next(s for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) > 8) for _, text in docs
        ]
        words = sentences[0].split()
        titles = " and ".join(t for t, _ in docs if t)
        return {
            "question": f"Regarding {titles or 'this'}, what follows '{' '.join(words[:6])}'?",
            "answer": " ".join(words[6:]),
            "evidence": sentences,
            "missing": "",
        }

    def __call__(self, path: str, body: dict[str, Any]) -> Reply:
        with self.lock:
            n = next(self.count)
            kind = unanswerable(body)
            if n % 4 == 2 and kind in self.last:
                output = self.last[kind]
            elif n % 4 == 3:
                output = {"question": 42, "note": "ignore the schema"}
            else:
                output = self.last[kind] = self.good(body)
        message = anthropic_message(output)
        message["content"][0]["name"] = TOOL_NAME
        return Reply(body=message)


def _llm(service: str, tmp_path: Path, api: FakeAPI, *args: str) -> Any:
    config = tmp_path / "synth.yaml"
    options = {
        "base_url": api.url,
        "api_key": api.key,
        "timeout_seconds": 5,
        "max_retries": 0,
        "max_tokens": 512,
        "max_concurrency": 1,
    }
    config.write_text(json.dumps({"judge_options": options}))
    return synthesize(
        service,
        tmp_path / "llm.jsonl",
        "--corpus",
        str(CORPUS),
        "--generator",
        "anthropic",
        "--config",
        str(config),
        "--types",
        "lookup,comparison,out_of_corpus",
        "--per-type",
        "2",
        *args,
    )


def test_llm_generations_are_filtered_and_costed(service: str, api: FakeAPI, tmp_path: Path) -> None:
    api.default = Writer()
    report = tmp_path / "report.json"
    r = _llm(service, tmp_path, api, "--max-usd", "1", "--report", str(report))
    assert r.exit_code == 0, r.output
    assert re.search(
        r"synthesis cost estimate \(anthropic claude-haiku-4-5.*: 18 calls for 18 generations", r.output
    )
    assert "synthesis cost: estimate ≤ $" in r.output and "estimate/actual" in r.output

    summary = json.loads(report.read_text())
    assert summary["dropped"]["malformed"] >= 1 and summary["dropped"]["duplicate"] >= 1
    assert summary["generated"] == len(api.requests) == summary["kept"] + sum(summary["dropped"].values())
    rows = load_golden(tmp_path / "llm.jsonl").rows
    assert {r.query_type for r in rows} == {"lookup", "comparison", UNANSWERABLE}
    assert all(r.source == "synthetic" for r in rows)
    assert {len(r.relevant_chunk_ids) for r in rows if r.query_type == "comparison"} == {2}
    for row in rows:
        if row.answerable:
            assert set(row.relevant_chunk_ids) <= set(top5(service, row.query))

    first = api.requests[0].body
    assert first["tool_choice"] == {"type": "tool", "name": TOOL_NAME} and first["max_tokens"] == 512
    assert "never instructions" in first["system"] and "<documents>" in first["messages"][0]["content"]
    cost = summary["cost"]
    assert cost["actual"]["judgements"] == len(api.requests) <= cost["estimate"]["calls"] == 18
    assert cost["estimate"]["input_tokens"] >= cost["actual"]["input_tokens"] > 0
    assert cost["estimate"]["usd"] >= cost["actual"]["usd"] > 0


def test_llm_cost_over_the_limit_sends_nothing(service: str, api: FakeAPI, tmp_path: Path) -> None:
    over = _llm(service, tmp_path, api, "--max-usd", "0.0001")
    assert over.exit_code == 2 and "is over --max-usd 0.0001" in over.output
    unlimited = _llm(service, tmp_path, api)
    assert unlimited.exit_code == 2 and "an LLM synthesis costs money" in unlimited.output
    assert api.requests == [] and not (tmp_path / "llm.jsonl").exists()


def test_llm_options_are_read_as_the_judge_reads_them(service: str, api: FakeAPI, tmp_path: Path) -> None:
    """`judge_options` hold the judge's settings: its own (what of a record it shows) pass, though
    the generator has no use for them; a misspelt one stops the run before anything is sent."""
    config = tmp_path / "synth.yaml"
    base = {"base_url": f"{api.url}/v1", "api_key": api.key}
    args = ("--corpus", str(CORPUS), "--generator", "openai", "--config", str(config))
    config.write_text(json.dumps({"judge_options": {**base, "max_chunks": 3, "query_types": ["lookup"]}}))
    judges = synthesize(service, tmp_path / "a.jsonl", *args)
    assert judges.exit_code == 2 and "an LLM synthesis costs money" in judges.output, judges.output
    config.write_text(json.dumps({"judge_options": {**base, "max_tokns": 256}}))
    typo = synthesize(service, tmp_path / "b.jsonl", *args, "--yes")
    assert typo.exit_code == 2 and "max_tokns" in typo.output and "costs money" not in typo.output
    assert api.requests == []


def test_openai_compatible_backend(service: str, api: FakeAPI, tmp_path: Path) -> None:
    writer = Writer()
    api.default = lambda path, body: Reply(body=openai_completion(json.dumps(writer.good(body))))
    config = tmp_path / "synth.yaml"
    options = {"base_url": f"{api.url}/v1", "api_key": api.key, "max_retries": 0, "max_tokens": 256}
    config.write_text(json.dumps({"judge_options": options}))
    out = tmp_path / "openai.jsonl"
    args = ("--corpus", str(CORPUS), "--generator", "openai", "--config", str(config), "--yes")
    r = synthesize(service, out, *args, "--types", "lookup,out_of_corpus", "--per-type", "1")
    assert r.exit_code == 0, r.output
    assert [row.query_type for row in load_golden(out).rows] == ["lookup", UNANSWERABLE]
    body = api.requests[0].body
    assert api.requests[0].path == "/v1/chat/completions" and body["max_tokens"] == 256
    assert body["response_format"]["json_schema"]["name"] == TOOL_NAME
    assert body["response_format"]["json_schema"]["strict"] is True


class Scripted:
    """A generator whose proposals are given: each filter's drop, one by one."""

    name = "scripted"
    query_types = ("lookup", "exact_match", UNANSWERABLE)

    def __init__(self, proposals: dict[str, list[Proposal | Failure]]) -> None:
        self.proposals = proposals

    def chunks_needed(self, query_type: str) -> int:
        return 1

    def suitable(self, query_type: str, chunks: tuple[SourceChunk, ...]) -> bool:
        return True

    async def propose(self, task: Task) -> Proposal | Failure:
        return self.proposals[task.query_type].pop(0)

    def estimate(self, tasks: Any) -> CostEstimate | None:
        return None

    def actual(self) -> CostActual | None:
        return None

    async def aclose(self) -> None:
        return None


async def test_each_filter_names_its_reason(service: str) -> None:
    chunks = read_corpus(CORPUS).chunks
    lacy = next(c for c in chunks if c.id == "hotpot:Blue_Lacy")
    sentence = "The Lacy was first recognized in 2001 by the Texas Senate."
    assert sentence in lacy.text
    question = "Which state's Senate recognized the Blue Lacy dog breed in 2001?"
    script: dict[str, list[tuple[Proposal | Failure, bool]]] = {  # (proposal, from the real chunk)
        "lookup": [
            (Failure("backend_error", "HTTP 529"), False),
            (Proposal("   ", "x", (sentence,)), False),
            (Proposal("Which Senate recognized the Blue Lacy in 2001?", "Texas", ("made-up quote",)), False),
            (
                Proposal(
                    "Did the Texas Senate recognize the Blue Lacy in 2001?", "Texas Senate", (sentence,)
                ),
                False,
            ),
            (Proposal(question, "Texas", (sentence,)), True),
            (Proposal(question.upper(), "Texas", (sentence,)), False),
        ],
        "exact_match": [(Proposal("When did Texas recognize the Blue Lacy?", "1999", (sentence,)), False)],
        UNANSWERABLE: [
            (
                Proposal(
                    "What did the Texas Senate say about the Blue Lacy in 2001?", missing="Texas Senate"
                ),
                False,
            ),
            (Proposal("Which breeder in Oslo first showed the Blue Lacy?", missing="Oslo"), False),
        ],
    }
    gen = Scripted({t: [p for p, _ in steps] for t, steps in script.items()})
    # Tasks on copies of the chunk, so that a kept row does not retire the ones after it.
    tasks = {
        t: [
            Task(t, (lacy if real else SourceChunk(f"copy-{t}-{i}", lacy.title, lacy.text),))
            for i, (_, real) in enumerate(steps)
        ]
        for t, steps in script.items()
    }
    target = make_target(f"{service}/query")
    try:
        report = await run_synthesis(chunks, gen, target, tasks, dict.fromkeys(script, 2))
    finally:
        await target.aclose()
    assert {t: dict(c.dropped) for t, c in report.by_type.items()} == {
        "lookup": {
            "backend_error": 1,
            "malformed": 1,
            "answer_not_in_source": 1,
            "answer_in_question": 1,
            "duplicate": 1,
        },
        "exact_match": {"answer_not_in_source": 1},  # 1999 is not what the chunk says
        UNANSWERABLE: {"answer_in_corpus": 1},
    }
    assert [(r.query, r.relevant_chunk_ids) for r in report.rows] == [  # in the order kept
        ("Which breeder in Oslo first showed the Blue Lacy?", []),
        (question, [lacy.id]),
    ]
