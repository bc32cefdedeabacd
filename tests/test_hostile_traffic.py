"""Hostile traffic on the real broker: volumes past every in-flight bound, records larger than a
topic takes. Nothing may stop a stage, and nothing read may be lost without a count."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client import CollectorRegistry
from support import (
    HookedJudge,
    eventually,
    eventually_committed,
    read_topic,
    result_ids,
    result_lines,
    running,
    sample,
    sdk_trace,
    settings_for,
    slowed,
    start_sidecar,
)

from monitor.app.sidecar import Sidecar, build_judge
from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.samples import encode_sample
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig
from monitor.kafka.delivery import Delivery, DeliveryMetrics
from monitor.kafka.offsets import OffsetTracker
from monitor.kafka.producer import KafkaOutput
from monitor.outputs.http import MetricsServer

ROOT = {"openinference.span.kind": "CHAIN"}


async def test_a_flush_of_more_messages_than_the_in_flight_bound_is_delivered(
    broker: EmbeddedBroker, topic: str
) -> None:
    """150 queued with room for 100 in flight: the first group is sent before the rest waits."""
    bs = broker.bootstrap_servers
    out_topic = f"{topic}-out"
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [out_topic], partitions=1)
    metrics = Metrics(CollectorRegistry())
    output = KafkaOutput(KafkaConfig(bootstrap_servers=bs))
    await output.start()
    try:
        produced = DeliveryMetrics(metrics.produce_errors, metrics.produce_pending, metrics.produce_dropped)
        delivery = Delivery(output, out_topic, "dead_letter", 100, produced)
        tracker = OffsetTracker()
        tp = TopicPartition(topic, 0)
        tracker.assign([tp])
        refs = [tracker.track(tp, offset, tracker.generation(tp)) for offset in range(150)]
        for i, ref in enumerate(refs):
            assert ref is not None
            delivery.add(None, b"m%d" % i, [ref])
        await asyncio.wait_for(delivery.flush(force=True), 10)
        assert await delivery.drain(10)
        assert delivery.delivered == 150
        assert delivery.in_flight == 0
        assert tracker.committable() == {tp: 150}
    finally:
        await output.close()
    assert len(await read_topic(bs, out_topic, count=150)) == 150


async def test_ten_thousand_garbage_messages_among_valid_traces(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Every bad message dead-lettered (100 in flight at most), every valid trace judged, and the
    group's commits at the end of the topic."""
    bs = broker.bootstrap_servers
    dlq = f"{topic}-dlq"
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [dlq], partitions=1)
    work = generate(400, seed=2401)
    rng = random.Random(24)
    garbage = [(None, b"\xff\x00garbage" + rng.randbytes(rng.randrange(1, 64))) for _ in range(10_000)]
    good = work.pairs()
    mixed: list[tuple[bytes | None, bytes]] = []
    step = len(garbage) // len(good)
    for i, pair in enumerate(good):
        mixed += [pair, *garbage[i * step : (i + 1) * step]]
    mixed += garbage[len(good) * step :]
    results = tmp_path / "results.jsonl"
    settings = settings_for(
        bs, topic, results, kafka={"dead_letter_topic": dlq, "dead_letter_max_inflight": 100}
    )
    async with running(settings) as sidecar:
        await produce(bs, topic, mixed)
        want = {t.trace_id for t in work.traces}
        await eventually(lambda: result_ids(results) >= want, within=120, what="every valid trace judged")
        await eventually(
            lambda: sample(sidecar, "ragmon_rejected_total", reason="decode_error") == len(garbage),
            within=60,
            what="every garbage message counted",
        )
        await eventually_committed(bs, topic, settings.kafka.group_id, len(mixed))
    dead = await read_topic(bs, dlq, count=len(garbage), within=60)
    assert sorted(m.value for m in dead) == sorted(v for _, v in garbage)


async def test_an_oversized_sample_or_result_is_clipped_or_dropped_and_the_commit_moves_on(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Internal topics that take 20,000 bytes: a long chunk is clipped (and the results line says
    so); a sample that is still too large (a 30 KB chunk id) is dropped and counted, and a results
    line over the limit is left out of the topic but kept in the file. Neither holds a commit."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    settings = settings_for(
        bs,
        topic,
        results,
        pipeline={"max_message_bytes": 20_000, "sample_max_chunk_chars": 2_000},
    )

    def rag(chunk_id: str, content: str, answer: str) -> tuple[str, bytes]:
        return sdk_trace(
            [
                ("rag", {**ROOT, "input.value": "what does the manual say?", "output.value": answer}),
                (
                    "retrieve",
                    {
                        "openinference.span.kind": "RETRIEVER",
                        "retrieval.documents.0.document.id": chunk_id,
                        "retrieval.documents.0.document.content": content,
                        "retrieval.documents.0.document.score": 0.9,
                    },
                ),
            ]
        )

    clipped_id, clipped = rag("long", "The manual says restart the pump. " * 3000, "Restart the pump.")
    huge_id, huge = rag("x" * 30_000, "short text", "Restart the pump.")
    # A small sample (~4.5 KB, the answer under the 4,000-character clip), a large results line
    # (~35 KB: a judged claim per short sentence).
    answer = " ".join(f"Pump {i} is on." for i in range(250))
    big_result_id, big_result = rag("c1", "The manual lists every step of the pump restart.", answer)
    work = generate(30, seed=2403)
    async with running(settings) as sidecar:
        await produce(bs, topic, [(None, clipped), (None, huge), (None, big_result), *work.pairs()])
        want = {t.trace_id for t in work.traces} | {clipped_id, big_result_id}
        await eventually(lambda: result_ids(results) >= want, within=60, what="results")
        await eventually(
            lambda: (
                sample(sidecar, "ragmon_produce_dropped_total", stream="samples", reason="too_large") == 1
            ),
            what="the oversized sample dropped",
        )
        await eventually(
            lambda: (
                sample(sidecar, "ragmon_produce_dropped_total", stream="results", reason="too_large") == 1
            ),
            what="the oversized results line left out of the topic",
        )
        await eventually_committed(bs, topic, settings.kafka.group_id, 3 + len(work.messages))
    lines = {line["trace_id"]: line for line in result_lines(results)}
    assert huge_id not in lines
    assert lines[clipped_id]["clipped"] == {
        "chunks_dropped": 0,
        "texts_clipped": 1,
        "chars_clipped": len("The manual says restart the pump. " * 3000) - 2_000,
    }
    assert len(lines[clipped_id]["chunks"][0]["content"]) == 2_000
    assert "clipped" not in lines[big_result_id]
    assert settings.results.topic is not None
    topic_ids = {json.loads(m.value)["trace_id"] for m in await read_topic(bs, settings.results.topic)}
    assert topic_ids >= want - {big_result_id}
    assert big_result_id not in topic_ids


async def test_sigterm_ends_the_process_in_time_while_a_produce_never_completes(tmp_path: Path) -> None:
    """The broker stops answering (SIGSTOP) with traces open: at SIGTERM the ingest stage emits
    them, and waits for room among produces that never complete (before, for ever). The process
    still exits within `shutdown_seconds` and a small margin."""
    with EmbeddedBroker() as own:
        bs, topic = own.bootstrap_servers, "spans"
        await ensure_topics(KafkaConfig(bootstrap_servers=bs), [topic], partitions=3)
        results, log = tmp_path / "results.jsonl", tmp_path / "sidecar.log"
        proc = start_sidecar(
            bs,
            topic,
            results,
            log,
            RAGMON_PIPELINE__SHUTDOWN_SECONDS="6",
            RAGMON_ASSEMBLY__GRACE_SECONDS="60",  # held open until the shutdown emits them
            RAGMON_ASSEMBLY__TIMEOUT_SECONDS="120",
            RAGMON_PIPELINE__MAX_INFLIGHT_PRODUCES="5",  # the emitted samples wait for room
        )
        try:
            await eventually(
                lambda: log.read_text().count("assigned partitions") >= 2, within=60, what="join"
            )
            work = generate(50, seed=2402)
            await produce(bs, topic, work.pairs())
            await asyncio.sleep(2.0)  # consumed, assembled, held open
            os.kill(own.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                code = await asyncio.to_thread(proc.wait, 60)
                took = time.monotonic() - started
            finally:
                os.kill(own.pid, signal.SIGCONT)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert took < 6 + 3, f"SIGTERM took {took:.1f}s with shutdown_seconds 6 (exit code {code})"
    assert not result_ids(results) & {t.trace_id for t in work.traces}, "nothing was judged before"


class ResultIds:
    """The trace ids of a results file as it grows, read incrementally (parsing 40,000 lines ten
    times a second would take the CPU the sidecar needs)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ids: set[str] = set()
        self._offset = 0

    def __call__(self) -> set[str]:
        if self.path.exists():
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
            complete = data[: data.rfind(b"\n") + 1]
            self._offset += len(complete)
            self.ids.update(json.loads(line)["trace_id"] for line in complete.splitlines() if line)
        return self.ids


@pytest.mark.timeout(900)
async def test_forty_thousand_traces_all_judged_while_a_second_member_joins_and_leaves(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Sample rate 1: every trace a sample, 40,000 samples through both stages, while a second
    member of both groups joins and leaves (two rebalances of each). Every trace is judged; the
    load the product handled before the stage split stopped after ~15,000 judgements."""
    bs = broker.bootstrap_servers
    work = generate(40_000, seed=2404)
    want = {t.trace_id for t in work.traces}
    results, other_results = tmp_path / "results.jsonl", tmp_path / "other.jsonl"
    unrotated = {"file_max_bytes": 0}  # ~160 MB of results: read whole, as one file each
    settings = settings_for(bs, topic, results, results=unrotated)
    other = settings_for(bs, topic, other_results, results=unrotated)
    mine, theirs = ResultIds(results), ResultIds(other_results)
    async with running(settings):
        feeder = asyncio.create_task(produce(bs, topic, work.pairs()))
        await eventually(lambda: len(mine()) >= 5_000, within=300, what="5,000 judged")
        async with running(other):
            await eventually(lambda: len(theirs()) >= 1_000, within=300, what="the second member judging")
        await feeder
        await eventually(lambda: mine() | theirs() >= want, within=600, what="every trace judged")


class Prober(threading.Thread):
    """Polls `/readyz`, `/healthz` and `/metrics` from its own thread (the event loop may be the
    thing that is stuck) and notes when each first showed `stage` stalled."""

    def __init__(self, port: int, stage: str, within: float) -> None:
        super().__init__(daemon=True)
        self.base = f"http://127.0.0.1:{port}"
        self.stage = stage
        self.within = within
        self.seen: dict[str, float] = {}
        self.bodies: dict[str, str] = {}

    def run(self) -> None:
        deadline = time.monotonic() + self.within
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline and len(self.seen) < 3:
                for path in ("/readyz", "/healthz"):
                    r = client.get(self.base + path)
                    if path not in self.seen and r.status_code == 503 and self.stage in r.json():
                        self.seen[path], self.bodies[path] = time.monotonic(), r.text
                metrics = client.get(self.base + "/metrics").text
                if (
                    "metric" not in self.seen
                    and f'ragmon_stage_stalled{{stage="{self.stage}"}} 1.0' in metrics
                ):
                    self.seen["metric"] = time.monotonic()
                time.sleep(0.1)


def serve(sidecar: Sidecar) -> MetricsServer:
    return MetricsServer(
        sidecar.metrics.registry, "127.0.0.1", 0, sidecar.readiness, liveness=sidecar.liveness
    )


async def test_a_judge_that_blocks_the_event_loop_is_seen_stalled(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """A judge that takes the event loop for 8 s (a CPU-bound judge run inline, as the lexical
    judge was): the loop marks nothing, and the HTTP thread sees the judge stage stalled within
    `stall_seconds` (/readyz and the gauge) and, past `liveness_stall_seconds`, /healthz fails."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    settings = settings_for(
        bs, topic, results, pipeline={"stall_seconds": 2.0, "liveness_stall_seconds": 4.0}
    )
    blocked_at: list[float] = []

    async def block_once(_: RagRecord) -> None:
        if not blocked_at:
            blocked_at.append(time.monotonic())
            time.sleep(8.0)  # noqa: ASYNC251 (the point: the loop is held)

    real = build_judge(settings)
    assert real is not None
    blocking = HookedJudge(real, block_once)

    work = generate(20, seed=2405)
    async with running(settings, blocking) as sidecar:
        server = serve(sidecar)
        port = server.start()
        try:
            async with httpx.AsyncClient() as client:
                assert (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
            assert sample(sidecar, "ragmon_stage_stalled", stage="judge") == 0
            prober = Prober(port, "judge", within=40)
            prober.start()
            await produce(bs, topic, work.pairs())
            await eventually(lambda: result_ids(results) >= {t.trace_id for t in work.traces}, within=60)
            await asyncio.to_thread(prober.join, 40)
        finally:
            server.stop()
        await eventually(
            lambda: sample(sidecar, "ragmon_stage_stalled", stage="judge") == 0,
            what="progress after the block",
        )
    start = blocked_at[0]
    assert set(prober.seen) == {"/readyz", "/healthz", "metric"}, prober.seen
    assert prober.seen["/readyz"] - start < 2.0 + 1.0
    assert prober.seen["metric"] - start < 2.0 + 1.0
    assert 4.0 <= prober.seen["/healthz"] - start < 4.0 + 1.0
    assert "judgements has not moved" in prober.bodies["/readyz"]


async def test_a_produce_that_never_completes_is_seen_stalled(tmp_path: Path) -> None:
    """The broker stops answering (SIGSTOP) while samples are on their way: the ingest stage
    still holds its partitions, but its samples output is seen stalled within `stall_seconds`."""
    with EmbeddedBroker() as own:
        bs, topic = own.bootstrap_servers, "spans"
        await ensure_topics(KafkaConfig(bootstrap_servers=bs), [topic], partitions=3)
        results = tmp_path / "results.jsonl"
        settings = settings_for(
            bs,
            topic,
            results,
            pipeline={"stall_seconds": 2.0, "shutdown_seconds": 6.0},
            assembly={"grace_seconds": 4.0, "timeout_seconds": 30.0},  # emitted after the stop
        )
        work = generate(30, seed=2406)
        async with running(settings) as sidecar:
            server = serve(sidecar)
            port = server.start()
            try:
                assert sidecar.ingest is not None
                await produce(bs, topic, work.pairs())
                ingest = sidecar.ingest
                await eventually(lambda: ingest.assembler.open_traces == len(work.traces), what="traces open")
                prober = Prober(port, "ingest", within=15)
                os.kill(own.pid, signal.SIGSTOP)
                stopped = time.monotonic()
                try:
                    prober.start()
                    await asyncio.to_thread(prober.join, 20)
                finally:
                    os.kill(own.pid, signal.SIGCONT)
            finally:
                server.stop()
    assert "/readyz" in prober.seen and "metric" in prober.seen, prober.seen
    # The samples go out when the traces fall due (grace 4 s), then wait for their ack.
    assert prober.seen["/readyz"] - stopped < 4.0 + 2.0 + 1.5
    assert "samples has not moved" in prober.bodies["/readyz"]


def label_values(sidecar: Sidecar, label: str) -> set[str]:
    return {
        s.labels[label]
        for fam in sidecar.metrics.registry.collect()
        for s in fam.samples
        if label in s.labels and s.name.startswith("ragmon_")
    }


async def test_labels_read_back_from_the_internal_topics_are_bounded_again(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Anything with write access may put messages on the samples and results topics: 200 forged
    samples and results lines, each with its own service and query type, leave every label in the
    allow-list or the first `max_services`."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    settings = settings_for(bs, topic, results, slices={"max_services": 3})
    async with running(settings) as sidecar:
        forged = []
        for i in range(200):
            record = RagRecord(
                trace_id=f"{i:032x}",
                span_id="1" * 16,
                service=f"svc-{i}",
                query="What is it?",
                query_type=f"qt-{i}",
                chunks=[Chunk("c1", "It is a pump.", 0.9)],
                answer="It is a pump.",
            )
            forged.append(
                (record.trace_id.encode(), encode_sample(record, 1.0, f"svc-{i}", "span", time.time()))
            )
        await produce(bs, settings.pipeline.samples_topic, forged)
        await eventually(lambda: len(result_ids(results)) == 200, what="forged samples judged")
        assert settings.results.topic is not None
        lines = [json.loads(line) for line in results.read_text().splitlines()]
        rogue = [
            (b"x", json.dumps({**line, "query_type": f"rogue-{i}"}).encode()) for i, line in enumerate(lines)
        ]
        await produce(bs, settings.results.topic, rogue)
        drift = sidecar.drift
        assert drift is not None
        await eventually(lambda: drift.seen >= 400, what="the drift stage read them")
    services = label_values(sidecar, "service")
    assert len(services - {"other", "unknown_service"}) <= 3, services
    assert label_values(sidecar, "query_type") <= set(settings.slices.query_types) | {"other", "all"}


async def test_a_rebalance_while_the_judge_stage_is_paused_keeps_it_paused(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """A slow judge holds its `queue_size` and pauses; a second member joins and leaves (two
    rebalances): the partitions handed back must come paused, or the member fetches on without
    bound. Held samples stay within twice the queue."""
    bs = broker.bootstrap_servers
    queue = 20
    settings = settings_for(bs, topic, tmp_path / "a.jsonl", pipeline={"queue_size": queue})
    other = settings_for(bs, topic, tmp_path / "b.jsonl", pipeline={"queue_size": queue, "role": "judge"})
    work = generate(1500, seed=2408)
    most = [0]
    async with running(settings, slowed(settings, 0.05)) as sidecar:
        stage = sidecar.judge_stage
        assert stage is not None

        async def watch() -> None:
            while True:
                most[0] = max(most[0], stage._held)
                await asyncio.sleep(0.005)

        watcher = asyncio.create_task(watch())
        try:
            await produce(bs, topic, work.pairs())
            await eventually(lambda: stage._held >= queue, what="the queue full, the partitions paused")
            async with running(other, slowed(other, 0.05)):
                await asyncio.sleep(3.0)
            await asyncio.sleep(3.0)  # the partitions come back
        finally:
            watcher.cancel()
    assert most[0] <= 2 * queue, f"held {most[0]} samples with queue_size {queue}"


async def test_internal_topics_are_created_with_the_replication_asked_or_not_at_all(
    broker: EmbeddedBroker, topic: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`create_topics: false` leaves a provisioned cluster's topics to it (a missing one is named
    in the log); otherwise the replication factor asked for is the one requested (the old key
    name still read)."""
    bs = broker.bootstrap_servers
    off = settings_for(bs, topic, None, pipeline={"create_topics": False})
    assert off.pipeline.topics_replication == 1
    sidecar = Sidecar(off)
    await sidecar.output.start()
    try:
        with caplog.at_level(logging.ERROR, logger="monitor.app.sidecar"):
            await sidecar._ensure_topics()
    finally:
        await sidecar.output.close()
    missing = [off.pipeline.samples_topic, off.results.topic]
    assert f"topics {missing} are missing and pipeline.create_topics is off" in caplog.text
    admin = AIOKafkaAdminClient(bootstrap_servers=bs)
    await admin.start()
    try:
        assert not set(missing) & set(await admin.list_topics())
    finally:
        await admin.close()
    old_name = settings_for(bs, topic, None, pipeline={"samples_replication": 3})
    assert old_name.pipeline.topics_replication == 3
