"""What the `monitor.instrument` tests share: a small decorated RAG service (`handle` calling
`retrieve` and `generate`), and what the sidecar makes of spans (`records`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

from monitor.contracts.model import RagRecord
from monitor.ingest.assemble import build_record
from monitor.ingest.decode import decode
from monitor.instrument import trace_generator, trace_request, trace_retriever
from monitor.kafka.config import Encoding

HITS = [
    {"id": "c1", "content": "Paris is the capital of France.", "score": 0.91},
    {"id": "c2", "content": "Lyon is a city in France.", "score": 0.42},
]


def records(spans: Sequence[ReadableSpan]) -> dict[str, RagRecord]:
    """What the sidecar makes of these spans: OTLP protobuf → decode → assemble, per trace."""
    decoded = decode(bytes(encode_spans(spans).SerializeToString()), Encoding.OTLP_PROTO)
    assert decoded.error is None and not decoded.problems, (decoded.error, decoded.problems)
    by_trace: dict[str, list[Any]] = {}
    for s in decoded.spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    out = {}
    for tid, group in by_trace.items():
        rec, reason = build_record(tid, group)
        assert rec is not None, reason
        out[tid] = rec
    return out


def by_name(spans: Sequence[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


@trace_retriever(name="retrieve")
def retrieve(query: str, k: int = 2) -> list[dict[str, Any]]:
    return HITS[:k]


@trace_generator(name="generate", model="m-test")
def generate(query: str, hits: list[dict[str, Any]]) -> str:
    return "Paris." if hits else "I don't know."


@trace_request(name="request", query_type="lookup")
def handle(query: str) -> dict[str, Any]:
    hits = retrieve(query)
    return {"answer": generate(query, hits), "chunks": hits}
