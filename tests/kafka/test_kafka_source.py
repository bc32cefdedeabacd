"""The Kafka source's consume loop against the embedded broker: the next fetch is on its way to the
broker before a batch is handed over, and a rebalance in that moment cannot mislabel a batch."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.conn import AIOKafkaConnection

from monitor.contracts.metrics import Metrics
from monitor.demo.broker import EmbeddedBroker
from monitor.kafka.config import KafkaConfig
from monitor.kafka.consumer import Batch, KafkaSource, SourceSpec
from monitor.kafka.offsets import OffsetTracker

MESSAGES = 3_000


@pytest.fixture
def fetch_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the fetch requests aiokafka writes to the broker (observed, then sent as they were)."""
    sent: list[int] = []
    send = AIOKafkaConnection.send

    def observed(self: AIOKafkaConnection, request: Any, *args: Any, **kwargs: Any) -> Any:
        if type(request).__name__.startswith("FetchRequest"):
            sent.append(1)
        return send(self, request, *args, **kwargs)

    monkeypatch.setattr(AIOKafkaConnection, "send", observed)
    yield sent


async def _fill(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for i in range(MESSAGES):
            await producer.send(topic, b"x" * 200, partition=i % 3)
        await producer.flush()
    finally:
        await producer.stop()


def _source(bootstrap: str, topic: str, tracker: OffsetTracker, max_poll_records: int) -> KafkaSource:
    metrics = Metrics()

    async def revoked(partitions: set[TopicPartition]) -> None:
        pass

    return KafkaSource(
        # Fetches of ~66 KB a partition: a few batches of ~1,000 messages each.
        KafkaConfig(bootstrap_servers=bootstrap, max_message_bytes=1024),
        SourceSpec(topic, f"g-{topic}", "earliest", max_poll_records),
        tracker,
        metrics.consumer,
        revoked,
    )


async def _consume(
    source: KafkaSource,
    stop: asyncio.Event,
    handle: Callable[[Batch], Awaitable[None]],
    due: Callable[[], float | None] | None = None,
) -> None:
    """A started source's consume loop until `stop` (a minute at most), then leave the group."""
    try:
        async with asyncio.timeout(60):
            await source.consume(stop, handle, due)
    finally:
        await source.stop(grace_seconds=1.0)


async def test_the_next_fetch_is_sent_before_a_batch_is_handled(
    broker: EmbeddedBroker, topic: str, fetch_requests: list[int]
) -> None:
    """Each batch drains what aiokafka had buffered, so the fetcher must ask for more; the request
    has to be on the wire when the stage starts its CPU-bound work on the batch, or the broker
    round trip adds to it (before: sent at the stage's first pause, 256 messages in)."""
    await _fill(broker.bootstrap_servers, topic)
    source = _source(broker.bootstrap_servers, topic, OffsetTracker(), max_poll_records=MESSAGES)
    stop = asyncio.Event()
    got = 0
    at_fetch: dict[int, int] = {}
    sent_when_handled: list[tuple[int, int]] = []
    fetch = source.fetch

    async def counted_fetch(timeout_ms: int) -> Batch:
        batch = await fetch(timeout_ms)
        at_fetch[id(batch)] = len(fetch_requests)  # requests sent up to the moment it returned
        return batch

    source.fetch = counted_fetch  # type: ignore[method-assign]

    async def handle(batch: Batch) -> None:
        nonlocal got
        if not batch:
            return
        sent_when_handled.append((at_fetch[id(batch)], len(fetch_requests)))
        got += sum(len(messages) for messages in batch.values())
        if got >= MESSAGES:
            stop.set()

    assert await source.start(stop)
    await _consume(source, stop, handle)
    assert got == MESSAGES
    assert len(sent_when_handled) >= 3, sent_when_handled
    assert all(handled > fetched for fetched, handled in sent_when_handled), sent_when_handled


async def test_a_partition_whose_generation_changes_before_its_batch_is_handled_is_dropped(
    broker: EmbeddedBroker, topic: str
) -> None:
    """A rebalance while the fetcher takes its turns: the stages would read the new generation and
    track the old batch's offsets in it, so what was fetched before is not handed over."""
    await _fill(broker.bootstrap_servers, topic)
    tracker = OffsetTracker()
    source = _source(broker.bootstrap_servers, topic, tracker, max_poll_records=MESSAGES)
    stop = asyncio.Event()
    fetched: list[Batch] = []
    handled: list[Batch] = []
    fetch = source.fetch

    async def fetch_then_reassign(timeout_ms: int) -> Batch:
        batch = await fetch(timeout_ms)
        if batch and not fetched:
            fetched.append(batch)
            # A new generation for one of its partitions, a turn after the batch came back.
            asyncio.get_running_loop().call_soon(tracker.assign, [min(batch)])
        return batch

    source.fetch = fetch_then_reassign  # type: ignore[method-assign]

    async def handle(batch: Batch) -> None:
        if batch or fetched:
            handled.append(batch)
        if len(handled) >= 2:
            stop.set()

    assert await source.start(stop)
    await _consume(source, stop, handle)
    first = fetched[0]
    reassigned = min(first)
    assert sorted(handled[0]) == sorted(tp for tp in first if tp != reassigned)
    for tp in handled[0]:
        assert handled[0][tp] is first[tp]


async def test_a_stage_is_handed_an_empty_batch_when_its_work_falls_due(
    broker: EmbeddedBroker, topic: str
) -> None:
    """A trace due for emission on a quiet topic leaves then, not when the fetch in flight gives
    up (100 ms) or the loop's tick (0.2 s) comes: the empty batch precedes the first fetch's
    return."""
    source = _source(broker.bootstrap_servers, topic, OffsetTracker(), max_poll_records=10)
    stop = asyncio.Event()
    events: list[str] = []
    fetch = source.fetch

    async def noted_fetch(timeout_ms: int) -> Batch:
        batch = await fetch(timeout_ms)
        events.append("fetch returned")
        return batch

    source.fetch = noted_fetch  # type: ignore[method-assign]
    assert await source.start(stop)
    await source.assigned.wait()
    soon = asyncio.get_running_loop().time() + 0.03  # the loop's clock is time.monotonic()

    async def handle(batch: Batch) -> None:
        events.append("handled")
        stop.set()

    await _consume(source, stop, handle, due=lambda: soon)
    assert events[0] == "handled", events


async def test_the_source_reads_plain_and_gzip_batches_with_the_compiled_reader(
    broker: EmbeddedBroker, topic: str
) -> None:
    """Through the real broker: the source's records come from the compiled reader (not aiokafka's
    per-record code), for plain and gzip-compressed batches, keys, values, headers and offsets
    as produced, every offset once."""
    from monitor.kafka import records

    if records.READER is None:
        pytest.skip(records.READER_KIND)
    sent: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    for compression in (None, "gzip"):
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, compression_type=compression)
        await producer.start()
        try:
            for i in range(300):
                key, value = f"k{i}".encode(), f"{compression}-{i}-".encode() * 20
                meta = await (
                    await producer.send(topic, value, key=key, partition=i % 3, headers=[("n", b"%d" % i)])
                )
                sent[(meta.partition, meta.offset)] = (key, value)
        finally:
            await producer.stop()
    source = _source(broker.bootstrap_servers, topic, OffsetTracker(), max_poll_records=250)
    stop = asyncio.Event()
    got: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    kinds: set[str] = set()
    readers: set[tuple[str, int]] = set()

    async def handle(batch: Batch) -> None:
        assert source._consumer is not None
        # The connections keep a response's chunks and read it whole: no socket pause every 128 KiB.
        conns = source._consumer._client._conns.values()
        readers.update((type(c._reader).__name__, c._reader._limit) for c in conns if c._reader)
        for tp, messages in batch.items():
            for m in messages:
                kinds.add(type(m).__module__)
                assert (tp.partition, m.offset) not in got
                assert m.headers and m.headers[0][0] == "n"
                got[(tp.partition, m.offset)] = (m.key, m.value)
        if len(got) >= len(sent):
            stop.set()

    assert await source.start(stop)
    await _consume(source, stop, handle)
    assert got == sent
    assert kinds == {"monitor.kafka._records"}
    assert readers == {("_ChunkedReader", 4 * 1024 * 1024)}
