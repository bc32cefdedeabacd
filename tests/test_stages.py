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
from aiokafka import AIOKafkaConsumer, TopicPartition
from support import eventually, read_topic, result_ids, result_lines, running, sample, settings_for
from test_judge_llm import FakeAPI, Reply, _error_body, default_reply
from test_judge_llm import _server as _server
from test_process import start_sidecar

from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce
from monitor.samples import decode_sample


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
        assert msg.service_label == "rag-demo"
    # Keyed by trace id: a trace's samples stay in one partition of the judge group.
    assert all(m.key == json.loads(m.value)["trace_id"].encode() for m in messages)


async def test_judge_outage_never_slows_ingestion_and_loses_no_judgement(
    api: FakeAPI, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    settings = anthropic_settings(api, bs, topic, results)
    down = [Reply(529, _error_body("/v1/messages", "overloaded_error", "Overloaded"))]
    api.default = lambda path, body: down[0]
    work = generate(150, seed=62)
    ids = {t.trace_id for t in work.traces}
    async with running(settings) as sidecar:
        await produce(bs, topic, work.pairs())
        # Ingestion goes on at its own pace while the judge answers nothing but 529s...
        await eventually(lambda: sidecar.ingest is not None and sidecar.ingest.records_seen == 150)
        await eventually(lambda: sample(sidecar, "ragmon_judge_circuit_open") == 1, what="breaker open")
        # ...and 500s: still no sample is burnt as a failed judgement.
        down[0] = Reply(500, _error_body("/v1/messages", "api_error", "Internal"))
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


async def test_a_record_that_breaks_the_judge_is_still_written(
    api: FakeAPI, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """The judge is up but one record's judgement keeps failing with 500: after max_attempts it is
    written with its error instead of holding the partition forever."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    work = generate(30, seed=63)
    queries = [t.query for t in work.traces]
    victim = next(t for t in work.traces if queries.count(t.query) == 1)
    poison = victim.query

    def reply(path: str, body: dict[str, Any]) -> Reply:
        if poison in json.dumps(body):
            return Reply(500, _error_body(path, "api_error", "boom"))
        return default_reply(path, body)

    api.default = reply
    settings = anthropic_settings(api, bs, topic, results)
    async with running(settings):
        await produce(bs, topic, work.pairs())
        await eventually(lambda: len(result_ids(results)) == 30, within=60, what="all written")
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
        feeder = asyncio.create_task(produce(bs, topic, work.pairs(), rate=250))
        for role, share in (("ingest", 6), ("judge", 3)):
            await eventually(lambda s=share: len(result_ids(results)) >= len(ids) // s, within=60)
            # Mid-stream: ingest while spans still come, the judge while samples wait for it.
            assert not feeder.done() if role == "ingest" else len(result_ids(results)) < len(ids)
            procs[role].send_signal(signal.SIGKILL)
            procs[role].wait(timeout=10)
            procs[role] = start(role)
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
