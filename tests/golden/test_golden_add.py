"""`rag-monitor golden add`: a production record of a results file as a golden row, appended only
when the file with it validates and holds no row of the same trace or query."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any

import typer
import yaml
from typer.testing import CliRunner

from monitor.cli.golden import register
from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.results import encode_result, result_line
from monitor.golden import load_golden
from monitor.judge.lexical import LexicalJudge

REPO = Path(__file__).resolve().parents[2]
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
OTHER = "00f067aa0ba902b7a3ce929d0e0e4736"


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _record(
    trace_id: str, query: str, answer: str, chunks: list[Chunk], query_type: str = "lookup"
) -> RagRecord:
    return RagRecord(
        trace_id=trace_id, span_id="00f067aa0ba902b7", service="svc", query=query, query_type=query_type,
        chunks=chunks, answer=answer,
    )  # fmt: skip


def _results(path: Path, *records: RagRecord, clipped: dict[str, int] | None = None) -> Path:
    """The lines the judge stage writes: each record judged by the offline judge."""
    judge = LexicalJudge()

    async def lines() -> bytes:
        out = b""
        for r in records:
            j = await judge.judge(r)
            out += encode_result(
                result_line(r, sampling_weight=4.0, query_type_source="span", clipped=clipped, judgement=j)
            )
        return out

    path.write_bytes(b'{"not a results line"\n' + asyncio.run(lines()))
    return path


def _failure() -> RagRecord:
    return _record(
        TRACE,
        "When was the Oslo office opened?",
        "The Oslo office opened in 1999.",
        [
            Chunk("c7", "The Bergen office opened in 2004.", 0.8),
            Chunk("c9", "Opening hours are 9 to 5.", 0.4),
        ],
    )


def _golden(path: Path) -> Path:
    """Five valid rows of the example set."""
    lines = (REPO / "examples" / "golden.jsonl").read_text().splitlines()[:5]
    path.write_text("\n".join(lines) + "\n")
    return path


def _add(*args: str) -> Any:
    return CliRunner().invoke(_cli(), ["golden", "add", *args])


def test_a_production_failure_becomes_a_valid_golden_row(tmp_path: Path) -> None:
    results = _results(tmp_path / "results.jsonl", _failure())
    golden = _golden(tmp_path / "golden.jsonl")
    before = golden.read_text()
    out = _add(
        "--results", str(results), "--trace-id", TRACE.upper(), "--golden", str(golden),
        "--relevant-chunk", "c7", "--relevant-chunk", "oslo-17",
        "--reference-answer", "The Oslo office opened in 2011.",
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert f"row 'prod-{TRACE[:16]}' (trace {TRACE}, source: production) added" in out.output
    assert "chunk oslo-17 was not retrieved for this trace" in out.output
    text = golden.read_text()
    assert text.startswith(before)  # the rows before are untouched
    row = json.loads(text.splitlines()[-1])
    assert row == {
        "id": f"prod-{TRACE[:16]}",
        "query": "When was the Oslo office opened?",
        "query_type": "lookup",
        "relevant_chunk_ids": ["c7", "oslo-17"],
        "reference_answer": "The Oslo office opened in 2011.",
        "answerable": True,
        "relevant_chunks": [{"id": "c7", "content": "The Bergen office opened in 2004."}],
        "source": "production",
        "trace_id": TRACE,
        "added_on": dt.datetime.now(dt.UTC).date().isoformat(),
    }
    check = load_golden(golden)
    assert check.ok and len(check.rows) == 6
    assert not any("unknown keys" in w.message for w in check.warnings)  # provenance is schema
    validated = CliRunner().invoke(_cli(), ["golden", "validate", str(golden)])
    assert validated.exit_code == 0 and "6 rows OK" in validated.output


def test_duplicates_are_refused_with_the_existing_row_named(tmp_path: Path) -> None:
    first = _failure()
    same_query = _record(OTHER, "  when was the OSLO office opened? ", "In 1999.", first.chunks)
    results = _results(tmp_path / "results.jsonl", first, same_query)
    golden = _golden(tmp_path / "golden.jsonl")
    args = ["--results", str(results), "--golden", str(golden), "--relevant-chunk", "c7"]
    assert _add("--trace-id", TRACE, *args).exit_code == 0
    after = golden.read_text()

    again = _add("--trace-id", TRACE, "--id", "another-id", *args)
    assert again.exit_code == 2
    assert f"duplicate: trace {TRACE} is already row 'prod-{TRACE[:16]}' (line 6)" in again.output
    query = _add("--trace-id", OTHER, *args)
    assert query.exit_code == 2
    assert f"duplicate: the same query is already row 'prod-{TRACE[:16]}' (line 6)" in query.output
    # An existing hand-made row with the same query is named by its own id and line.
    example = json.loads(after.splitlines()[1])
    golden.write_text(after)
    results2 = _results(
        tmp_path / "r2.jsonl", _record(OTHER, example["query"], "x", [Chunk("c1", "text", 1.0)])
    )
    named = _add(
        "--results", str(results2), "--trace-id", OTHER, "--golden", str(golden), "--relevant-chunk", "c1"
    )
    assert named.exit_code == 2
    assert f"the same query is already row {example['id']!r} (line 2)" in named.output
    assert golden.read_text() == after  # nothing written by any refusal


def test_a_row_that_would_not_validate_is_not_written(tmp_path: Path) -> None:
    results = _results(tmp_path / "results.jsonl", _failure())
    golden = _golden(tmp_path / "golden.jsonl")
    before = golden.read_text()
    base = ["--results", str(results), "--trace-id", TRACE, "--golden", str(golden)]
    no_chunk = _add(*base)  # answerable, but the reviewer named no relevant chunk
    assert no_chunk.exit_code == 2
    assert f"line 6: row 'prod-{TRACE[:16]}': answerable but no relevant_chunk_ids" in no_chunk.output
    bad_type = _add(*base, "--relevant-chunk", "c7", "--query-type", "gossip")
    assert bad_type.exit_code == 2 and "query_type 'gossip' not in" in bad_type.output
    clash = _add(*base, "--relevant-chunk", "c7", "--id", json.loads(before.splitlines()[0])["id"])
    assert clash.exit_code == 2 and "duplicate id" in clash.output
    missing = _add("--results", str(results), "--trace-id", OTHER, "--golden", str(golden))
    assert missing.exit_code == 2 and f"trace {OTHER} has no record with a query" in missing.output
    for bad in ("", "not-hex"):  # an empty id would match every line
        refused = _add(
            "--results", str(results), "--trace-id", bad, "--golden", str(golden), "--relevant-chunk=c7"
        )
        assert refused.exit_code == 2 and "is not a hex trace id" in refused.output
    unreadable = _add("--results", str(tmp_path / "nope.jsonl"), "--trace-id", TRACE, "--golden", str(golden))
    assert unreadable.exit_code == 2 and "cannot read" in unreadable.output
    assert golden.read_text() == before
    # An unanswerable one needs no chunk: a refusal is what the row expects.
    ok = _add(*base, "--unanswerable", "--relevant-chunk", "c7")
    assert ok.exit_code == 0, ok.output
    assert "chunk c7 ignored: an unanswerable row lists no relevant chunk" in ok.output
    row = load_golden(golden).rows[-1]
    assert row.answerable is False and row.relevant_chunk_ids == [] and row.relevant_chunks is None


def test_content_controls_are_said_on_the_row(tmp_path: Path) -> None:
    """Text the instrumentation redacted or truncated, chunk text never captured and a sample the
    ingest stage clipped: the row says so, as the reviewer would want to know before replaying it."""
    redacted = _record(
        TRACE,
        "Why was [EMAIL] charged twice on [CARD]?",
        "Because of a retry." + "…[truncated 812 chars]",
        [Chunk("c1", "Refunds take 5 days.", 0.9), Chunk("c2", "", 0.5)],
    )
    results = _results(
        tmp_path / "results.jsonl",
        redacted,
        clipped={"chunks_dropped": 3, "texts_clipped": 0, "chars_clipped": 0},
    )
    golden = tmp_path / "new" / "golden.jsonl"  # created
    out = _add(
        "--results", str(results), "--trace-id", TRACE, "--golden", str(golden), "--relevant-chunk", "c1"
    )
    assert out.exit_code == 0, out.output
    row = load_golden(golden).rows[0]
    assert row.content_controls == [
        "query: redacted ([CARD], [EMAIL])",
        "answer: truncated at the source",
        "chunk c2: not captured",
        "sample clipped: chunks_dropped 3",
    ]
    assert "content controls: query: redacted ([CARD], [EMAIL])" in out.output
    clean = _results(
        tmp_path / "clean.jsonl", _record(OTHER, "Opening hours?", "9 to 5.", [Chunk("c9", "Open 9 to 5.")])
    )
    _add("--results", str(clean), "--trace-id", OTHER, "--golden", str(golden), "--relevant-chunk", "c9")
    assert load_golden(golden).rows[1].content_controls is None


def test_rows_are_added_in_the_file_s_own_format(tmp_path: Path) -> None:
    results = _results(tmp_path / "results.jsonl", _failure())
    rows = [json.loads(x) for x in (REPO / "examples" / "golden.jsonl").read_text().splitlines()[:3]]
    as_json = tmp_path / "g.json"
    as_json.write_text(json.dumps(rows, indent=2))
    as_yaml = tmp_path / "g.yaml"
    as_yaml.write_text(yaml.safe_dump(rows, sort_keys=False))
    wrapped = tmp_path / "w.json"
    wrapped.write_text(json.dumps({"rows": rows}))
    for path in (as_json, as_yaml):
        out = _add(
            "--results", str(results), "--trace-id", TRACE, "--golden", str(path), "--relevant-chunk", "c7"
        )
        assert out.exit_code == 0, out.output
        check = load_golden(path)
        assert check.ok and [r.id for r in check.rows][:3] == [r["id"] for r in rows]
        assert check.rows[3].trace_id == TRACE and check.rows[3].source == "production"
    refused = _add(
        "--results", str(results), "--trace-id", TRACE, "--golden", str(wrapped), "--relevant-chunk", "c7"
    )
    assert refused.exit_code == 2 and "array of rows only" in refused.output
    assert json.loads(wrapped.read_text()) == {"rows": rows}
