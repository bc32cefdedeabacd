"""The example RAG service: retrieval and generation in process, then end to end as a real process
(uvicorn on a loopback port) whose spans go to the embedded broker and become sidecar records."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support import eventually, example_service, read_topic, result_lines, running, settings_for

from examples.rag_service.app import MODEL_NAME, RagPipeline, classify, create_app
from monitor.contracts.model import RagRecord
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import REFUSAL, load_corpus
from monitor.golden import make_target
from monitor.ingest.assemble import build_record
from monitor.ingest.decode import decode
from monitor.instrument import configure, shutdown
from monitor.kafka.config import Encoding
from monitor.plumbing.replay_mark import sign


@pytest.fixture(scope="module")
def pipeline() -> RagPipeline:
    return RagPipeline()


@pytest_asyncio.fixture
async def client(pipeline: RagPipeline) -> AsyncIterator[httpx.AsyncClient]:
    pipeline.set_degrade(type(pipeline.degrade)())
    transport = httpx.ASGITransport(app=create_app(pipeline=pipeline))
    async with httpx.AsyncClient(transport=transport, base_url="http://rag") as c:
        yield c
    pipeline.set_degrade(type(pipeline.degrade)())


def _records(spans: Sequence[ReadableSpan]) -> dict[str, RagRecord]:
    decoded = decode(bytes(encode_spans(spans).SerializeToString()), Encoding.OTLP_PROTO).spans
    out = {}
    for tid in {f.trace_id for f in decoded}:
        rec, reason = build_record(tid, [f for f in decoded if f.trace_id == tid])
        assert rec is not None, reason
        out[rec.query] = rec
    return out


def test_bm25_retrieval_finds_the_evidence(pipeline: RagPipeline) -> None:
    corpus = load_corpus()
    answerable = [q for q in corpus.questions if q.answerable]
    hits = sum(
        bool({h.id for h in pipeline.retrieve(q.query, 4)} & set(q.relevant_chunk_ids)) for q in answerable
    )
    assert hits / len(answerable) >= 0.9  # a real retriever, not a stub
    top = pipeline.retrieve(answerable[0].query, 4)
    assert [h.score for h in top] == sorted((h.score for h in top), reverse=True)


async def test_query_contract_and_extractive_answers(client: httpx.AsyncClient) -> None:
    q = next(q for q in load_corpus().questions if q.query_type == "lookup")
    r = await client.post("/query", json={"query": q.query, "k": 3})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"answer", "chunks"} and len(body["chunks"]) == 3
    assert set(body["chunks"][0]) == {"id", "content", "score"}
    for sentence in body["answer"].split(". "):
        assert sentence.rstrip(".") in body["chunks"][0]["content"]  # extractive: from the top chunk
    r = await client.post("/query", json={"query": "zyxq blorft vantreel"})
    assert r.json() == {"answer": REFUSAL, "chunks": []}
    assert (await client.post("/query", json={"query": "x", "k": 0})).status_code == 422
    assert (await client.post("/query", json={"k": 3})).status_code == 422


async def test_degrade_endpoint(client: httpx.AsyncClient) -> None:
    qs = [q.query for q in load_corpus().questions if q.answerable][:12]

    async def ask(query: str) -> dict[str, Any]:
        r = await client.post("/query", json={"query": query, "k": 4})
        assert r.status_code == 200
        out: dict[str, Any] = r.json()
        return out

    base = {q: await ask(q) for q in qs}
    r = await client.post("/admin/degrade", json={"drop_best_rate": 1.0})
    assert r.json() == {"drop_best_rate": 1.0, "shuffle_rate": 0.0, "invent_rate": 0.0}
    for q in qs:
        ids = [c["id"] for c in (await ask(q))["chunks"]]
        assert ids == [c["id"] for c in base[q]["chunks"]][1:] + ids[3:]  # the best hit is gone

    await client.post("/admin/degrade", json={"drop_best_rate": 0.0, "shuffle_rate": 1.0})
    shuffled = [await ask(q) for q in qs]
    assert all(
        {c["id"] for c in s["chunks"]} == {c["id"] for c in base[q]["chunks"]}
        for q, s in zip(qs, shuffled, strict=True)
    )
    assert any(
        [c["id"] for c in s["chunks"]] != [c["id"] for c in base[q]["chunks"]]
        for q, s in zip(qs, shuffled, strict=True)
    )

    await client.post("/admin/degrade", json={"shuffle_rate": 0.0, "invent_rate": 1.0})
    for q in [q for q in qs if base[q]["answer"] != REFUSAL][:4]:
        out = await ask(q)
        assert out["answer"].startswith(base[q]["answer"]) and len(out["answer"]) > len(base[q]["answer"])
        assert out["chunks"] == base[q]["chunks"]  # generation degraded, retrieval untouched
    assert (await ask("zyxq blorft vantreel"))["answer"] != REFUSAL  # hallucinates instead of refusing

    assert (await client.post("/admin/degrade", json={"invent_rate": 2})).status_code == 422
    assert (await client.get("/admin/degrade")).json()["invent_rate"] == 1.0


SECRET = b"example-replay-secret-0123"


async def test_service_spans_in_process(pipeline: RagPipeline) -> None:
    exporter = InMemorySpanExporter()
    configure("rag-example", exporter=exporter, batch=False)
    transport = httpx.ASGITransport(app=create_app(pipeline=pipeline, replay_secret=SECRET))

    def marked(query: str, secret: bytes) -> dict[str, Any]:
        body = json.dumps({"query": query, "query_type": "other"}).encode()
        mark = sign(secret, "POST", body)
        return {"content": body, "headers": {"X-RAG-Replay": mark, "Content-Type": "application/json"}}

    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://rag") as client:
            q = load_corpus().questions[3].query
            r1 = (await client.post("/query", json={"query": q, "k": 2})).json()
            await client.post("/query", **marked("Who is it?", SECRET))
            forged = {"query": "Who forged it?", "query_type": "other"}
            assert (await client.post("/query", json=forged, headers={"X-RAG-Replay": "1"})).is_success
            await client.post("/query", **marked("Who guessed it?", b"not-the-secret-0123456789"))
    finally:
        shutdown()
    got = _records(exporter.get_finished_spans())
    assert got[q].answer == r1["answer"] and [c.id for c in got[q].chunks] == [c["id"] for c in r1["chunks"]]
    assert got[q].model == MODEL_NAME and got[q].query_type == (classify(q) or "")
    assert got["Who is it?"].replay and got["Who is it?"].query_type == "other"
    assert not got[q].replay
    assert not got["Who forged it?"].replay  # a bare X-RAG-Replay: 1 is production traffic
    assert not got["Who guessed it?"].replay  # as is a mark made with another secret


# --------------------------------------------------------------------------------------------
# End to end: a real process, the real broker, the sidecar


@pytest.fixture
def service(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    secret = tmp_path / "replay-secret"
    secret.write_bytes(SECRET + b"\n")
    with example_service(
        "--kafka",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--flush-interval-ms",
        "100",
        "--replay-secret-file",
        str(secret),
    ) as svc:
        yield svc


async def _replayed_from_kafka(bootstrap: str, topic: str, query: str) -> RagRecord:
    facts = [
        f
        for m in await read_topic(bootstrap, topic, within=10.0)
        for f in decode(m.value, Encoding.OTLP_PROTO).spans
    ]
    tid = next(f.trace_id for f in facts if f.query == query)
    rec, _ = build_record(tid, [f for f in facts if f.trace_id == tid])
    assert rec is not None
    return rec


async def test_example_service_end_to_end(
    service: tuple[str, subprocess.Popen[bytes]], broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    url, proc = service
    corpus = load_corpus()
    by_type = corpus.by_type()
    asked = [qs[0].query for qs in by_type.values()] + [by_type["lookup"][1].query]
    replayed = by_type["abstractive"][2].query
    labelled = by_type["multi_hop"][3].query
    forged = by_type["lookup"][3].query
    invented = by_type["lookup"][2].query
    responses: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:

        async def ask(query: str, **extra: Any) -> None:
            headers = extra.pop("headers", None)
            r = await http.post("/query", json={"query": query, "k": 4, **extra}, headers=headers)
            assert r.status_code == 200, r.text
            responses[query] = r.json()

        await asyncio.gather(*(ask(q) for q in asked))
        await ask(forged, headers={"X-RAG-Replay": "1"})  # anyone can send it: production traffic
        # The golden replay's own client, which signs its requests with the shared secret.
        target = make_target(f"{url}/query", replay_secret=SECRET)
        try:
            got_back = await target.ask(row_id="r1", query=replayed, query_type="abstractive", k=4)
        finally:
            await target.aclose()
        responses[replayed] = {"answer": got_back.answer}
        await ask(labelled, query_type="comparison")
        assert (await http.post("/admin/degrade", json={"invent_rate": 1.0})).status_code == 200
        await ask(invented)

    proc.send_signal(signal.SIGTERM)  # graceful: uvicorn stops, queued spans are flushed to Kafka
    assert await asyncio.to_thread(proc.wait, 30) == 0

    results = tmp_path / "results.jsonl"
    live = set(responses) - {replayed}
    async with running(settings_for(broker.bootstrap_servers, topic, results)):
        await eventually(
            lambda: {r["query"] for r in result_lines(results)} >= live, what="every live request"
        )
    got = {r["query"]: r for r in result_lines(results)}
    assert replayed not in got  # replay traffic never counts as production
    assert forged in got  # a forged mark does not hide a request
    for query in live:
        r, resp = got[query], responses[query]
        assert r["service"] == "rag-example" and r["model"] == MODEL_NAME
        assert r["answer"] == resp["answer"]
        assert [(c["id"], c["score"]) for c in r["chunks"]] == [(c["id"], c["score"]) for c in resp["chunks"]]
        assert [c["content"] for c in r["chunks"]] == [c["content"] for c in resp["chunks"]]
    assert got[labelled]["query_type"] == "comparison"
    for query in asked:
        if classify(query) is not None:
            assert got[query]["query_type"] == classify(query)
    last = got[invented]["answer"].rsplit(". ", 1)[-1]  # the made-up sentence comes last
    assert len(last) > 20 and not any(last in c["content"] for c in got[invented]["chunks"])
    rec = await _replayed_from_kafka(broker.bootstrap_servers, topic, replayed)
    assert rec.replay and rec.answer == responses[replayed]["answer"]
