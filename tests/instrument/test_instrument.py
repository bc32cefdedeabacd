"""`monitor.instrument`: decorator semantics, content controls, replay marking, and the exporters
against real receivers (the embedded Kafka broker read by the sidecar, a local OTLP/HTTP server)."""

from __future__ import annotations

import asyncio
import http.server
import importlib.util
import json
import statistics
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import BaseModel
from support import eventually, read_topic, result_lines, running, settings_for

from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.ingest.assemble import build_record
from monitor.ingest.decode import decode
from monitor.instrument import (
    ContentPolicy,
    KafkaSpanExporter,
    ReplayMiddleware,
    configure,
    default_document,
    default_redactor,
    internal_errors,
    is_replay,
    luhn_valid,
    rag_span,
    replay_scope,
    set_query_type,
    shutdown,
    trace_generator,
    trace_request,
    trace_retriever,
    truncate,
)
from monitor.instrument import spans as spans_mod
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import Encoding, KafkaConfig
from monitor.model import RagRecord
from monitor.replay_mark import sign

HITS = [
    {"id": "c1", "content": "Paris is the capital of France.", "score": 0.91},
    {"id": "c2", "content": "Lyon is a city in France.", "score": 0.42},
]


@pytest.fixture
def mem() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    configure("svc-test", exporter=exporter, batch=False)
    yield exporter
    shutdown()


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


# --------------------------------------------------------------------------------------------
# Decorator semantics


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


def test_sync_request_becomes_a_correct_record(mem: InMemorySpanExporter) -> None:
    out = handle("What is the capital of France?")
    assert out == {"answer": "Paris.", "chunks": HITS}
    spans = by_name(mem.get_finished_spans())
    root, ret, llm = spans["request"], spans["retrieve"], spans["generate"]
    assert root.parent is None
    assert ret.parent is not None and ret.parent.span_id == root.context.span_id
    assert llm.parent is not None and llm.parent.span_id == root.context.span_id
    assert {s.context.trace_id for s in spans.values()} == {root.context.trace_id}
    assert root.attributes is not None and ret.attributes is not None and llm.attributes is not None
    assert root.attributes["openinference.span.kind"] == "CHAIN"
    assert ret.attributes["openinference.span.kind"] == "RETRIEVER"
    assert llm.attributes["openinference.span.kind"] == "LLM"
    assert ret.attributes["retrieval.documents.1.document.score"] == 0.42
    assert llm.attributes["llm.output_messages.0.message.role"] == "assistant"
    assert all(s.status.status_code is StatusCode.UNSET for s in spans.values())  # success: UNSET
    (rec,) = records(mem.get_finished_spans()).values()
    assert (rec.query, rec.answer, rec.query_type, rec.model, rec.service, rec.replay) == (
        "What is the capital of France?",
        "Paris.",
        "lookup",
        "m-test",
        "svc-test",
        False,
    )
    assert [(c.id, c.content, c.score) for c in rec.chunks] == [
        (h["id"], h["content"], h["score"]) for h in HITS
    ]


async def test_async_context_propagates_through_gather_and_tasks(mem: InMemorySpanExporter) -> None:
    @trace_retriever(name="aretrieve")
    async def aretrieve(query: str, k: int) -> list[tuple[str, str, float]]:
        await asyncio.sleep(0.01)
        return [(f"{query}-{i}", f"text {i}", 1.0 / (i + 1)) for i in range(k)]

    @trace_generator(name="agenerate", model="m-async")
    async def agenerate(query: str, hits: list[Any]) -> str:
        await asyncio.sleep(0.005)
        return f"answer to {query}"

    @trace_request(name="arequest", query_type=lambda q: "multi_hop" if "hop" in q else "lookup")
    async def ahandle(query: str) -> str:
        a, b = await asyncio.gather(aretrieve(query, 2), aretrieve(query + "+", 1))
        task = asyncio.create_task(agenerate(query, a + b))
        return await task

    answers = await asyncio.gather(ahandle("q-hop"), ahandle("q-one"), ahandle("q-two"))
    assert answers == ["answer to q-hop", "answer to q-one", "answer to q-two"]
    spans = mem.get_finished_spans()
    roots = {s.context.span_id: s for s in spans if s.name == "arequest"}
    assert len(roots) == 3 and all(r.parent is None for r in roots.values())
    assert len({r.context.trace_id for r in roots.values()}) == 3  # no request joined another's trace
    for s in spans:
        if s.name != "arequest":
            assert s.parent is not None and s.parent.span_id in roots
            assert roots[s.parent.span_id].context.trace_id == s.context.trace_id
    got = {r.query: r for r in records(spans).values()}
    assert got["q-hop"].query_type == "multi_hop" and got["q-one"].query_type == "lookup"
    # Two retrievals in one request: the union, in call order.
    assert [c.id for c in got["q-one"].chunks] == ["q-one-0", "q-one-1", "q-one+-0"]
    assert got["q-two"].answer == "answer to q-two" and got["q-two"].model == "m-async"


class Boom(Exception):
    pass


def test_exceptions_are_recorded_and_reraised_unchanged(mem: InMemorySpanExporter) -> None:
    err = Boom("bad input from alice@example.com", 42)

    @trace_retriever(name="failing")
    def failing(query: str) -> list[Any]:
        raise err

    @trace_request(name="outer")
    def outer(query: str) -> str:
        failing(query)
        return "never"

    with pytest.raises(Boom) as info:
        outer("q")
    assert info.value is err and info.value.args == ("bad input from alice@example.com", 42)
    spans = by_name(mem.get_finished_spans())
    for name in ("failing", "outer"):
        s = spans[name]
        assert s.status.status_code is StatusCode.ERROR
        assert s.status.description is not None and s.status.description.startswith("Boom: ")
        (event,) = [e for e in s.events if e.name == "exception"]
        assert event.attributes is not None
        assert event.attributes["exception.type"] == "Boom"
        # Redacted like every other text that leaves the process.
        assert "alice@example.com" not in str(event.attributes["exception.message"])
        assert "[EMAIL]" in str(event.attributes["exception.message"])
        assert "alice@example.com" not in str(event.attributes["exception.stacktrace"])


async def test_async_exceptions_and_cancellation_unchanged(mem: InMemorySpanExporter) -> None:
    err = ValueError("nope")

    @trace_generator(name="agen")
    async def agen(query: str) -> str:
        raise err

    with pytest.raises(ValueError) as info:
        await agen("q")
    assert info.value is err

    started = asyncio.Event()

    @trace_request(name="slow")
    async def slow(query: str) -> str:
        started.set()
        await asyncio.sleep(10)
        return "late"

    task = asyncio.create_task(slow("q"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    spans = by_name(mem.get_finished_spans())
    assert spans["agen"].status.status_code is StatusCode.ERROR
    assert spans["slow"].status.status_code is StatusCode.ERROR  # ended, not leaked


def test_results_are_returned_as_is_and_instrumentation_faults_are_swallowed(
    mem: InMemorySpanExporter,
) -> None:
    sentinel = object()

    def bad_answer(result: Any) -> str:
        raise RuntimeError("extractor bug")

    def bad_classifier(query: str) -> str:
        raise RuntimeError("classifier bug")

    @trace_request(answer=bad_answer, query_type=bad_classifier)
    def odd(query: str) -> object:
        return sentinel

    def stream() -> Iterator[int]:
        yield 1

    gen = stream()

    @trace_retriever
    def lazy(query: str) -> Iterator[int]:
        return gen  # a generator result must not be consumed by the instrumentation

    before = internal_errors()
    assert odd("q") is sentinel
    assert lazy("q") is gen and list(gen) == [1]
    assert internal_errors() == before + 2
    assert len(mem.get_finished_spans()) == 2


def test_methods_kwargs_and_query_objects(mem: InMemorySpanExporter) -> None:
    @dataclass
    class Req:
        query: str
        k: int = 2

    class Service:
        @trace_retriever(query_arg="question")
        def search(self, k: int, question: str) -> list[Any]:
            return HITS[:k]

        @trace_request
        def run(self, req: Req) -> str:
            self.search(req.k, question=req.query)
            return "ok"

    assert Service().run(Req("what?")) == "ok"
    spans = by_name(mem.get_finished_spans())
    assert spans["test_methods_kwargs_and_query_objects.<locals>.Service.run"].attributes == {
        "openinference.span.kind": "CHAIN",
        "input.value": "what?",
        "output.value": "ok",
    }
    search = spans["test_methods_kwargs_and_query_objects.<locals>.Service.search"]
    assert search.attributes is not None and search.attributes["input.value"] == "what?"
    with pytest.raises(TypeError, match="no parameter"):
        trace_request(query_arg="missing")(lambda query: query)


def test_generator_functions_are_refused_at_decoration() -> None:
    def streaming(query: str) -> Iterator[str]:
        yield "a"

    with pytest.raises(TypeError, match="rag_span"):
        trace_generator(streaming)


def test_disabled_tracing_adds_no_spans_and_does_no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    shutdown()
    calls: list[str] = []

    def no_work(*a: Any) -> Any:
        calls.append("begin")
        raise AssertionError("span work while disabled")

    monkeypatch.setattr(spans_mod, "_begin", no_work)
    assert handle("q")["answer"] == "Paris."  # never configured: pass-through
    with rag_span("retriever") as s:
        s.set_documents(HITS)
        assert not s.recording
    inst = configure("off", exporter=InMemorySpanExporter(), enabled=False)
    assert handle("q")["answer"] == "Paris." and inst.provider is None
    assert asyncio.run(_async_identity(7)) == 7
    assert calls == []
    shutdown()


@trace_request
async def _async_identity(x: int) -> int:
    return x


def test_rag_span_context_manager(mem: InMemorySpanExporter) -> None:
    with rag_span("request", "stream-request", query="Who wrote Hamlet?", query_type="lookup") as req:
        with rag_span("retriever", "inline-retrieval", query="Who wrote Hamlet?") as ret:
            ret.set_documents([("h1", "Hamlet is a play by Shakespeare.", 3.5), ("h2", "Other.", 1.0)])
        with rag_span("reranker", "rerank") as rr:
            rr.set_documents([("h1", "Hamlet is a play by Shakespeare.", 0.99)])
        with rag_span("generator", "stream", model="m-stream") as gen:
            gen.set_answer("".join(["Shake", "speare."]))
        req.set_answer("Shakespeare.")
    with pytest.raises(KeyError), rag_span("retriever", "broken"):
        raise KeyError("x")
    spans = mem.get_finished_spans()
    assert by_name(spans)["broken"].status.status_code is StatusCode.ERROR
    rec = next(r for r in records([s for s in spans if s.name != "broken"]).values())
    assert (rec.query, rec.answer, rec.model, rec.query_type) == (
        "Who wrote Hamlet?",
        "Shakespeare.",
        "m-stream",
        "lookup",
    )
    assert [c.id for c in rec.chunks] == ["h1"]  # the reranker's output is the final ranking


# --------------------------------------------------------------------------------------------
# Content controls


def test_truncate_marks_and_bounds() -> None:
    assert truncate("short", 100) == "short"
    text = "x" * 10_000
    out = truncate(text, 100)
    assert len(out) <= 100 and out.endswith(f"…[truncated {10_000 - out.index('…')} chars]")
    for n in (33, 40, 99, 101, 1000):
        for length in (n + 1, n + 9, n * 10):
            cut = truncate("y" * length, n)
            kept = cut.index("…")
            assert len(cut) <= n and cut == "y" * kept + f"…[truncated {length - kept} chars]"
    assert truncate(text, None) is text


def test_default_redactor() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    text = (
        "Mail bob.smith+rag@mail.example.co.uk or BOB@EXAMPLE.COM; card 4111 1111 1111 1111, "
        "amex 3782-822463-10005, not a card 4111 1111 1111 1112, order 1234567890123, "
        "phone +1 555 123 4567, year 2024."
    )
    out = default_redactor(text)
    assert "@" not in out and out.count("[EMAIL]") == 2
    assert out.count("[CARD]") == 2
    for kept in ("4111 1111 1111 1112", "1234567890123", "+1 555 123 4567", "year 2024."):
        assert kept in out
    assert default_redactor("nothing to see") == "nothing to see"


def test_capture_switches_limits_and_custom_redactor() -> None:
    exporter = InMemorySpanExporter()
    configure(
        "svc",
        exporter=exporter,
        batch=False,
        content=ContentPolicy(
            capture_contexts=False,
            max_chars=64,
            redact=lambda s: s.replace("secret", "******"),
            max_documents=1,
        ),
    )
    try:
        long_query = "secret " + "q" * 200
        handle(long_query)
        spans = by_name(exporter.get_finished_spans())
        q = spans["request"].attributes["input.value"]  # type: ignore[index]
        assert isinstance(q, str) and len(q) <= 64 and q.startswith("****** qqq") and "…[truncated" in q
        ret = spans["retrieve"].attributes
        assert ret is not None
        assert ret["retrieval.documents.0.document.id"] == "c1"
        assert ret["retrieval.documents.0.document.score"] == 0.91
        assert "retrieval.documents.0.document.content" not in ret  # contexts off
        assert "retrieval.documents.1.document.id" not in ret  # max_documents=1

        exporter.clear()
        configure(
            "svc",
            exporter=exporter,
            batch=False,
            content=ContentPolicy(capture_query=False, capture_answer=False, redact=None),
        )
        handle("private question")
        for s in exporter.get_finished_spans():
            attrs = s.attributes or {}
            assert "private question" not in str(dict(attrs))
            assert "Paris." not in str(dict(attrs))
            assert not {"input.value", "output.value", "llm.output_messages.0.message.content"} & set(attrs)
    finally:
        shutdown()


def test_json_looking_text_stays_text_and_extractors(mem: InMemorySpanExporter) -> None:
    @trace_request
    def echo(query: str) -> str:
        return '{"answer": "not this"}'

    echo('["a list-looking query"]')
    (rec,) = records(mem.get_finished_spans()).values()
    assert rec.query == '["a list-looking query"]' and rec.answer == '{"answer": "not this"}'

    class Doc:
        def __init__(self) -> None:
            self.page_content = "body"
            self.metadata = {"id": "m1", "score": 0.5}
            self.id = None

    assert default_document(Doc()) == ("m1", "body", 0.5)
    assert default_document(({"id": 7, "text": "t"}, 0.25)) == ("7", "t", 0.25)
    assert default_document("bare") == (None, "bare", None)


# --------------------------------------------------------------------------------------------
# Replay marking


SECRET = b"replay-secret-0123456789"


class Ask(BaseModel):
    query: str


def test_is_replay_needs_a_valid_mark(mem: InMemorySpanExporter) -> None:
    from starlette.datastructures import Headers

    body = b'{"query": "q"}'
    mark = sign(SECRET, "POST", body)

    def ok(headers: Any, method: str = "POST", data: bytes = body, secret: bytes = SECRET) -> bool:
        return is_replay(headers, method=method, body=data, secret=secret)

    assert ok({"X-RAG-Replay": mark}) and ok({"x-rag-replay": mark}) and ok(Headers({"X-Rag-Replay": mark}))
    assert ok([(b"x-rag-replay", mark.encode())])
    assert not ok({"X-RAG-Replay": "1"}) and not ok({"X-RAG-Replay": "true"})  # forged: anyone can
    assert not ok({}) and not ok([])
    assert not ok({"X-RAG-Replay": mark}, secret=b"another-secret-0123456789")
    assert not ok({"X-RAG-Replay": mark}, data=b'{"query": "other"}')  # the mark is for one body
    assert not ok({"X-RAG-Replay": mark}, method="PUT")
    stale = sign(SECRET, "POST", body, now=time.time() - 600)
    assert not ok({"X-RAG-Replay": stale})  # a captured header does not keep working
    with replay_scope(ok({"X-RAG-Replay": mark})):
        handle("replayed")
    handle("live")
    got = {r.query: r.replay for r in records(mem.get_finished_spans()).values()}
    assert got == {"replayed": True, "live": False}


def test_is_replay_reads_the_secret_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    mark = {"X-RAG-Replay": sign(SECRET, "GET", b"")}
    monkeypatch.delenv("RAGMON_REPLAY_SECRET", raising=False)
    monkeypatch.delenv("RAGMON_REPLAY_SECRET_FILE", raising=False)
    assert not is_replay(mark, method="GET", body=b"")  # no secret configured: nothing is a replay
    monkeypatch.setenv("RAGMON_REPLAY_SECRET", SECRET.decode())
    assert is_replay(mark, method="GET", body=b"")
    (tmp_path / "s").write_bytes(b"another-secret-0123456789\n")
    monkeypatch.setenv("RAGMON_REPLAY_SECRET_FILE", str(tmp_path / "s"))  # the file wins
    assert not is_replay(mark, method="GET", body=b"")


async def test_replay_middleware_marks_spans(mem: InMemorySpanExporter) -> None:
    from fastapi import FastAPI

    middleware: list[ReplayMiddleware] = []

    def keep(app: Any, **kwargs: Any) -> ReplayMiddleware:
        middleware.append(ReplayMiddleware(app, **kwargs))
        return middleware[-1]

    app = FastAPI()
    app.add_middleware(keep, secret=SECRET)  # type: ignore[arg-type]

    @app.post("/ask")
    @trace_request(name="ask", query_arg="req")
    async def ask(req: Ask) -> dict[str, str]:
        set_query_type("exact_match")
        return {"answer": f"a:{req.query}"}

    @app.post("/ask-sync")
    def ask_sync(req: Ask) -> dict[str, Any]:  # FastAPI runs it in a worker thread
        return handle(req.query)

    def signed(q: str, secret: bytes = SECRET) -> dict[str, Any]:
        body = json.dumps({"query": q}).encode()
        headers = {"X-RAG-Replay": sign(secret, "POST", body), "Content-Type": "application/json"}
        return {"content": body, "headers": headers}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await client.post("/ask", **signed("one"))
        assert r.json() == {"answer": "a:one"}  # the body read ahead reaches the handler whole
        assert (await client.post("/ask", json={"query": "two"})).status_code == 200
        assert (await client.post("/ask-sync", **signed("three"))).status_code == 200
        r = await client.post("/ask", json={"query": "forged"}, headers={"X-RAG-Replay": "1"})
        assert r.json() == {"answer": "a:forged"}
        r = await client.post("/ask", **signed("wrong", b"not-the-secret-0123456789"))
        assert r.status_code == 200
    got = {r.query: (r.replay, r.query_type) for r in records(mem.get_finished_spans()).values()}
    assert got == {
        "one": (True, "exact_match"),
        "two": (False, "exact_match"),
        "three": (True, "lookup"),
        "forged": (False, "exact_match"),
        "wrong": (False, "exact_match"),
    }
    assert middleware[0].refused == {"malformed": 1, "bad_signature": 1}


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


# --------------------------------------------------------------------------------------------
# Kafka exporter → real broker → sidecar, one shared sidecar run


HAVE_LANGCHAIN = bool(
    importlib.util.find_spec("langchain_core")
    and importlib.util.find_spec("openinference.instrumentation.langchain")
)


@dataclass
class KafkaRun:
    expected: dict[str, dict[str, Any]]  # trace id -> what the record must say
    messages: list[tuple[bytes | None, bytes]]
    records: dict[str, dict[str, Any]]
    stats: dict[str, int]
    spans: list[ReadableSpan]


def _langchain_traces(provider: Any, expected: dict[str, dict[str, Any]]) -> None:
    """A LangChain retriever + fake LLM chain, traced by OpenInference's own instrumentation."""
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.language_models.fake import FakeListLLM
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import PromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnablePassthrough
    from openinference.instrumentation.langchain import LangChainInstrumentor

    class KeywordRetriever(BaseRetriever):
        docs: list[Document]

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            words = set(query.lower().split())
            return [d for d in self.docs if words & set(d.page_content.lower().split())]

    docs = [
        Document(page_content="Paris is the capital of France.", metadata={"id": "lc-1"}),
        Document(page_content="Berlin is the capital of Germany.", metadata={"id": "lc-2"}),
        Document(page_content="Bananas are yellow.", metadata={"id": "lc-3"}),
    ]
    prompt = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")

    def join(ds: list[Document]) -> str:
        return "\n".join(d.page_content for d in ds)

    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        for question, answer in (("what is the capital of france", "Paris."), ("are bananas yellow", "Yes.")):
            chain = (
                {"context": KeywordRetriever(docs=docs) | join, "question": RunnablePassthrough()}
                | prompt
                | FakeListLLM(responses=[answer])
                | StrOutputParser()
            )
            assert chain.invoke(question) == answer
            ids = [
                d.metadata["id"] for d in docs if set(question.split()) & set(d.page_content.lower().split())
            ]
            expected[question] = {"answer": answer, "chunks": ids, "query_type": None, "replay": False}

        # Mixed: the service's own request decorator around a LangChain chain.
        @trace_request(name="lc-wrapped", query_type="lookup")
        def wrapped(query: str) -> str:
            chain = (
                {"context": KeywordRetriever(docs=docs) | join, "question": RunnablePassthrough()}
                | prompt
                | FakeListLLM(responses=["Berlin."])
                | StrOutputParser()
            )
            out: str = chain.invoke(query)
            return out

        assert wrapped("capital of germany") == "Berlin."
        expected["capital of germany"] = {
            "answer": "Berlin.",
            "chunks": ["lc-1", "lc-2"],
            "query_type": "lookup",
            "replay": False,
        }
    finally:
        instrumentor.uninstrument()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def kafka_run(
    broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[KafkaRun]:
    topic = f"instr-{uuid.uuid4().hex[:10]}"
    await ensure_topics(KafkaConfig(bootstrap_servers=broker.bootstrap_servers), [topic], partitions=3)
    inst = configure(
        "svc-kafka",
        exporter="kafka",
        kafka_bootstrap_servers=broker.bootstrap_servers,
        kafka_topic=topic,
        schedule_delay_millis=60_000,  # one batch at force_flush: exactly one message per trace
    )
    seen = InMemorySpanExporter()
    assert inst.provider is not None
    inst.provider.add_span_processor(SimpleSpanProcessor(seen))
    expected: dict[str, dict[str, Any]] = {}
    try:

        @trace_retriever(name="kretrieve")
        async def kretrieve(query: str, k: int) -> list[dict[str, Any]]:
            await asyncio.sleep(0)
            return [
                {"id": f"{query}#{i}", "content": f"passage {i} for {query}", "score": 10.0 - i}
                for i in range(k)
            ]

        @trace_generator(name="kgenerate", model="m-kafka")
        def kgenerate(query: str, hits: list[dict[str, Any]]) -> str:
            return f"{query} is answered by {hits[0]['id']}."

        @trace_request(name="krequest", query_type=lambda q: "comparison" if "vs" in q else "lookup")
        async def krequest(query: str, k: int) -> dict[str, Any]:
            hits = await kretrieve(query, k)
            return {"answer": kgenerate(query, hits)}

        queries = [f"question {i}" for i in range(5)] + ["a vs b", "contact me at eve@example.org"]
        await asyncio.gather(*(krequest(q, 3) for q in queries))
        with replay_scope():
            await krequest("replayed question", 2)
        for q in [*queries, "replayed question"]:
            k = 2 if q.startswith("replayed") else 3
            expected[default_redactor(q)] = {
                "answer": default_redactor(f"{q} is answered by {q}#0."),
                "chunks": [f"{q}#{i}" for i in range(k)],  # ids are kept as they are
                "query_type": "comparison" if "vs" in q else "lookup",
                "replay": q.startswith("replayed"),
                "model": "m-kafka",
            }
        if HAVE_LANGCHAIN:
            _langchain_traces(inst.provider, expected)
        assert inst.force_flush(15_000)
        stats = inst.stats.snapshot()
        spans = list(seen.get_finished_spans())
        n_traces = len({s.context.trace_id for s in spans})
    finally:
        shutdown()

    messages = [(m.key, m.value) for m in await read_topic(broker.bootstrap_servers, topic, count=n_traces)]
    results = tmp_path_factory.mktemp("instr") / "results.jsonl"
    async with running(settings_for(broker.bootstrap_servers, topic, results)):
        # Replay traffic is measured by the replay run: the sidecar keeps it out of its output.
        live = {q for q, w in expected.items() if not w["replay"]}
        await eventually(
            lambda: {r["query"] for r in result_lines(results)} >= live,
            what="every trace as a record",
        )
    got = {r["query"]: r for r in result_lines(results)}
    yield KafkaRun(expected, messages, got, stats, spans)


async def test_kafka_exporter_writes_collector_layout(kafka_run: KafkaRun) -> None:
    trace_ids = {s.context.trace_id for s in kafka_run.spans}
    assert kafka_run.stats == {"exported": len(kafka_run.spans), "dropped": 0, "failed": 0}
    assert len(kafka_run.messages) == len(trace_ids)  # one message per trace
    by_id = {s.context.span_id.to_bytes(8, "big"): s for s in kafka_run.spans}
    for key, value in kafka_run.messages:
        req = ExportTraceServiceRequest.FromString(value)
        sent = [sp for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans]
        assert key is not None and {sp.trace_id.hex() for sp in sent} == {key.decode()}  # keyed by trace id
        # Exactly the bytes the SDK's encoder makes for the trace's spans (what the Collector writes).
        assert bytes(encode_spans([by_id[sp.span_id] for sp in sent]).SerializeToString()) == value


async def test_sidecar_decodes_what_the_decorators_wrote(kafka_run: KafkaRun) -> None:
    for query, want in kafka_run.expected.items():
        if "model" not in want or want["replay"]:
            continue  # LangChain traces and replay: checked below
        r = kafka_run.records[query]
        assert r["service"] == "svc-kafka"
        assert r["answer"] == want["answer"] and r["model"] == want["model"]
        assert [c["id"] for c in r["chunks"]] == want["chunks"]
        assert [c["score"] for c in r["chunks"]] == [10.0 - i for i in range(len(want["chunks"]))]
        assert r["query_type"] == want["query_type"] and r["replay"] is False
    assert "contact me at [EMAIL]" in kafka_run.records  # redacted before it left the process


async def test_replay_marked_traces_reach_kafka_marked_and_the_sidecar_skips_them(
    kafka_run: KafkaRun,
) -> None:
    assert "replayed question" not in kafka_run.records
    decoded = [f for _, v in kafka_run.messages for f in decode(v, Encoding.OTLP_PROTO).spans]
    mine = [f for f in decoded if f.query == "replayed question"]
    assert mine and all(f.replay for f in mine)
    rec, _ = build_record(mine[0].trace_id, [f for f in decoded if f.trace_id == mine[0].trace_id])
    assert (
        rec is not None
        and rec.replay
        and [c.id for c in rec.chunks] == kafka_run.expected[rec.query]["chunks"]
    )
    assert not any(f.replay for f in decoded if f.trace_id != mine[0].trace_id)


@pytest.mark.skipif(
    not HAVE_LANGCHAIN, reason="langchain-core / openinference-instrumentation-langchain absent"
)
async def test_sidecar_decodes_langchain_openinference_traces(kafka_run: KafkaRun) -> None:
    lc = {q: w for q, w in kafka_run.expected.items() if "model" not in w}
    assert len(lc) == 3
    for query, want in lc.items():
        r = kafka_run.records[query]
        assert r["answer"] == want["answer"], r
        assert [c["id"] for c in r["chunks"]] == want["chunks"]
        assert r["chunks"][0]["content"].endswith(".")
        if want["query_type"] is not None:  # unlabelled ones are the sidecar classifier's business
            assert r["query_type"] == want["query_type"]
