"""Golden text round-trips any Unicode in every format (issue 38 item 8): a query with NEL
(U+0085) was written to YAML and read back as "nel x"; a JSONL row holding U+2028 or NEL could not
be added (the reader split lines with `str.splitlines()`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.results import result_line
from monitor.golden import load_golden
from monitor.golden.production import add_production_row, production_row
from monitor.golden.synthesize import read_corpus
from monitor.judge.lexical import LexicalJudge

# Each a line break to some reader (str.splitlines, YAML), none a line break in the text.
BREAKS = ["\x85", "\u2028", "\u2029", "\x1c", "\x0b", "\x0c", "\t"]


def _row(i: int, text: str) -> tuple[object, list[str]]:
    record = RagRecord(
        trace_id=f"{i + 1:016x}" * 2, span_id="00f067aa0ba902b7", service="svc", query=f"q{i} {text}",
        query_type="lookup", answer=f"a {text}", chunks=[Chunk("c1", f"chunk {text}", 0.9)],
    )  # fmt: skip
    line = result_line(
        record,
        sampling_weight=1.0,
        query_type_source="span",
        judgement=asyncio.run(LexicalJudge().judge(record)),
    )
    return production_row(line, relevant_chunk_ids=["c1"], reference_answer=f"ref {text}")


@pytest.mark.parametrize("suffix", ["jsonl", "yaml", "json"])
def test_rows_with_unicode_line_breaks_round_trip(tmp_path: Path, suffix: str) -> None:
    golden = tmp_path / f"golden.{suffix}"
    wanted = []
    for i, brk in enumerate(BREAKS):
        text = f"nel{brk}x"
        row, _ = _row(i, text)
        add_production_row(golden, row)  # type: ignore[arg-type]
        wanted.append((f"q{i} {text}", f"ref {text}", f"chunk {text}"))
    check = load_golden(golden)
    assert check.ok, check.errors[:3]
    got = [
        (r.query, r.reference_answer, r.relevant_chunks[0].content) for r in check.rows if r.relevant_chunks
    ]
    assert got == wanted


def test_a_corpus_line_holding_u2028_is_one_chunk(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "c1", "text": "one\u2028two\x85three"}\n{"id": "c2", "text": "four"}\n')
    read = read_corpus(corpus)
    assert [(c.id, c.text) for c in read.chunks] == [("c1", "one\u2028two\x85three"), ("c2", "four")]
    assert not read.skipped
