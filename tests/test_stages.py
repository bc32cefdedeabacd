"""The two stages joined by the samples topic: ingestion never waits for the judge, a judge outage
loses no judgement, either stage can be killed at any moment, a churning group never commits past
unfinished work, and SIGTERM ends within its budget."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from fake_llm import FakeAPI, Reply, default_reply, error_body
from support import (
    eventually,
    eventually_committed,
    log_end_total,
    read_topic,
    result_ids,
    result_lines,
    running,
    sample,
    settings_for,
    start_sidecar,
)

from monitor.contracts.samples import decode_sample
from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.demo.workload import generate, produce
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig


@pytest.fixture
def api(_server: FakeAPI) -> FakeAPI:
    _server.reset(f"sk-ant-FAKEKEY-{uuid.uuid4().hex}")
    return _server


def anthropic_settings(api: FakeAPI, bs: str, topic: str, results: Path, **sections: Any) -> Any:
    options = {"api_key": api.key, "base_url": api.url, "max_retries": 0, "timeout_seconds": 2.0}
    judge = {
        "backend": "anthropic",
        "options": options,
        "breaker": {"failures": 3, "min_pause_seconds": 0.2, "max_pause_seconds": 1.0},
    }
    return settings_for(bs, topic, results, judge=judge, **sections)


async def test_samples_topic_carries_what_the_judge_needs(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Ingest alone: every sampled record is on the samples topic with its inclusion
    probability, and the input offsets are committed once those produces are acknowledged."""
    bs = broker.bootstrap_servers
    settings = settings_for(bs, topic, None, pipeline={"role": "ingest"}, sampling={"rate": 0.5})
    work = generate(120, seed=61)
    async with running(settings) as sidecar:
        assert sidecar.judge_stage is None
        await produce(bs, topic, work.pairs())
        await eventually(
            lambda: sample(sidecar, "ragmon_records_total", service="rag-demo", query_type="lookup") > 0
        )
        await eventually(
            lambda: sidecar.ingest is not None and sidecar.ingest.records_seen == 120, what="all records"
        )
    messages = await read_topic(bs, settings.pipeline.samples_topic)
    decoded = [decode_sample(m.value) for m in messages]
    by_id = {t.trace_id: t for t in work.traces}
    assert 20 < len(decoded) < 120  # about half, at least the floors
    for msg, record in decoded:
        assert record.trace_id in by_id
        assert record.query == by_id[record.trace_id].query
        assert 0 < msg.inclusion_probability <= 1
        assert msg.query_type_source in ("span", "rules", "none")
        assert msg.stratum in ("rate", "no_chunks", "low_score", "refusal", "length")
        assert msg.service_label == "rag-demo"
    # Keyed by trace id: a trace's samples stay in one partition of the judge group.
    assert all(m.key == json.loads(m.value)["trace_id"].encode() for m in messages)


async def test_judge_outage_never_slows_ingestion_and_loses_no_judgement(
    api: FakeAPI, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    settings = anthropic_settings(api, bs, topic, results)
    down = [Reply(529, error_body("/v1/messages", "overloaded_error", "Overloaded"))]
    api.default = lambda path, body: down[0]
    work = generate(150, seed=62)
    ids = {t.trace_id for t in work.traces}
    async with running(settings) as sidecar:
        await produce(bs, topic, work.pairs())
        # Ingestion goes on at its own pace while the judge answers nothing but 529s...
        await eventually(lambda: sidecar.ingest is not None and sidecar.ingest.records_seen == 150)
        await eventually(lambda: sample(sidecar, "ragmon_judge_circuit_open") == 1, what="breaker open")
        # ...and 500s: still no sample is burnt as a failed judgement.
        down[0] = Reply(500, error_body("/v1/messages", "api_error", "Internal"))
        await asyncio.sleep(2.0)
        assert result_lines(results) == []
        outage_requests = len(api.requests)
        assert outage_requests < 60, "an open breaker probes; it does not hammer the judge"
        assert sample(sidecar, "ragmon_judge_retries_total") > 0
        # Recovery: every sampled record gets a real judgement.
        api.default = default_reply
        await eventually(lambda: result_ids(results) >= ids, within=60, what="every record judged")
        assert sample(sidecar, "ragmon_judge_circuit_open") == 0
    lines = result_lines(results)
    judged = [r for r in lines if "judge_skipped" not in r]
    outcomes = {r["judge"]["outcome"] for r in judged}
    assert judged and outcomes == {"ok"}, outcomes
    assert {r["trace_id"] for r in lines} == ids
    assert all(r["stratum"] in ("rate", "no_chunks", "refusal", "length") for r in lines)  # for drift


async def test_a_judge_that_refuses_connections_then_comes_up(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Connection refused (nothing listens yet): samples wait; once a server answers on that
    port, every record gets a real judgement."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    port = free_port()
    key = f"sk-ant-FAKEKEY-{uuid.uuid4().hex}"
    options = {"api_key": key, "base_url": f"http://127.0.0.1:{port}", "max_retries": 0}
    breaker = {"failures": 3, "min_pause_seconds": 0.2, "max_pause_seconds": 1.0}
    settings = settings_for(
        bs, topic, results, judge={"backend": "anthropic", "options": options, "breaker": breaker}
    )
    work = generate(40, seed=67)
    async with running(settings) as sidecar:
        await produce(bs, topic, work.pairs())
        await eventually(lambda: sidecar.ingest is not None and sidecar.ingest.records_seen == 40)
        await eventually(lambda: sample(sidecar, "ragmon_judge_circuit_open") == 1, what="breaker open")
        assert result_lines(results) == []
        api = FakeAPI(port=port)
        api.key = key
        api.thread.start()
        try:
            await eventually(lambda: len(result_ids(results)) == 40, within=60, what="judged after recovery")
        finally:
            api.server.shutdown()
            api.server.server_close()
    outcomes = {r["judge"]["outcome"] for r in result_lines(results) if "judge_skipped" not in r}
    assert outcomes == {"ok"}, outcomes


async def test_a_record_that_breaks_the_judge_is_still_written(
    api: FakeAPI, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """The judge is up but one record's judgement keeps failing with 500: after max_attempts it is
    written with its error instead of holding the partition forever — even when it comes last on
    a quiet topic, with no other sample to show that the judge works: a canary record does."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    work = generate(30, seed=63)
    queries = [t.query for t in work.traces]
    victim = next(t for t in work.traces if queries.count(t.query) == 1)
    poison = victim.query
    canaries = 0

    def reply(path: str, body: dict[str, Any]) -> Reply:
        nonlocal canaries
        if poison in json.dumps(body):
            return Reply(500, error_body(path, "api_error", "boom"))
        canaries += "sky on a clear day" in json.dumps(body)
        return default_reply(path, body)

    api.default = reply
    settings = anthropic_settings(api, bs, topic, results)
    others = [(m.key, m.value) for m in work.messages if victim.trace_id not in m.trace_ids]
    async with running(settings) as sidecar:
        await produce(bs, topic, others)
        await eventually(lambda: len(result_ids(results)) == 29, within=60, what="all but the victim")
        await produce(bs, topic, [(m.key, m.value) for m in work.messages_of(victim.trace_id)])
        await eventually(lambda: len(result_ids(results)) == 30, within=60, what="the victim, last")
        assert canaries == 1
        # The canary is a billed request, never a verdict: production counts only the 29.
        judged = sum(
            s.value
            for f in sidecar.metrics.registry.collect()
            for s in f.samples
            if s.name == "ragmon_judged_total" and s.labels.get("check") == "unanswerable"
        )
        assert judged == 29
    failed = [r for r in result_lines(results) if r.get("error")]
    assert [r["trace_id"] for r in failed] == [victim.trace_id]
    assert failed[0]["judge"]["outcome"] == "server_error"


async def test_either_stage_killed_at_any_moment_loses_no_judgement(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    work = generate(1200, seed=64, mode="split", batch=25)
    ids = {t.trace_id for t in work.traces}
    results = tmp_path / "results.jsonl"
    logs = {role: tmp_path / f"{role}.log" for role in ("ingest", "judge")}

    def start(role: str) -> Any:
        return start_sidecar(bs, topic, results, logs[role], "--role", role)

    procs = {role: start(role) for role in logs}
    try:
        for role, log in logs.items():
            await eventually(lambda log=log: "assigned partitions" in log.read_text(), within=60, what=role)
        pairs = work.pairs()
        half = len(pairs) // 2
        await produce(bs, topic, pairs[:half], rate=200)
        await eventually(lambda: len(result_ids(results)) >= 50, within=60, what="judgements flowing")
        # Ingest killed while spans come in (traces open across messages), whatever the machine's pace.
        feeder = asyncio.create_task(produce(bs, topic, pairs[half:], rate=200))
        await asyncio.sleep(1.0)
        assert not feeder.done()
        procs["ingest"].send_signal(signal.SIGKILL)
        procs["ingest"].wait(timeout=10)
        procs["ingest"] = start("ingest")
        # The judge killed while samples wait for it.
        await eventually(lambda: len(result_ids(results)) >= len(ids) // 2, within=90)
        assert len(result_ids(results)) < len(ids)
        procs["judge"].send_signal(signal.SIGKILL)
        procs["judge"].wait(timeout=10)
        procs["judge"] = start("judge")
        await feeder
        await eventually(lambda: result_ids(results) >= ids, within=120, what="every trace after the kills")
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    assert result_ids(results) == ids


async def test_group_churn_never_commits_past_unfinished_work(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Members join and leave repeatedly while traffic flows; the group's committed offsets only
    move forwards, and every trace ends up judged."""
    bs = broker.bootstrap_servers
    work = generate(900, seed=65, mode="split", batch=20)
    ids = {t.trace_id for t in work.traces}
    results = tmp_path / "results.jsonl"
    base = settings_for(bs, topic, results, kafka={"session_timeout_ms": 6000})
    watcher = AIOKafkaConsumer(bootstrap_servers=bs, group_id=base.kafka.group_id, enable_auto_commit=False)
    await watcher.start()
    seen: dict[int, list[int]] = {p: [] for p in range(3)}
    watching = True

    async def watch() -> None:
        while watching:
            for p in range(3):
                off = await watcher.committed(TopicPartition(topic, p))
                if off is not None:
                    seen[p].append(off)
            await asyncio.sleep(0.1)

    watch_task = asyncio.create_task(watch())
    try:
        async with running(base):
            feeder = asyncio.create_task(produce(bs, topic, work.pairs(), rate=150))
            for _ in range(3):  # a second member joins, works a while, leaves
                async with running(base):
                    await asyncio.sleep(2.0)
                await asyncio.sleep(1.0)
            await feeder
            await eventually(lambda: result_ids(results) >= ids, within=120, what="every trace")
    finally:
        watching = False
        await watch_task
        await watcher.stop()
    assert result_ids(results) == ids
    for p, offsets in seen.items():
        assert offsets == sorted(offsets), f"partition {p}: a commit moved backwards: {offsets}"


async def test_sigterm_ends_within_the_budget_even_with_a_hung_judge(
    api: FakeAPI, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    api.default = lambda path, body: Reply(delay=120.0)  # accepts, never answers in time
    results, log = tmp_path / "results.jsonl", tmp_path / "sidecar.log"
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "judge": {
                    "backend": "anthropic",
                    "options": {"api_key": api.key, "base_url": api.url, "timeout_seconds": 100},
                },
                "pipeline": {"shutdown_seconds": 8},
            }
        )
    )
    proc = start_sidecar(bs, topic, results, log, "--config", str(config))
    try:
        await eventually(lambda: log.read_text().count("assigned partitions") >= 2, within=60, what="join")
        await produce(bs, topic, generate(20, seed=66).pairs())
        await eventually(lambda: len(api.requests) > 0, what="a judgement in flight")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
        took = time.monotonic() - started
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    assert took < 8 + 2, f"SIGTERM took {took:.1f}s with shutdown_seconds 8"


async def test_a_dead_letter_copy_too_large_to_send_is_dropped_counted_and_the_commit_moves_on(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """A copy the dead-letter topic can never take (larger than the producer may send) cannot
    succeed on any retry: it is counted and logged, and its partition's commits move past it
    (before, it was retried for ever and froze them)."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    dlq = f"{topic}-dlq"
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [dlq], partitions=1)
    kafka = {"dead_letter_topic": dlq, "max_message_bytes": 8000}  # the producer sends <= 32,000
    settings = settings_for(bs, topic, results, kafka=kafka)
    work = generate(60, seed=68)
    async with running(settings) as sidecar:
        producer = AIOKafkaProducer(bootstrap_servers=bs)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"x" * 40_000, partition=0)
        finally:
            await producer.stop()
        await produce(bs, topic, work.pairs())
        await eventually(
            lambda: result_ids(results) >= {t.trace_id for t in work.traces}, what="good records"
        )
        await eventually(
            lambda: (
                sample(sidecar, "ragmon_produce_dropped_total", stream="dead_letter", reason="too_large") == 1
            ),
            what="the copy given up",
        )
        assert sample(sidecar, "ragmon_produce_pending", stream="dead_letter") == 0
        assert sample(sidecar, "ragmon_rejected_total", reason="too_large") == 1
        total = await log_end_total(bs, topic)
        assert total == 1 + len(work.messages)
        await eventually_committed(bs, topic, settings.kafka.group_id, total)


async def test_fetch_watchdog_restarts_a_consumer_whose_fetch_never_returns(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    # A short session: the replaced member's successor joins without waiting out a long one.
    settings = settings_for(
        bs, topic, results, kafka={"fetch_watchdog_seconds": 2.0, "session_timeout_ms": 6000}
    )
    work = generate(50, seed=69)
    async with running(settings) as sidecar:
        source = sidecar.ingest.source if sidecar.ingest else None
        assert source is not None
        real = source.fetch
        hung = asyncio.Event()

        async def hangs_once(timeout_ms: int) -> Any:
            if not hung.is_set():  # as aiokafka's getmany was seen to: never returns
                hung.set()
                await asyncio.Event().wait()
            return await real(timeout_ms)

        source.fetch = hangs_once  # type: ignore[method-assign]
        await produce(bs, topic, work.pairs())
        await eventually(
            lambda: sample(sidecar, "ragmon_consumer_restarts_total", topic=topic) == 1, what="a restart"
        )
        ids = {t.trace_id for t in work.traces}
        await eventually(lambda: result_ids(results) >= ids, within=120, what="every trace after the restart")


async def test_lag_series_follow_the_partitions_a_member_owns(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """`ragmon_consumer_lag_messages{topic,partition}`: one series per owned partition of each
    stage's topic; when a second member takes partitions, the first drops their series."""
    bs = broker.bootstrap_servers
    settings = settings_for(bs, topic, tmp_path / "r.jsonl", kafka={"session_timeout_ms": 6000})
    await produce(bs, topic, generate(30, seed=70).pairs())

    def series(sidecar: Any, of: str) -> set[str]:
        return {
            s.labels["partition"]
            for family in sidecar.metrics.registry.collect()
            for s in family.samples
            if s.name == "ragmon_consumer_lag_messages" and s.labels["topic"] == of
        }

    def owned(sidecar: Any, of: str) -> set[str]:
        return {str(tp.partition) for src in sidecar.sources for tp in src.owned if tp.topic == of}

    async with running(settings) as first:
        await eventually(lambda: series(first, topic) == {"0", "1", "2"}, what="a series per partition")
        async with running(settings) as second:
            await eventually(lambda: 0 < len(owned(second, topic)) < 3, within=60, what="a rebalance")
            await eventually(
                lambda: series(first, topic) == owned(first, topic) and len(series(first, topic)) < 3,
                within=30,
                what="revoked partitions' series removed",
            )
