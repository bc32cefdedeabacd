"""Replay marking in `monitor.instrument`: `is_replay` needs a valid signed mark (the secret given or
read from the environment), and `ReplayMiddleware` marks the spans of a replayed request."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from instrument_cases import handle, records
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from monitor.instrument import ReplayMiddleware, is_replay, replay_scope, set_query_type, trace_request
from monitor.plumbing.replay_mark import sign

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
