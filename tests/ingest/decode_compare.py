"""The comparison of the compiled `otlp_proto` decoder (`monitor/ingest/_wire.c`) with the pure-Python
reference (`both`, `taken`), and inputs shared beyond one test file: the bad-input corpus
(test_stage_feed.py), production-like traffic and the SAMPLE message, protobuf written by hand
(bench/fuzz.py imports this module).

`RAGMON_REQUIRE_COMPILED=1` (set by `make test`) turns a missing extension into a failure rather
than a skip (`needs_wire`).
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from typing import Any

import decode_cases as cases
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.trace import SpanKind
from support import sdk_trace

from monitor.contracts.model import Chunk, SpanFacts
from monitor.demo.workload import generate
from monitor.ingest import decode as decode_mod
from monitor.ingest import dialects
from monitor.ingest.decode import Decoded
from monitor.kafka.config import Encoding

WIRE = decode_mod.compiled_decoder()
REQUIRED = os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0")
needs_wire = pytest.mark.skipif(
    WIRE is None and not REQUIRED, reason="compiled decoder not built (no C compiler here)"
)


def on_path(wire: Any, value: bytes, encoding: Encoding, now: int, lean: bool = False) -> Decoded:
    saved = decode_mod._wire
    decode_mod._wire = wire
    try:
        return decode_mod.decode(value, encoding, now, for_assembly=lean)
    finally:
        decode_mod._wire = saved


def both(
    value: bytes,
    encoding: Encoding = Encoding.OTLP_PROTO,
    now_ns: int | None = None,
    *,
    for_assembly: bool = False,
) -> Decoded:
    """Decode on both paths, with and without `for_assembly`; they must agree to the last field and
    type (repr tells 1 from True), and `for_assembly` must only set inert spans aside and leave
    chunk text undecoded. Returns what `decode` would have."""
    assert WIRE is not None, "compiled decoder not built"
    now = time.time_ns() if now_ns is None else now_ns
    ref = on_path(None, value, encoding, now)
    out = on_path(WIRE, value, encoding, now)
    assert repr(out) == repr(ref)
    assert out == ref
    lean_ref = on_path(None, value, encoding, now, lean=True)
    lean = on_path(WIRE, value, encoding, now, lean=True)
    assert repr(lean) == repr(lean_ref)
    assert lean == lean_ref
    assert_set_aside(out, lean)
    return lean if for_assembly else out


def as_full(s: SpanFacts) -> SpanFacts:
    """A span of `for_assembly` as `decode` without it gives it: chunk text decoded (`Chunk.raw`
    holds it undecoded; never both)."""
    if not s.chunks:
        return s
    return dataclasses.replace(s, chunks=[Chunk(c.id, c.text, c.score) for c in s.chunks])


def assert_set_aside(full: Decoded, lean: Decoded) -> None:
    """`lean` is `full` less the inert spans after their trace's first, counted per trace, with
    its chunk text left undecoded."""
    assert (lean.error, lean.detail, lean.problems, lean.records) == (
        full.error,
        full.detail,
        full.problems,
        full.records,
    )
    kept = iter(lean.spans)
    k = next(kept, None)
    seen: set[str] = set()
    counted: dict[str, int] = {}
    for s in full.spans:
        if k is not None and repr(s) == repr(as_full(k)):
            seen.add(s.trace_id)
            k = next(kept, None)
        else:
            assert s.trace_id in seen and dialects.is_inert(s)
            counted[s.trace_id] = counted.get(s.trace_id, 0) + 1
    assert k is None and counted == lean.others


def taken(value: bytes, now_ns: int | None = None) -> Decoded:
    """`both`, and the compiled path decoded it itself (no hand-back to the reference)."""
    assert WIRE is not None
    now = time.time_ns() if now_ns is None else now_ns
    for lean in (False, True):
        assert WIRE.decode_spans(value, now, lean) is not None, "handed back to the reference path"
    return both(value, Encoding.OTLP_PROTO, now)


ROOT = {"openinference.span.kind": "CHAIN"}


def bad_input_corpus() -> list[bytes]:
    """tests/ingest/test_bad_input.py's messages (those the decoder sees), and a few of the same kind."""
    rng = random.Random(3)
    whole = generate(2, seed=11).messages[0].value
    values = [
        bytes(rng.randrange(256) for _ in range(500)),
        whole[: len(whole) // 2],
        b'{"resourceSpans": [',
        b"[1, 2, 3]",
        b'{"query": "caf\xe9 \xff", "answer": "x"}',
        b"\x0a" + bytes(rng.randrange(256) for _ in range(4096)),
        whole + b"\x00",
        whole.replace(b"rag.request", b"rag.r\xffquest"),
    ]
    values += [
        v
        for _, v in (
            sdk_trace([("rag", {**ROOT, "input.value": "a question with no answer"})]),
            sdk_trace([("rag", {**ROOT, "input.value": ["not", "a", "string"], "output.value": "x"})]),
            sdk_trace(
                [
                    ("rag", {**ROOT, "input.value": "q?", "output.value": "a."}),
                    (
                        "retrieve",
                        {
                            "openinference.span.kind": "RETRIEVER",
                            "retrieval.documents.0.document.id": "d1",
                            "retrieval.documents.0.document.score": "high",
                        },
                    ),
                ]
            ),
            sdk_trace(
                [("rag", {**ROOT, "input.value": "q?", "output.value": "a."})],
                start_ns=10**9,
                end_ns=2 * 10**9,
            ),
            sdk_trace([("rag", {**ROOT, "input.value": "q", "output.value": "a", "rag.query_type": "qt-1"})]),
        )
    ]
    return values


HTTP_SERVER = {
    "http.method": "POST",
    "http.scheme": "http",
    "http.host": "rag-svc:8000",
    "http.flavor": "1.1",
    "http.target": "/query",
    "http.url": "http://rag-svc:8000/query",
    "http.route": "/query",
    "http.status_code": 200,
    "http.user_agent": "python-httpx/0.27.0",
    "net.host.port": 8000,
    "net.peer.ip": "10.0.3.17",
}
DB = {
    "db.system": "postgresql",
    "db.name": "docs",
    "db.user": "rag",
    "db.statement": "SELECT id, body FROM chunks WHERE id = ANY(%s)",
    "net.peer.name": "pg",
    "net.peer.port": 5432,
}
CACHE = {"db.system": "redis", "db.statement": "GET embedding:7f3a", "db.redis.database_index": 0}


def production_trace(t: cases.Spans) -> None:
    """An HTTP root, a CHAIN below it, and DB, cache and HTTP client spans around the RAG ones."""
    with t.span("POST /query", **HTTP_SERVER), t.span("rag", **ROOT, **{"input.value": "q?"}) as root:
        with t.span("SELECT docs", **DB):
            pass
        with t.span("GET", **CACHE):
            pass
        with (
            t.span(
                "retrieve",
                **{
                    "openinference.span.kind": "RETRIEVER",
                    "input.value": "q?",
                    "retrieval.documents.0.document.id": "d1",
                    "retrieval.documents.0.document.content": "Paris is the capital.",
                    "retrieval.documents.0.document.score": 0.9,
                },
            ),
            t.span("POST", **{"http.method": "POST", "http.url": "http://embed/v1", "http.status_code": 200}),
        ):
            pass
        with t.span("generate", **{"openinference.span.kind": "LLM", "output.value": "Paris."}):
            pass
        root.set_attribute("output.value", "Paris.")
    with (
        t.span("GET /healthz", **{**HTTP_SERVER, "http.route": "/healthz", "http.target": "/healthz"}),
        t.tracer.start_as_current_span("internal", kind=SpanKind.INTERNAL, attributes={"x": [1, 2]}),
    ):
        pass


def _sample_request() -> ExportTraceServiceRequest:
    t = cases.Spans()
    cases.openinference_trace(t)
    production_trace(t)
    return encode_spans(t.finished)


SAMPLE = _sample_request()
SAMPLE_BYTES = bytes(SAMPLE.SerializeToString())


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _wrap(span: bytes) -> bytes:
    ss = b"\x12" + _varint(len(span)) + span
    rs = b"\x12" + _varint(len(ss)) + ss
    return b"\x0a" + _varint(len(rs)) + rs


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list):
        return AnyValue(array_value={"values": [_any(v) for v in value]})
    return AnyValue(string_value=value)
