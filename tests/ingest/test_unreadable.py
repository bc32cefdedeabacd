"""A trace that looks like a RAG request but cannot be read is counted, by reason and
instrumentation scope, and named in the log by its span names and attribute keys, never its
values; a health check or an index build stays harmless `not_rag`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support import eventually, running, sample, settings_for

from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import produce

SECRET = "my card is 4111 1111 1111 1111"


def trace_of(scope: str, spans: list[tuple[str, dict[str, Any]]]) -> bytes:
    """One trace written by a tracer named `scope` (the instrumentation scope), as the
    kafkaexporter writes it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(scope)
    (name, attrs), children = spans[0], spans[1:]
    with tracer.start_as_current_span(name, attributes=attrs):
        for child, child_attrs in children:
            with tracer.start_as_current_span(child, attributes=child_attrs):
                pass
    provider.shutdown()
    return bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())


# The Vercel AI SDK's spans (tracer "ai"): a request this decoder does not read.
VERCEL = [
    ("ai.generateText", {"ai.operationId": "ai.generateText", "ai.prompt": SECRET, "ai.model.id": "gpt-4o"}),
    ("ai.generateText.doGenerate", {"ai.response.text": "an answer", "ai.usage.promptTokens": 12}),
]


@pytest.mark.kafka
async def test_an_unknown_instrumentation_is_counted_unreadable_by_scope(
    broker: EmbeddedBroker, topic: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bs = broker.bootstrap_servers
    settings = settings_for(bs, topic, tmp_path / "results.jsonl")
    unknown = [trace_of("ai", VERCEL) for _ in range(5)]
    health = trace_of("opentelemetry.instrumentation.fastapi", [("GET /healthz", {"http.route": "/healthz"})])
    index_build = trace_of(
        "openinference.instrumentation.llama_index",
        [("SentenceSplitter.__call__", {"openinference.span.kind": "CHAIN", "input.value": '{"nodes": []}'})],
    )
    caplog.set_level(logging.WARNING, logger="monitor.ingest.unreadable")
    async with running(settings) as sidecar:
        await produce(bs, topic, [(None, v) for v in [*unknown, health, index_build]])

        def unreadable() -> float:
            return sample(sidecar, "ragmon_unreadable_traces_total", reason="unreadable", scope="ai")

        await eventually(lambda: unreadable() == 5, what="five unreadable traces")
        await eventually(
            lambda: sample(sidecar, "ragmon_rejected_total", reason="not_rag") == 2, what="two not_rag"
        )
        assert sample(sidecar, "ragmon_rejected_total", reason="unreadable") == 5
        assert sample(sidecar, "ragmon_records_total", service="svc", query_type="unknown") == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "monitor.ingest.unreadable"]
    assert len(lines) == 1, lines  # once per reason and scope per minute, not per trace
    assert "'ai'" in lines[0] and "ai.prompt" in lines[0] and "ai.response.text" in lines[0]
    assert "ai.generateText.doGenerate" in lines[0]
    assert SECRET not in caplog.text and "an answer" not in caplog.text  # keys, never values
