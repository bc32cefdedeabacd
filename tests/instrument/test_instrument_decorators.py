"""`monitor.instrument`'s decorators and `rag_span`: a decorated request becomes a correct record,
the context propagates through asyncio tasks, exceptions, cancellation and results pass through
unchanged while instrumentation faults are swallowed; methods, keyword arguments and query
objects; generator functions refused at decoration; disabled tracing adds no spans and no work."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from instrument_cases import HITS, by_name, handle, records
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from monitor.instrument import (
    configure,
    internal_errors,
    rag_span,
    shutdown,
    trace_generator,
    trace_request,
    trace_retriever,
)
from monitor.instrument import spans as spans_mod


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
