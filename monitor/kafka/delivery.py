"""Produce a message while holding the offsets it came from, until the broker has it.

Used for the samples topic (ingest → judge) and the dead-letter topic. The holds are released only
on the broker's acknowledgement, so a crash before it re-reads the source message; a topic that
keeps failing is retried with capped backoff for as long as it takes, holding its partition's
commits (lag grows, `ragmon_produce_errors_total` counts), never losing the message — except one
the broker refuses for its size, which no retry can send: that one is dropped with a reason
(`ragmon_produce_dropped_total`), so that it cannot freeze its partition's commits. The number of
messages in flight is bounded: when it is reached, `submit` waits, which is back-pressure on the
stage that produces, not memory growth. Messages are added one by one and sent in groups (see
`flush`): aiokafka's per-message `send`, and a task per message, cost more than decoding a record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import Counter, Gauge

from monitor.kafka.offsets import MessageRef
from monitor.kafka.producer import KafkaOutput
from monitor.plumbing.progress import Progress

log = logging.getLogger(__name__)

_MAX_BACKOFF = 30.0
_FLUSH_COUNT = 500
_FLUSH_SECONDS = 0.25

_Item = tuple[bytes | None, bytes, Sequence[MessageRef]]  # key, value, the source offsets held


@dataclass(frozen=True, slots=True)
class DeliveryMetrics:
    errors: Counter  # labels: stream
    pending: Gauge  # labels: stream
    dropped: Counter  # labels: stream, reason


class Delivery:
    def __init__(
        self,
        output: KafkaOutput,
        topic: str,
        stream: str,
        max_inflight: int,
        metrics: DeliveryMetrics,
        max_bytes: int | None = None,
    ) -> None:
        """`max_bytes`: the topic's message size limit (None: the producer's own)."""
        self.topic = topic
        self._max_bytes = max_bytes
        self._output = output
        self._slots = asyncio.Semaphore(max_inflight)
        self._queued: list[_Item] = []
        self._count = 0
        self._since = 0.0  # when the oldest queued message was added
        self._tasks: set[asyncio.Task[None]] = set()
        self._errors = metrics.errors.labels(stream=stream)
        self._pending = metrics.pending.labels(stream=stream)
        self._dropped = metrics.dropped
        self._stream = stream
        self._warned = self._warned_drop = -float("inf")
        self.delivered = 0
        self.progress = Progress(stream)  # acknowledgements, while any is awaited

    @property
    def in_flight(self) -> int:
        """Messages handed over and not yet acknowledged."""
        return self._count

    def add(self, key: bytes | None, value: bytes, refs: Sequence[MessageRef]) -> None:
        """Queue a message for a `flush` (cheap: the hot path calls it per record)."""
        if not self._queued:
            self._since = time.monotonic()
        self._queued.append((key, value, refs))

    async def flush(self, force: bool = False) -> None:
        """Send what `add` queued, in the background, in as few groups as the in-flight bound
        allows — once `_FLUSH_COUNT` messages or `_FLUSH_SECONDS` have gathered, or now with
        `force`: aiokafka's CPU per produce request (~2 ms here) dwarfs its cost per message
        (~8 µs), so fewer, larger requests keep the samples' share of ingest small. Each
        message's `refs` are released once the broker acknowledges. Waits only while
        `max_inflight` are unacknowledged: what holds slots is sent before waiting for more, so a
        flush larger than the bound cannot wait on itself."""
        items = self._queued
        if not items or (
            not force and len(items) < _FLUSH_COUNT and time.monotonic() - self._since < _FLUSH_SECONDS
        ):
            return
        self._queued = []
        slots = self._slots
        start = 0
        for i in range(len(items)):
            if i > start and slots.locked():
                self._dispatch(items[start:i])
                start = i
            await slots.acquire()
        self._dispatch(items[start:])

    def _dispatch(self, items: list[_Item]) -> None:
        """`items` hold a slot each: send them in the background."""
        self._count += len(items)
        self._pending.inc(len(items))
        self.progress.wait(True)
        task = asyncio.create_task(self._deliver(items))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, items: list[_Item]) -> None:
        try:
            await self._send(items)
        finally:
            self._count -= len(items)
            self._pending.dec(len(items))
            self.progress.wait(self._count > 0)
            for _ in items:
                self._slots.release()

    async def _send(self, items: list[_Item]) -> None:
        """Until every message is acknowledged or refused for its size: that one no retry can
        send, so it is dropped, counted and its offsets released rather than retried for ever
        behind a frozen commit."""
        delay = 0.5
        messages = [(key, value) for key, value, _ in items]
        while True:
            try:
                refused = await self._output.send_many(self.topic, messages, self._max_bytes)
                break
            except Exception as exc:  # the producer raises several KafkaError kinds, and more
                self._errors.inc()
                now = time.monotonic()
                if now - self._warned >= 10.0:
                    self._warned = now
                    log.warning(
                        "%s: producing %d message(s) to %s failed (%s); retrying, offsets held",
                        self._stream,
                        len(messages),
                        self.topic,
                        type(exc).__name__,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_BACKOFF)
        for i in refused:
            self._drop(items[i], "too_large")
        self.delivered += len(items) - len(refused)
        self.progress.moved()
        for _, _, refs in items:
            for ref in refs:
                ref.release()

    def _drop(self, item: _Item, reason: str) -> None:
        key, value, _ = item
        self._dropped.labels(stream=self._stream, reason=reason).inc()
        now = time.monotonic()
        if now - self._warned_drop >= 60.0:
            self._warned_drop = now
            log.error(
                "%s: a %d-byte message (key %r) to %s is larger than the topic takes (max %s bytes),"
                " dropped; further drops for a minute are only counted in ragmon_produce_dropped_total",
                self._stream,
                len(value),
                (key or b"")[:64].decode("utf-8", "replace"),
                self.topic,
                self._max_bytes or self._output.max_request_size,
            )

    async def drain(self, seconds: float) -> bool:
        """Wait for what is in flight; False when some is still unacknowledged after `seconds`
        (its offsets stay held, so it is re-read)."""
        if not self._tasks:
            return True
        _, pending = await asyncio.wait(set(self._tasks), timeout=max(0.0, seconds))
        return not pending

    async def cancel(self) -> None:
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
