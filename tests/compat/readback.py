"""The sidecar's reading of a compat app's spans, without the libraries: the export bodies an app
sent (captured, or received live) through the decoder and assembler the ingest stage uses, split
by trace as the Collector writes them; and the comparison with what the app says it did."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.contracts.model import RagRecord
from monitor.ingest.assemble import Assembler
from monitor.ingest.config import AssemblyConfig
from monitor.ingest.decode import Encoding, decode
from monitor.kafka.offsets import MessageRef
from tests.compat.apps.harness import read_capture
from tests.compat.receiver import split_by_trace

CAPTURES = Path(__file__).parent / "captures"
# The record's fields an app's `extra` may state (others are notes for the reader).
RECORD_FIELDS = frozenset({"model", "service", "release", "session_id", "user_id"})


@dataclass(frozen=True)
class Limit:
    """What an instrumentation's spans do not carry for one request style, so cannot be read."""

    why: str
    record: bool = True  # False: no record can be made (the trace is counted under a reason)
    chunks: bool = True  # False: the record has no chunks


# Per (capture, style): checked as stated, so a fix upstream (or here) shows up as a failure to
# update, never as a silent pass.
LIMITS = {
    ("dspy_openinference", "dspy-function"): Limit(
        "a plain Python function as retriever writes no retriever span: the passages are only in the prompt",
        chunks=False,
    ),
    ("llamaindex_openllmetry", "query_streaming"): Limit(
        "OpenLLMetry never ends a streamed query's spans, and a completion model's streamed text is on no"
        " span: the trace is counted as missing_answer",
        record=False,
    ),
}


def makes_record(name: str, style: str) -> bool:
    """Whether app `name`'s request of `style` can become a record (see `LIMITS`)."""
    limit = LIMITS.get((name, style))
    return limit is None or limit.record


@dataclass
class Reading:
    records: list[RagRecord] = field(default_factory=list)
    rejects: Counter[str] = field(default_factory=Counter)  # per trace, the reason it made no record


def read(bodies: list[bytes]) -> Reading:
    """Every trace in `bodies`, as the ingest stage assembles it (the lean decode included)."""
    asm = Assembler(AssemblyConfig(grace_seconds=0, timeout_seconds=3600))
    out: list[Any] = []
    reading = Reading()
    for i, (_, value) in enumerate(m for body in bodies for m in split_by_trace(body)):
        decoded = decode(value, Encoding.OTLP_PROTO, for_assembly=True)
        assert decoded.error is None, decoded.detail
        asm.add_spans(decoded.spans, MessageRef(0, i), len(value), 0.0, out, decoded.others)
    out.extend(asm.flush(complete_only=False))
    for f in out:
        if f.record is not None:
            reading.records.append(f.record)
        else:
            reading.rejects[str(f.reason)] += 1
    return reading


def expected_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mismatches(name: str, expected: list[dict[str, Any]], records: list[dict[str, Any]]) -> list[str]:
    """What differs between the requests app `name` made and the records (results-line dicts:
    query, answer, chunks [{id, content}]) read from its spans; [] when every request reads right
    (or as its `LIMITS` entry says) and no record stands for anything else (an index build, an
    embedding call)."""
    problems = []
    by_query: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_query.setdefault(r.get("query") or "", []).append(r)
    requests = [e for e in expected if e["kind"] == "request"]
    for e in requests:
        limit = LIMITS.get((name, e["style"]), Limit(""))
        got = by_query.get(e["query"], [])
        if len(got) != int(limit.record):
            problems.append(f"{e['style']}: {len(got)} records with query {e['query']!r}")
            continue
        if not got:
            continue
        r = got[0]
        if r.get("answer") != e["answer"]:
            problems.append(f"{e['style']}: answer {str(r.get('answer'))[:120]!r}")
        chunks = r.get("chunks") or []
        if not limit.chunks:
            if chunks:
                problems.append(f"{e['style']}: chunks where the spans were thought to carry none")
            continue
        if e["chunk_ids"] and [c.get("id") for c in chunks] != e["chunk_ids"]:
            problems.append(f"{e['style']}: chunk ids {[c.get('id') for c in chunks]}")
        if e["chunk_texts"] and [c.get("content") for c in chunks] != e["chunk_texts"]:
            problems.append(f"{e['style']}: chunk texts {[str(c.get('content'))[:60] for c in chunks]}")
        extra = e.get("extra", {})
        scores = [None if c.get("score") is None else round(c["score"], 4) for c in chunks]
        if "scores" in extra and scores != [round(x, 4) for x in extra["scores"]]:
            problems.append(f"{e['style']}: scores {scores}, not {extra['scores']}")
        for key in RECORD_FIELDS & extra.keys():
            if r.get(key) != extra[key]:
                problems.append(f"{e['style']}: {key} {r.get(key)!r}, not {extra[key]!r}")
    known = {e["query"] for e in requests}
    for r in records:
        if r.get("query") not in known:
            problems.append(f"a record that is no request: query {str(r.get('query'))[:120]!r}")
    return problems


def capture_names() -> list[str]:
    return sorted(p.name.removesuffix(".otlp") for p in CAPTURES.glob("*.otlp"))


def read_capture_file(name: str) -> tuple[list[dict[str, Any]], Reading]:
    expected = expected_lines(CAPTURES / f"{name}.expected.jsonl")
    return expected, read(read_capture(CAPTURES / f"{name}.otlp"))
