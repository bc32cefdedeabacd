"""An OTLP/HTTP traces receiver on loopback, and the Collector's kafkaexporter step after it: each
export request split by trace (`partition_traces_by_id: true`) and produced to Kafka keyed by the
trace id in hex, as `deploy/otel-collector.yaml` configures the Collector."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiokafka import AIOKafkaProducer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData


class Received:
    """The export bodies received, in order of arrival."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()

    def take(self) -> list[bytes]:
        with self.lock:
            out, self.bodies = self.bodies, []
        return out


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """`(endpoint URL for OTLPSpanExporter, what it received)`: protobuf bodies only, as the
    exporters send by default; anything else is answered 415."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_response(415)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            ExportTraceServiceRequest.FromString(body)  # a malformed body is the app's bug: fail loudly
            with received.lock:
                received.bodies.append(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", received
    finally:
        server.shutdown()
        server.server_close()


def split_by_trace(body: bytes) -> list[tuple[bytes, bytes]]:
    """One export body as the kafkaexporter with `partition_traces_by_id` writes it: a TracesData
    per trace, keyed by the trace id in hex; resource and scope kept with each span."""
    request = ExportTraceServiceRequest.FromString(body)
    per_trace: dict[bytes, TracesData] = {}
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for sp in ss.spans:
                data = per_trace.setdefault(sp.trace_id, TracesData())
                out_rs = next((r for r in data.resource_spans if r.resource == rs.resource), None)
                if out_rs is None:
                    out_rs = data.resource_spans.add(resource=rs.resource, schema_url=rs.schema_url)
                out_ss = next((s for s in out_rs.scope_spans if s.scope == ss.scope), None)
                if out_ss is None:
                    out_ss = out_rs.scope_spans.add(scope=ss.scope, schema_url=ss.schema_url)
                out_ss.spans.append(sp)
    return [(tid.hex().encode(), data.SerializeToString()) for tid, data in per_trace.items()]


async def produce(bootstrap: str, topic: str, bodies: list[bytes]) -> int:
    """Every body to `topic`, split and keyed by trace; the number of messages produced."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    n = 0
    try:
        for body in bodies:
            for key, value in split_by_trace(body):
                await producer.send_and_wait(topic, value, key=key)
                n += 1
    finally:
        await producer.stop()
    return n
