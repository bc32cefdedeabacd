"""Bad input through the real broker: counted by reason, dead-lettered, never a crash or a stall."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from support import (
    HookedJudge,
    committed_total,
    eventually,
    eventually_committed,
    read_topic,
    result_ids,
    result_lines,
    running,
    sample,
    sdk_trace,
    settings_for,
)

from monitor.app.sidecar import build_judge
from monitor.contracts.model import RagRecord
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce
from monitor.judge.lexical import LexicalJudge
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig

ROOT = {"openinference.span.kind": "CHAIN"}


async def test_every_bad_input_class_is_counted_and_nothing_stalls(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    dlq = f"{topic}-dlq"
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [dlq], partitions=1)
    good = generate(20, seed=11)
    whole = good.messages[0].value
    whole_message_rejects: list[tuple[str, bytes]] = [
        ("decode_error", os.urandom(500)),
        ("decode_error", whole[: len(whole) // 2]),  # truncated protobuf
        ("decode_error", b'{"resourceSpans": ['),  # invalid JSON
        ("decode_error", b"[1, 2, 3]"),  # JSON, but not an object
        ("invalid_utf8", b'{"query": "caf\xe9 \xff", "answer": "x"}'),
        ("empty", b""),
        ("too_large", b"\x0a" + os.urandom(10 * 1024 * 1024)),  # a 10 MB message
    ]
    _, missing_answer = sdk_trace([("rag", {**ROOT, "input.value": "a question with no answer"})])
    _, list_query = sdk_trace([("rag", {**ROOT, "input.value": ["not", "a", "string"], "output.value": "x"})])
    bad_score_id, bad_score = sdk_trace(
        [
            ("rag", {**ROOT, "input.value": "q?", "output.value": "a."}),
            (
                "retrieve",
                {
                    "openinference.span.kind": "RETRIEVER",
                    "retrieval.documents.0.document.id": "d1",
                    "retrieval.documents.0.document.score": "high",
                },
            ),
        ]
    )
    old_id, old = sdk_trace(
        [("rag", {**ROOT, "input.value": "q?", "output.value": "a."})], start_ns=10**9, end_ns=2 * 10**9
    )
    flood = [
        sdk_trace([("rag", {**ROOT, "input.value": "q", "output.value": "a", "rag.query_type": f"qt-{i}"})])
        for i in range(150)
    ]
    span_level = [missing_answer, list_query, bad_score, old, *(v for _, v in flood)]

    results = tmp_path / "results.jsonl"
    settings = settings_for(bs, topic, results, kafka={"dead_letter_topic": dlq})

    real = build_judge(settings)
    assert real is not None

    async def bug_on_one(record: RagRecord) -> None:
        """A judge with a bug on one record: that judgement fails, the pipeline goes on."""
        if record.trace_id == old_id:
            raise RuntimeError("judge bug")

    async with running(settings, HookedJudge(real, bug_on_one)) as sidecar:
        producer = AIOKafkaProducer(bootstrap_servers=bs, max_request_size=12 * 1024 * 1024)
        await producer.start()
        try:
            for _, value in whole_message_rejects:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        await produce(bs, topic, [(None, v) for v in span_level])
        await produce(bs, topic, good.pairs())  # good traffic after the poison must still flow
        expected = {t.trace_id for t in good.traces} | {bad_score_id, old_id} | {tid for tid, _ in flood}
        await eventually(lambda: result_ids(results) >= expected, what="good records after bad input")
        total_messages = len(whole_message_rejects) + len(span_level) + len(good.messages)
        group = settings.kafka.group_id
        committed = [0]

        async def poll_committed() -> None:
            committed[0] = await committed_total(bs, topic, group)

        for _ in range(100):
            await poll_committed()
            if committed[0] == total_messages:
                break
            await __import__("asyncio").sleep(0.2)
        assert committed[0] == total_messages, "a bad message stalled the committed offset"

        def rejected(reason: str) -> float:
            return sample(sidecar, "ragmon_rejected_total", reason=reason)

        for reason in ("decode_error", "invalid_utf8", "empty", "too_large"):
            want = sum(1 for r, _ in whole_message_rejects if r == reason)
            assert rejected(reason) == want, reason
        assert rejected("missing_answer") == 1
        assert rejected("missing_query") == 1  # the list-valued query was dropped...
        assert rejected("bad_attribute") >= 2  # ...and counted, as was the non-numeric score
        assert rejected("bad_timestamp") >= 1
        assert rejected("query_type_not_allowed") == 150

    # Label values stay inside the allow-list whatever spans said.
    label_values = {
        s.labels["query_type"]
        for fam in sidecar.metrics.registry.collect()
        for s in fam.samples
        if s.name == "ragmon_records_total"
    }
    assert label_values <= set(settings.slices.query_types)
    assert "other" in label_values
    got = {r["trace_id"]: r for r in result_lines(results)}
    assert got[bad_score_id]["chunks"] == [{"id": "d1", "content": None, "score": None}]
    assert got[old_id]["start"] is None  # absurd times dropped, record kept
    assert got[old_id]["error"] == "unexpected RuntimeError" and got[old_id]["faithfulness"] is None
    assert (
        sample(
            sidecar,
            "ragmon_judge_requests_total",
            backend="lexical",
            model=LexicalJudge.model,
            outcome="internal_error",
        )
        == 1
    )

    # Every whole-message reject is in the dead-letter topic, byte for byte.
    seen = [
        m.value
        for m in await read_topic(
            bs,
            dlq,
            count=len(whole_message_rejects),
            max_partition_fetch_bytes=16 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024,
        )
    ]
    assert sorted(seen) == sorted(v for _, v in whole_message_rejects)


async def test_a_batch_failing_its_crc_is_read_not_fatal(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """A record batch whose CRC-32C does not match what it holds (the broker stores it as
    produced). With aiokafka's default check every fetch of that partition raised
    `CorruptRecordException`, losing the rest of the fetch, and the next fetched the same batch
    again: the sidecar exited with it and, restarted, met it again. It reads batches unchecked, as
    librdkafka does: the batch's intact trace is assembled, its damaged value counted as a decode
    error, and the partition moves on."""
    bs = broker.bootstrap_servers
    good = generate(8, seed=5)
    first, *rest = good.messages
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 22,
    )
    builder.append(0, timestamp=None, key=None, value=first.value, headers=[])
    builder.append(1, timestamp=None, key=None, value=b"\xff" * 300, headers=[])
    data = bytearray(builder.build())
    data[-5] ^= 0xFF  # a byte of the last value, after the CRC was computed
    producer = AIOKafkaProducer(bootstrap_servers=bs)
    await producer.start()
    try:
        await producer.partitions_for(topic)
        leader = producer.client.cluster.leader_for_partition(TopicPartition(topic, 0))
        request = ProduceRequest(
            transactional_id=None, required_acks=1, timeout=5000, topics=[(topic, [(0, bytes(data))])]
        )
        response = await producer.client.send(leader, request)
        assert response.topics[0][1][0][1] == 0  # no error: stored as it came
    finally:
        await producer.stop()
    results = tmp_path / "results.jsonl"
    settings = settings_for(bs, topic, results)
    async with running(settings) as sidecar:
        await produce(bs, topic, [(m.key, m.value) for m in rest])
        expected = {t.trace_id for t in good.traces}
        await eventually(
            lambda: result_ids(results) >= expected, what="every trace, the one in the batch too"
        )

        async def all_committed() -> bool:
            return await committed_total(bs, topic, settings.kafka.group_id) == 2 + len(rest)

        for _ in range(100):
            if await all_committed():
                break
            await asyncio.sleep(0.2)
        assert await all_committed(), "the batch stalled its partition"
        assert sample(sidecar, "ragmon_rejected_total", reason="decode_error") == 1


async def test_a_string_not_utf8_loses_no_span_of_its_message(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """One message of 100 spans (20 traces of 5, as the kafkaexporter batches them) where one span
    name is not UTF-8, and a one-trace message whose query is not: upb refused each whole, and
    every trace in them was dead-lettered. Now each bad string is replaced (U+FFFD) and counted
    once as `invalid_utf8`; every trace becomes a record and is judged; nothing is dead-lettered."""
    bs = broker.bootstrap_servers
    dlq = f"{topic}-dlq"
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [dlq], partitions=1)

    def trace(i: int, query: str, retriever: str = "retrieve") -> tuple[str, bytes]:
        return sdk_trace(
            [
                ("rag", {**ROOT, "input.value": query, "output.value": f"Paris is the capital, {i}."}),
                (
                    retriever,
                    {
                        "openinference.span.kind": "RETRIEVER",
                        "retrieval.documents.0.document.id": f"d{i}",
                        "retrieval.documents.0.document.content": "Paris is the capital of France.",
                        "retrieval.documents.0.document.score": 0.9,
                    },
                ),
                ("generate", {"openinference.span.kind": "LLM", "llm.model_name": "m"}),
                ("SELECT docs", {"db.system": "postgresql", "db.statement": "SELECT 1"}),
                ("GET", {"http.method": "GET", "http.url": "http://cache/x"}),
            ]
        )

    batch = [
        trace(i, f"What is the capital, {i}?", "retrieve \u00e9\u00e9" if i == 10 else "retrieve")
        for i in range(20)
    ]
    hundred = b"".join(v for _, v in batch)  # concatenated requests merge: one message of 100 spans
    bad_name = hundred.replace("\u00e9\u00e9".encode(), b"\xc3\x28\xe9\xff")
    assert len(bad_name) == len(hundred)
    query_id, one = trace(20, "Capital of France \u00e9?")
    bad_query = one.replace("\u00e9".encode(), b"\xc3\x28")

    results = tmp_path / "results.jsonl"
    settings = settings_for(bs, topic, results, kafka={"dead_letter_topic": dlq})
    async with running(settings) as sidecar:
        # One partition (one key), the empty message last: its dead-letter copy marks the end.
        await produce(bs, topic, [(b"k", bad_name), (b"k", bad_query), (b"k", b"")])
        await eventually_committed(bs, topic, settings.kafka.group_id, 3)
        expected = {tid for tid, _ in batch} | {query_id}
        await eventually(lambda: result_ids(results) >= expected, what="every trace of the two messages")
        assert sample(sidecar, "ragmon_rejected_total", reason="invalid_utf8") == 2  # two strings
        assert sample(sidecar, "ragmon_rejected_total", reason="decode_error") == 0
        assert [m.value for m in await read_topic(bs, dlq)] == [b""]  # only the empty message
    got = {r["trace_id"]: r for r in result_lines(results)}
    assert all(got[tid]["judge"]["outcome"] == "ok" for tid in expected)
    assert got[query_id]["query"] == "Capital of France \ufffd(?"  # the record is judged on it
