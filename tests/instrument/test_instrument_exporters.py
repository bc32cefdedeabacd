"""`monitor.instrument`'s exporters against real receivers: the BatchSpanProcessor drops and counts
instead of blocking (a full queue, an unreachable Kafka), and the OTLP/HTTP exporter delivers to a
local receiver."""

from __future__ import annotations

import http.server
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from instrument_cases import handle
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from monitor.demo.broker import free_port
from monitor.ingest.assemble import build_record
from monitor.ingest.decode import decode
from monitor.instrument import KafkaSpanExporter, configure, replay_scope, shutdown
from monitor.kafka.config import Encoding

# --------------------------------------------------------------------------------------------
# Exporters: BatchSpanProcessor drops and counts instead of blocking


class _BlockedExporter(SpanExporter):
    def __init__(self) -> None:
        self.release = threading.Event()
        self.seen = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.seen += len(spans)
        return SpanExportResult.SUCCESS


def test_batch_queue_overflow_is_counted_not_blocking() -> None:
    blocked = _BlockedExporter()
    inst = configure(
        "svc", exporter=blocked, max_queue_size=16, max_export_batch_size=4, schedule_delay_millis=10
    )
    try:
        t0 = time.perf_counter()
        for i in range(100):
            handle(f"q{i}")
        assert time.perf_counter() - t0 < 2.0
        blocked.release.set()
        assert inst.force_flush(5_000)
        s = inst.stats.snapshot()
        assert s["dropped"] > 0 and s["exported"] == blocked.seen
        assert s["dropped"] + s["exported"] == 300
    finally:
        shutdown()


def test_kafka_unreachable_drops_and_never_blocks() -> None:
    port = free_port()  # nothing listens there: connection refused, reconnecting with backoff
    exporter = KafkaSpanExporter(f"127.0.0.1:{port}", "t", max_pending_messages=5, request_timeout_ms=2000)
    inst = configure("svc", exporter=exporter, schedule_delay_millis=5, max_export_batch_size=32)
    try:
        handle("warm-up")
        times = []
        for i in range(300):
            t0 = time.perf_counter()
            handle(f"q{i}")
            times.append(time.perf_counter() - t0)
        inst.provider.force_flush(5_000)  # type: ignore[union-attr]
        s = inst.stats.snapshot()
        assert s["exported"] == 0 and not exporter.connected
        assert 0 < exporter.pending <= 5
        assert s["dropped"] + exporter.pending_spans == 3 * 301
        med = statistics.median(times)
        p99 = sorted(times)[int(len(times) * 0.99)]
        assert med < 0.002 and p99 < 0.05, (med, p99)
        assert not exporter.force_flush(100)  # cannot be delivered: times out instead of hanging
        t0 = time.perf_counter()
        inst.shutdown()
        assert time.perf_counter() - t0 < 5
        assert inst.stats.snapshot()["dropped"] == 3 * 301  # what was still queued is dropped too
    finally:
        shutdown()


# --------------------------------------------------------------------------------------------
# OTLP/HTTP exporter against a local receiver


@dataclass
class _Receiver:
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)
    status: int = 200


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, _Receiver]]:
    state = _Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.paths.append(self.path)
            state.content_types.append(self.headers.get("Content-Type", ""))
            if state.status == 200:
                state.requests.append(ExportTraceServiceRequest.FromString(body))
            payload = ExportTraceServiceResponse().SerializeToString()
            self.send_response(state.status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", state
    finally:
        server.shutdown()
        server.server_close()


def test_otlp_http_exporter_to_local_receiver(otlp_receiver: tuple[str, _Receiver]) -> None:
    url, state = otlp_receiver
    inst = configure("svc-otlp", exporter="otlp", otlp_endpoint=url, schedule_delay_millis=20)
    try:
        with replay_scope():
            handle("replayed over otlp")
        handle("live over otlp")
        assert inst.force_flush(5_000)
        assert state.paths and set(state.paths) == {"/v1/traces"}
        assert set(state.content_types) == {"application/x-protobuf"}
        spans = [
            sp
            for req in state.requests
            for rs in req.resource_spans
            for ss in rs.scope_spans
            for sp in ss.spans
        ]
        assert len(spans) == 6 and inst.stats.snapshot() == {"exported": 6, "dropped": 0, "failed": 0}
        service = {
            kv.value.string_value
            for req in state.requests
            for rs in req.resource_spans
            for kv in rs.resource.attributes
            if kv.key == "service.name"
        }
        assert service == {"svc-otlp"}
        decoded = [
            f for req in state.requests for f in decode(req.SerializeToString(), Encoding.OTLP_PROTO).spans
        ]
        by_trace: dict[str, list[Any]] = {}
        for f in decoded:
            by_trace.setdefault(f.trace_id, []).append(f)
        got = {}
        for tid, group in by_trace.items():
            rec, _ = build_record(tid, group)
            assert rec is not None
            got[rec.query] = rec
        assert got["replayed over otlp"].replay and not got["live over otlp"].replay
        assert got["live over otlp"].answer == "Paris." and [c.id for c in got["live over otlp"].chunks] == [
            "c1",
            "c2",
        ]
        state.status = 400  # not retryable: counted as failed at once
        handle("rejected")
        inst.force_flush(5_000)
        assert inst.stats.snapshot()["failed"] == 3
    finally:
        shutdown()
