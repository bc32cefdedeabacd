"""`monitor.instrument`'s Kafka exporter → the embedded broker → the sidecar, in one shared sidecar
run: records land in the Collector kafkaexporter's layout, the sidecar decodes what the decorators
(and LangChain's OpenInference instrumentation, when installed) wrote, and replay-marked traces
reach Kafka marked and the sidecar skips them."""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support import eventually, read_topic, result_lines, running, settings_for

from monitor.demo.broker import EmbeddedBroker
from monitor.ingest.assemble import build_record
from monitor.ingest.decode import decode
from monitor.instrument import (
    configure,
    default_redactor,
    replay_scope,
    shutdown,
    trace_generator,
    trace_request,
    trace_retriever,
)
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import Encoding, KafkaConfig

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
