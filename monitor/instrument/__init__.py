"""Tracing for an existing RAG service: decorators, exporters and replay marking.

    from monitor.instrument import configure, trace_request, trace_retriever, trace_generator

    configure("my-rag", exporter="kafka", kafka_bootstrap_servers="kafka:9092")

    @trace_retriever
    def search(query: str, k: int) -> list[Hit]: ...

    @trace_generator(model="gpt-4o-mini")
    def generate(query: str, hits: list[Hit]) -> str: ...

    @trace_request(query_type=classify)
    async def answer(query: str) -> dict: ...

The spans use the OpenInference attributes that `monitor.ingest.dialects` decodes, so the sidecar turns
each request into a RAG record. See `decorators` and `spans` (semantics; `specs`, `extract` and
`attributes` for what each span records), `content` (capture switches, truncation, redaction), `provider`
(`configure`), `kafka` (the direct exporter; needs `rag-monitor[kafka]`), `replay` and `web` (replay
marking).
"""

from monitor.instrument.content import (
    TRUNCATION_MARK,
    ContentPolicy,
    Redactor,
    default_redactor,
    luhn_valid,
    truncate,
)
from monitor.instrument.decorators import trace_generator, trace_request, trace_retriever
from monitor.instrument.extract import Document, DocumentExtractor, default_answer, default_document
from monitor.instrument.kafka import KafkaSpanExporter, encode_trace_messages
from monitor.instrument.provider import CountingExporter, Instrumentation, configure, current, shutdown
from monitor.instrument.replay import replay_scope
from monitor.instrument.spans import RagSpan, internal_errors, rag_span, set_query_type
from monitor.instrument.stats import SpanStats
from monitor.instrument.web import REPLAY_HEADER, ReplayMiddleware, is_replay

__all__ = [
    "REPLAY_HEADER",
    "TRUNCATION_MARK",
    "ContentPolicy",
    "CountingExporter",
    "Document",
    "DocumentExtractor",
    "Instrumentation",
    "KafkaSpanExporter",
    "RagSpan",
    "Redactor",
    "ReplayMiddleware",
    "SpanStats",
    "configure",
    "current",
    "default_answer",
    "default_document",
    "default_redactor",
    "encode_trace_messages",
    "internal_errors",
    "is_replay",
    "luhn_valid",
    "rag_span",
    "replay_scope",
    "set_query_type",
    "shutdown",
    "trace_generator",
    "trace_request",
    "trace_retriever",
    "truncate",
]
