"""The service's own RED metrics end to end: traces with known durations, statuses, token counts
and models go through the embedded broker into a running sidecar, and its `/metrics` (scraped
over HTTP) shows per query type and release the duration histograms of the request and its
retriever and generator stages, requests and errors, tokens, USD at the price table's prices, a
model missing from the table counted as unpriced, and hostile values rejected, not exported."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from prometheus_client.parser import text_string_to_metric_families
from support import eventually, running, sample, settings_for, to_otlp_json

from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import produce
from monitor.outputs.http import MetricsServer

MS = 1_000_000
DOCS = {
    "retrieval.documents.0.document.id": "d1",
    "retrieval.documents.0.document.content": "The Rhine carries 2,330 cubic metres a second.",
    "retrieval.documents.0.document.score": 0.8,
}


def trace(
    release: str,
    query_type: str,
    root: tuple[int, int],
    retrievers: list[tuple[int, int]],
    llms: list[tuple[int, int, dict[str, Any]]],
    *,
    error: bool = False,
) -> bytes:
    """One RAG trace from the real SDK, each span's start and end in ms after a common origin
    (an end before its start is kept as given); OTLP protobuf as the kafkaexporter writes it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "rag-svc", "service.version": release})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    t0 = time.time_ns() - 10_000 * MS
    root_attrs = {
        "openinference.span.kind": "CHAIN",
        "input.value": "How much water does the Rhine carry?",
        "output.value": "2,330 cubic metres a second.",
        "rag.query_type": query_type,
    }
    with tracer.start_as_current_span(
        "rag", attributes=root_attrs, start_time=t0 + root[0] * MS, end_on_exit=False
    ) as span:
        for start, end in retrievers:
            child = tracer.start_span(
                "retrieve",
                attributes={"openinference.span.kind": "RETRIEVER", **DOCS},
                start_time=t0 + start * MS,
            )
            child.end(end_time=t0 + end * MS)
        for start, end, attrs in llms:
            child = tracer.start_span(
                "generate",
                attributes={
                    "openinference.span.kind": "LLM",
                    "llm.output_messages.0.message.content": "2,330 cubic metres a second.",
                    **attrs,
                },
                start_time=t0 + start * MS,
            )
            child.end(end_time=t0 + end * MS)
        if error:
            span.set_status(Status(StatusCode.ERROR, "generator timed out"))
        span.end(end_time=t0 + root[1] * MS)
    provider.shutdown()
    return bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())


def tokens(model: str, prompt: int, completion: int) -> dict[str, Any]:
    return {
        "llm.model_name": model,
        "llm.token_count.prompt": prompt,
        "llm.token_count.completion": completion,
    }


TRACES = [
    # v1.4.1, lookup: an answer priced at gpt-4o-mini's list price; a failed one from a model
    # the table does not have (tokens counted, cost not).
    trace("v1.4.1", "lookup", (0, 800), [(10, 60)], [(100, 700, tokens("gpt-4o-mini", 1000, 200))]),
    trace(
        "v1.4.1",
        "lookup",
        (0, 1500),
        [(0, 100)],
        [(200, 1400, tokens("in-house-llm", 500, 100))],
        error=True,
    ),
    # v1.4.2, comparison: two retrievals and two generations (their envelopes are the stages),
    # a dated model id priced by its family's prefix.
    trace(
        "v1.4.2",
        "comparison",
        (0, 3000),
        [(0, 100), (50, 300)],
        [
            (400, 1400, tokens("claude-haiku-4-5-20251001", 100, 10)),
            (1500, 2900, tokens("claude-haiku-4-5-20251001", 200, 20)),
        ],
    ),
    # v1.4.2, lookup, hostile: a retriever that ends before it starts, and token counts that are
    # negative and absurdly large.
    trace(
        "v1.4.2",
        "lookup",
        (0, 200),
        [(150, 50)],
        [(60, 190, {"llm.token_count.prompt": -5, "llm.token_count.completion": 10**12})],
    ),
]


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
async def test_red_metrics_per_query_type_and_release(
    broker: EmbeddedBroker, topic: str, tmp_path: Path, encoding: str
) -> None:
    bs = broker.bootstrap_servers
    settings = settings_for(bs, topic, None, kafka={"encoding": encoding}, pipeline={"role": "ingest"})
    values = TRACES if encoding == "otlp_proto" else [to_otlp_json(v) for v in TRACES]
    async with running(settings) as sidecar:
        server = MetricsServer(sidecar.metrics.registry, "127.0.0.1", 0, sidecar.readiness)
        port = server.start()
        try:
            await produce(bs, topic, [(None, v) for v in values])

            def counted() -> float:
                return sum(
                    sample(sidecar, "ragmon_requests_total", service="rag-svc", query_type=qt, release=rel)
                    for qt, rel in (("lookup", "v1.4.1"), ("comparison", "v1.4.2"), ("lookup", "v1.4.2"))
                )

            await eventually(lambda: counted() == 4, what="4 requests counted")
            got = scrape(port)
        finally:
            server.stop()

    def value(name: str, qt: str, release: str, **labels: str) -> float:
        key = {"service": "rag-svc", "query_type": qt, "release": release, **labels}
        return got.get((name, frozenset(key.items())), 0.0)

    def hist(qt: str, release: str, stage: str) -> tuple[float, float, dict[str, float]]:
        name = "ragmon_request_duration_seconds"
        buckets = {
            le: value(f"{name}_bucket", qt, release, stage=stage, le=le)
            for le in ("0.05", "0.1", "1.0", "2.5")
        }
        return (
            value(f"{name}_count", qt, release, stage=stage),
            value(f"{name}_sum", qt, release, stage=stage),
            buckets,
        )

    # v1.4.1 lookup: requests of 0.8 s and 1.5 s, retrievals of 50 and 100 ms, generations of
    # 0.6 s and 1.2 s; one of the two failed.
    n, total, le = hist("lookup", "v1.4.1", "request")
    assert n == 2 and total == pytest.approx(2.3) and le["1.0"] == 1 and le["2.5"] == 2
    n, total, le = hist("lookup", "v1.4.1", "retrieval")
    assert n == 2 and total == pytest.approx(0.15) and le["0.05"] == 1 and le["0.1"] == 2
    n, total, _ = hist("lookup", "v1.4.1", "generation")
    assert n == 2 and total == pytest.approx(1.8)
    assert value("ragmon_requests_total", "lookup", "v1.4.1") == 2
    assert value("ragmon_request_errors_total", "lookup", "v1.4.1") == 1
    assert value("ragmon_generator_tokens_total", "lookup", "v1.4.1", type="input") == 1500
    assert value("ragmon_generator_tokens_total", "lookup", "v1.4.1", type="output") == 300
    # Only gpt-4o-mini's call is priced ($0.15 / $0.60 per million); in-house-llm's is not.
    assert value("ragmon_generator_cost_usd_total", "lookup", "v1.4.1") == pytest.approx(
        (1000 * 0.15 + 200 * 0.60) / 1e6
    )
    assert value("ragmon_generator_unpriced_total", "lookup", "v1.4.1") == 1

    # v1.4.2 comparison: the stages are the envelopes of their spans (300 ms, 2.5 s).
    assert hist("comparison", "v1.4.2", "request")[:2] == (1, pytest.approx(3.0))
    assert hist("comparison", "v1.4.2", "retrieval")[:2] == (1, pytest.approx(0.3))
    assert hist("comparison", "v1.4.2", "generation")[:2] == (1, pytest.approx(2.5))
    assert value("ragmon_request_errors_total", "comparison", "v1.4.2") == 0
    assert value("ragmon_generator_tokens_total", "comparison", "v1.4.2", type="input") == 300
    assert value("ragmon_generator_tokens_total", "comparison", "v1.4.2", type="output") == 30
    assert value("ragmon_generator_cost_usd_total", "comparison", "v1.4.2") == pytest.approx(
        (300 * 1.0 + 30 * 5.0) / 1e6  # claude-haiku-4-5's price, by prefix
    )
    assert value("ragmon_generator_unpriced_total", "comparison", "v1.4.2") == 0

    # v1.4.2 lookup, hostile: the request is counted; the inverted retriever is not a duration,
    # the absurd token counts are not tokens; each was rejected and counted as such.
    assert hist("lookup", "v1.4.2", "request")[:2] == (1, pytest.approx(0.2))
    assert hist("lookup", "v1.4.2", "retrieval")[0] == 0
    assert hist("lookup", "v1.4.2", "generation")[:2] == (1, pytest.approx(0.13))
    assert value("ragmon_generator_tokens_total", "lookup", "v1.4.2", type="input") == 0
    assert value("ragmon_generator_tokens_total", "lookup", "v1.4.2", type="output") == 0
    assert value("ragmon_generator_unpriced_total", "lookup", "v1.4.2") == 0
    assert got[("ragmon_rejected_total", frozenset({("reason", "bad_timestamp")}))] == 1
    assert got[("ragmon_rejected_total", frozenset({("reason", "bad_attribute")}))] == 2
    durations = [v for (name, _), v in got.items() if name.startswith("ragmon_request_duration_seconds")]
    assert durations and min(durations) >= 0
