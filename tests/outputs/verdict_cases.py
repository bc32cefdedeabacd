"""What the verdict exporters' tests share: records and judgements whose every piece of user text
carries a marker (none may leave unless asked), and real OTLP/HTTP receivers on loopback (logs
and traces: the request bodies decoded with the proto classes, never a mock of the SDK or HTTP)."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from monitor.contracts.model import Chunk, Claim, Judgement, RagRecord
from monitor.llm.outcome import JudgeOutcome

# Distinctive markers in every piece of user text: none may reach the exported bytes or the logs.
QUERY = "QUERYMARKER-q7 what is the refund window?"
ANSWER = "ANSWERMARKER-a7 thirty days"
CHUNK = "CHUNKMARKER-c7 refunds are accepted within 30 days"
CLAIM = "CLAIMMARKER-k7"
ERROR = "ERRORMARKER-e7 upstream said no"
MARKERS = ("QUERYMARKER", "ANSWERMARKER", "CHUNKMARKER", "CLAIMMARKER", "ERRORMARKER")
SECRET = "Bearer SECRETMARKER-s7"

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


# -- real OTLP/HTTP receivers -----------------------------------------------------------------------


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: bytes  # decompressed protobuf
    request: Any  # ExportLogsServiceRequest or ExportTraceServiceRequest


@dataclass
class Receiver:
    url: str
    requests: list[Captured] = field(default_factory=list)

    def records(self) -> list[tuple[Any, Any]]:
        """(resource, log record) of every exported log record."""
        out: list[tuple[Any, Any]] = []
        for cap in self.requests:
            if cap.path != "/v1/logs":
                continue
            for rl in cap.request.resource_logs:
                for sl in rl.scope_logs:
                    out.extend((rl.resource, lr) for lr in sl.log_records)
        return out

    def spans(self) -> list[tuple[Any, Any]]:
        """(resource, span) of every exported span."""
        out: list[tuple[Any, Any]] = []
        for cap in self.requests:
            if cap.path != "/v1/traces":
                continue
            for rs in cap.request.resource_spans:
                for ss in rs.scope_spans:
                    out.extend((rs.resource, sp) for sp in ss.spans)
        return out

    def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[Any, Any]]:
        """Until `count` log records or spans arrived (or `timeout`); what did."""
        deadline = time.monotonic() + timeout
        while len(self.records()) + len(self.spans()) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.records() + self.spans()


# path -> (request class, response class)
_SIGNALS: dict[str, tuple[Any, Any]] = {
    "/v1/logs": (ExportLogsServiceRequest, ExportLogsServiceResponse),
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
}


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                raw = gzip.decompress(raw)
            request_cls, response_cls = _SIGNALS[self.path]
            request = request_cls.FromString(raw)
            receiver.requests.append(
                Captured(self.path, {k.lower(): v for k, v in self.headers.items()}, raw, request)
            )
            reply = response_cls().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def otlp_receiver(path: str) -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on loopback; its URL ends in `path` (/v1/logs or /v1/traces)."""
    rec = Receiver(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(rec))
    rec.url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def grpc_receiver(signal: str) -> Iterator[tuple[str, list[tuple[Any, dict[str, str]]]]]:
    """A real OTLP/gRPC receiver of `signal` (logs, traces) on loopback (grpcio): its URL, and the
    (request, metadata) pairs it received."""
    received: list[tuple[Any, dict[str, str]]] = []
    lock = threading.Lock()

    def export(request: Any, context: Any) -> Any:
        with lock:
            received.append((request, dict(context.invocation_metadata())))
        return (ExportLogsServiceResponse if signal == "logs" else ExportTraceServiceResponse)()

    if signal == "logs":
        servicer: Any = type(
            "Logs", (logs_service_pb2_grpc.LogsServiceServicer,), {"Export": staticmethod(export)}
        )
        add: Any = logs_service_pb2_grpc.add_LogsServiceServicer_to_server
    else:
        servicer = type(
            "Traces", (trace_service_pb2_grpc.TraceServiceServicer,), {"Export": staticmethod(export)}
        )
        add = trace_service_pb2_grpc.add_TraceServiceServicer_to_server
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add(servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(0)


def closed_port() -> int:
    """A loopback port nothing listens on: a dead receiver."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def hung_url(path: str = "") -> Iterator[str]:
    """A receiver that accepts TCP connections (kernel backlog) but never answers."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        yield f"http://127.0.0.1:{hung.getsockname()[1]}{path}"


# -- records and judgements ------------------------------------------------------------------------


META: dict[str, Any] = {
    "query_type": "lookup",
    "service": "shop-rag",
    "backend": "anthropic",
    "model": "claude-judge-x",
    "sampling_weight": 4.0,
}


def record(trace_id: str = TRACE, span_id: str = SPAN) -> RagRecord:
    return RagRecord(
        trace_id=trace_id,
        span_id=span_id,
        service="shop-rag",
        query=QUERY,
        query_type="lookup",
        chunks=[Chunk("c1", CHUNK, 0.9)],
        answer=ANSWER,
        model="gpt-x",
    )


def claims(supported: int, unsupported: int = 0) -> list[Claim]:
    return [Claim(f"{CLAIM} {i}", True, "c1") for i in range(supported)] + [
        Claim(f"{CLAIM} u{i}", False) for i in range(unsupported)
    ]


def judged(
    claim_list: list[Claim], *, answerable: bool, admits: bool, relevance: Any, trace_id: str = TRACE
) -> Judgement:
    return Judgement.from_verdicts(
        claim_list,
        answerable_from_context=answerable,
        answer_admits_uncertainty=admits,
        answer_relevance=relevance,
        trace_id=trace_id,
        raw={"claims": [c.text for c in claim_list], "query": QUERY},
        **META,
    )


GROUNDED = judged(claims(3), answerable=True, admits=False, relevance=3)
ONE_UNSUPPORTED = judged(claims(3, 1), answerable=True, admits=False, relevance=2)
HALLUCINATED = judged(claims(0, 2), answerable=False, admits=False, relevance=3)
ADMITTED = judged([], answerable=False, admits=True, relevance=1)
FALSE_REFUSAL = judged([], answerable=True, admits=True, relevance=1)
FAILED = Judgement.failed(JudgeOutcome.TIMEOUT, ERROR, trace_id=TRACE, raw=ERROR, **META)


def by_name(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {str(e["gen_ai.evaluation.name"]): e for e in events}
    assert len(out) == len(events), "one event per check"
    return out


def verdict(event: dict[str, Any]) -> tuple[Any, Any, Any]:
    return (
        event.get("gen_ai.evaluation.score.value"),
        event.get("gen_ai.evaluation.score.label"),
        event.get("gen_ai.evaluation.explanation"),
    )


def attrs(log_record: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in log_record.attributes:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind)
    return out
