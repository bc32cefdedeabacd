"""The Kafka source: a consumer-group member with manual, at-least-once commits.

Both stages use it the same way (spans for ingest, samples for the judge). Offsets are committed
only up to the first message that is not done (see `offsets`), on a timer, on rebalance and on
shutdown, and never backwards. Starting before the broker is up, or losing it, only delays.

Lag is measured from the committed offset, not the fetch position: work fetched but not finished
(open traces, samples awaiting their judgement) is still owed. A fetch watchdog restarts the
consumer when an assigned member sees no fetch come back for `fetch_watchdog_seconds` (aiokafka's
`getmany` has been seen to hang while the member kept heartbeating, holding its partitions).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import ConsumerRecord
from prometheus_client import Counter, Gauge

from monitor.kafka.client import client_kwargs
from monitor.kafka.config import KafkaConfig
from monitor.kafka.offsets import OffsetTracker
from monitor.kafka.records import install as install_record_reader
from monitor.kafka.responses import install as install_response_reader
from monitor.plumbing.progress import Progress

log = logging.getLogger(__name__)

RevokeHandler = Callable[[set[TopicPartition]], Awaitable[None]]
# (partitions this member owns, partitions of the topic): the member's share of the traffic.
AssignHandler = Callable[[int, int], None]
Batch = dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]
# aiokafka's fetcher task asks for a partition's next records only once its buffered ones are all
# taken, three turns of the event loop after `getmany` took them (it wakes, builds the request in a
# new task, that task sends it). Yielding those turns before a batch is handled puts the broker to
# work on the next fetch while this one is processed; before, the request went out at the ingest
# stage's first pause, 256 messages in, and the sidecar idled ~7 % of a production-mix drain.
_FETCHER_TURNS = 3
_Generations = list[tuple[TopicPartition, int | None]]
_TICK_SECONDS = 0.2  # the longest a stage goes without a (possibly empty) batch
_MIN_WAIT_SECONDS = 0.001  # for a `due` instant that has passed: no busy loop if it stays so


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """What differs between the stages' consumers."""

    topic: str
    group_id: str
    auto_offset_reset: str
    max_poll_records: int
    # Read every newly assigned partition from its start (the drift stage rebuilds its state so);
    # `replay_until` then says where the group's previous owner had got to.
    replay: bool = False


@dataclass(frozen=True, slots=True)
class ConsumerMetrics:
    lag: Gauge  # labels: topic, partition
    restarts: Counter  # labels: topic


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if revoked:
            await self._source.handle_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        new = self._source.handle_assigned(set(assigned))
        if new and self._source.spec.replay:
            await self._source.rewind(new)


class KafkaSource:
    def __init__(
        self,
        config: KafkaConfig,
        spec: SourceSpec,
        tracker: OffsetTracker,
        metrics: ConsumerMetrics,
        on_revoked: RevokeHandler,
        on_assigned: AssignHandler | None = None,
    ) -> None:
        self._cfg = config
        self.spec = spec
        self._tracker = tracker
        self._metrics = metrics
        self._on_revoked = on_revoked
        self._on_assigned = on_assigned
        self._consumer: AIOKafkaConsumer | None = None
        self._committed: dict[TopicPartition, int] = {}
        self._lag_series: set[int] = set()
        self.assigned = asyncio.Event()  # set once the group has given this member partitions
        self.owned: frozenset[TopicPartition] = frozenset()  # read by /readyz from another thread
        self.last_fetch = time.monotonic()  # when a fetch last came back (watchdog, readiness)
        self.last_contact: float | None = None  # when the broker last answered anything
        self.replay_until: dict[TopicPartition, int] = {}  # spec.replay: offsets below were seen before
        # A fetched batch the stage has not finished handling: what a stuck stage sits on.
        self.input = Progress("input")
        self.paused = False  # see `pause`
        # Records a fetch returns at most: the spec's, or fewer set by a stage that bounds bytes.
        self.max_records = spec.max_poll_records

    async def start(self, stop: asyncio.Event) -> bool:
        """Join the group, retrying with backoff until it works or `stop` is set."""
        delay = 0.25
        fetch_limit = self._cfg.max_message_bytes + 64 * 1024
        install_record_reader()  # the ingest stage logs which reader it is
        install_response_reader()
        spec = self.spec
        while not stop.is_set():
            settings: dict[str, Any] = {
                "group_id": spec.group_id,
                "enable_auto_commit": False,
                "auto_offset_reset": spec.auto_offset_reset,
                "max_poll_records": spec.max_poll_records,
                "max_partition_fetch_bytes": fetch_limit,
                "fetch_max_bytes": max(fetch_limit, 52_428_800),
                "session_timeout_ms": self._cfg.session_timeout_ms,
                "heartbeat_interval_ms": max(100, self._cfg.session_timeout_ms // 3),
                "metadata_max_age_ms": 30_000,
                # Batches are read unchecked, as librdkafka does by default: with aiokafka's CRC
                # check a batch that fails it raises out of every fetch of its partition (the
                # stage would stop, and meet it again on restart), while unchecked, a damaged
                # value fails decoding and is counted like any bad input. Brokers check batches
                # when they are produced (Kafka does; tansu does not); the check was ~12 % of the CPU.
                "check_crcs": False,
            }
            consumer = AIOKafkaConsumer(
                **settings, **client_kwargs(self._cfg, client=AIOKafkaConsumer, fixed=settings)
            )
            try:
                await consumer.start()
                consumer.subscribe([spec.topic], listener=_Rebalance(self))
                self._consumer = consumer
                self.last_fetch = time.monotonic()
                self.last_contact = self.last_fetch
                log.info("consuming %s as group %s", spec.topic, spec.group_id)
                return True
            except KafkaError as exc:
                await consumer.stop()
                log.warning(
                    "Kafka not reachable at %s (%s); retrying in %.1fs",
                    self._cfg.bootstrap_servers,
                    type(exc).__name__,
                    delay,
                )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop.wait()
                delay = min(delay * 2, self._cfg.reconnect_backoff_max_seconds)
        return False

    async def fetch(self, timeout_ms: int) -> Batch:
        """Up to max_poll_records messages. May take far longer than `timeout_ms` while the group
        (re)joins (seen: 30 s), so callers must not tie their clock to it."""
        assert self._consumer is not None
        batch: Batch = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=self.max_records)
        self.last_fetch = self.last_contact = time.monotonic()
        return batch

    async def consume(
        self,
        stop: asyncio.Event,
        handle: Callable[[Batch], Awaitable[None]],
        due: Callable[[], float | None] | None = None,
    ) -> None:
        """Fetch until `stop`, handing each batch to `handle` — an empty one at least every 0.2 s,
        so a stage's clock (assembly timeouts, pausing) keeps ticking while a rebalance holds the
        fetch, and one when `due()` (a `time.monotonic()` instant: when the stage next has work
        of its own, such as a trace to emit) comes first, so that it is done on time on a quiet
        topic rather than at the next fetch's return. The next fetch is asked for, and sent,
        before the batch is handled: aiokafka refills its buffer only when asked, and the broker
        round trip overlaps the work. Whatever a cancelled fetch brings is uncommitted, so the
        next owner reads it again."""
        stopping = asyncio.ensure_future(stop.wait())
        fetch: asyncio.Future[tuple[Batch, _Generations]] | None = None
        try:
            while not stop.is_set():
                if fetch is None:
                    fetch = asyncio.ensure_future(self._fetch_owned(timeout_ms=100))
                wait = _TICK_SECONDS
                if due is not None and (at := due()) is not None:
                    wait = min(wait, max(_MIN_WAIT_SECONDS, at - time.monotonic()))
                await asyncio.wait((fetch, stopping), timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                batch: Batch = {}
                if fetch.done():
                    batch, generations = fetch.result()
                    fetch = asyncio.ensure_future(self._fetch_owned(timeout_ms=100))
                    if batch:
                        for _ in range(_FETCHER_TURNS):
                            await asyncio.sleep(0)
                        batch = self._still_owned(batch, generations)
                elif self.stalled(time.monotonic()):
                    await _cancelled(fetch)
                    fetch = None
                    if not await self.restart(stop):
                        return
                if batch:
                    self.input.wait(True)
                    await handle(batch)
                    self.input.moved()
                    self.input.wait(False)
                else:
                    await handle(batch)
        finally:
            stopping.cancel()
            if fetch is not None:
                await _cancelled(fetch)

    async def _fetch_owned(self, timeout_ms: int) -> tuple[Batch, _Generations]:
        """A batch and, read as it arrives, the generation each of its partitions is owned in."""
        batch = await self.fetch(timeout_ms)
        return batch, [(tp, self._tracker.generation(tp)) for tp in batch]

    def _still_owned(self, batch: Batch, generations: _Generations) -> Batch:
        """Without the partitions a rebalance took or renewed since the batch arrived: a stage
        reads the generation when the batch reaches it, and must not track older messages in a
        newer one (the new generation's owner reads them again from the last commit)."""
        generation = self._tracker.generation
        if all(generation(tp) == owned_in for tp, owned_in in generations):
            return batch
        return {tp: batch[tp] for tp, owned_in in generations if generation(tp) == owned_in}

    def stalled(self, now: float) -> bool:
        """An assigned member whose fetches stopped coming back: the watchdog's trigger."""
        limit = self._cfg.fetch_watchdog_seconds
        return bool(self.owned) and limit > 0 and now - self.last_fetch > limit

    async def restart(self, stop: asyncio.Event) -> bool:
        """Replace a wedged consumer: give up its partitions as a revoke would (what is done is
        committed, open work is dropped for the next owner), leave, and join again."""
        self._metrics.restarts.labels(topic=self.spec.topic).inc()
        log.error(
            "no fetch of %s returned for %.0fs while assigned; restarting the consumer",
            self.spec.topic,
            time.monotonic() - self.last_fetch,
        )
        if self.owned:
            await self.handle_revoked(set(self.owned))
        await self.stop()
        return await self.start(stop)

    def pause(self) -> None:
        """Stop fetching every owned partition, and those a rebalance assigns until `resume`
        (aiokafka hands new ones over unpaused: a member that holds all it may must not take more)."""
        self.paused = True
        if self._consumer is not None:
            self._consumer.pause(*self._consumer.assignment())

    def resume(self) -> None:
        self.paused = False
        if self._consumer is not None:
            self._consumer.resume(*self._consumer.assignment())

    async def commit(self, only: set[TopicPartition] | None = None) -> None:
        """Commit every owned partition whose done-offset moved forward since the last commit."""
        if self._consumer is None:
            return
        offsets = {
            tp: off
            for tp, off in self._tracker.committable().items()
            if isinstance(tp, TopicPartition)
            and tp in self.owned
            and (only is None or tp in only)
            and off > self._committed.get(tp, -1)
        }
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
            self._committed.update(offsets)
            self.last_contact = time.monotonic()
        except CommitFailedError as exc:
            # The group moved on (rebalance): the new assignment re-reads from the last commit.
            log.warning("offset commit rejected by the group coordinator: %s", exc)
        except KafkaError as exc:
            log.warning("offset commit failed, will retry: %s", type(exc).__name__)

    async def handle_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.commit(only=revoked)
        await self._on_revoked(revoked)
        self._tracker.forget(revoked)
        self.owned = self.owned - revoked
        for tp in revoked:
            self._committed.pop(tp, None)
            self.replay_until.pop(tp, None)
            if tp.partition in self._lag_series:
                self._lag_series.discard(tp.partition)
                with contextlib.suppress(KeyError):
                    self._metrics.lag.remove(tp.topic, str(tp.partition))
        if revoked:
            log.info("%s: revoked partitions %s", self.spec.topic, sorted(tp.partition for tp in revoked))

    def handle_assigned(self, assigned: set[TopicPartition]) -> set[TopicPartition]:
        """Take the assignment; the partitions new to this member."""
        new = assigned - self.owned
        if self.paused and self._consumer is not None:
            self._consumer.pause(*assigned)
        self._tracker.assign(new)
        self.owned = self.owned | assigned
        log.info("%s: assigned partitions %s", self.spec.topic, sorted(tp.partition for tp in self.owned))
        self.assigned.set()
        if self._on_assigned is None or self._consumer is None:
            return new
        topic = self.spec.topic
        total = len(self._consumer.partitions_for_topic(topic) or ())
        if total:
            self._on_assigned(sum(1 for tp in self.owned if tp.topic == topic), total)
        return new

    async def rewind(self, partitions: set[TopicPartition]) -> None:
        """Seek `partitions` to their start. What the group committed (the previous owner's
        progress; the log end when it never committed: history predating the group was never
        acted on) becomes `replay_until`, and the floor of later commits, which never go back."""
        assert self._consumer is not None
        consumer = self._consumer
        ends: dict[TopicPartition, int] = await consumer.end_offsets(sorted(partitions))
        for tp in partitions:
            committed = await consumer.committed(tp)
            until = committed if committed is not None else ends.get(tp, 0)
            self.replay_until[tp] = until
            self._committed[tp] = until
        await consumer.seek_to_beginning(*partitions)
        log.info(
            "%s: replaying partitions %s up to %s",
            self.spec.topic,
            sorted(tp.partition for tp in partitions),
            {tp.partition: self.replay_until[tp] for tp in partitions},
        )

    def owns(self, tp: TopicPartition) -> bool:
        return tp in self.owned

    async def update_lag(self) -> None:
        """`ragmon_consumer_lag_messages{topic,partition}`: the log end minus the committed offset
        (the group's, when this member has committed nothing yet) of each owned partition."""
        if self._consumer is None or not self.owned:
            return
        owned = sorted(self.owned)
        try:
            async with asyncio.timeout(2.0):
                ends = await self._consumer.end_offsets(owned)
                for tp in owned:
                    if tp not in self._committed:
                        committed = await self._consumer.committed(tp)
                        if committed is not None:
                            self._committed[tp] = committed
        except (KafkaError, TimeoutError, AssertionError):
            return
        self.last_contact = time.monotonic()
        for tp in owned:
            if tp not in self.owned or tp not in ends:  # revoked meanwhile
                continue
            lag = max(0, ends[tp] - self._committed.get(tp, 0))
            self._metrics.lag.labels(topic=tp.topic, partition=str(tp.partition)).set(lag)
            self._lag_series.add(tp.partition)

    async def end_offsets(self) -> dict[TopicPartition, int]:
        """The log end of each owned partition now ({} when the broker does not answer)."""
        if self._consumer is None or not self.owned:
            return {}
        try:
            async with asyncio.timeout(2.0):
                ends: dict[TopicPartition, int] = await self._consumer.end_offsets(sorted(self.owned))
        except (KafkaError, TimeoutError):
            return {}
        return ends

    async def positions(self) -> dict[TopicPartition, int]:
        """The next offset to be fetched of each owned partition."""
        out: dict[TopicPartition, int] = {}
        if self._consumer is None:
            return out
        for tp in sorted(self.owned):
            with contextlib.suppress(KafkaError, TimeoutError, AssertionError):
                async with asyncio.timeout(1.0):
                    out[tp] = await self._consumer.position(tp)
        return out

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Final commit and leave the group; bounded, since the broker may be gone for good."""
        if self._consumer is None:
            return
        try:
            async with asyncio.timeout(grace_seconds):
                await self.commit()
                await self._consumer.stop()
        except TimeoutError:
            log.warning("Kafka silent for %.0fs at shutdown; uncommitted work will be re-read", grace_seconds)
        finally:
            self._consumer = None
            self.owned = frozenset()


async def _cancelled(fut: asyncio.Future[Any]) -> None:
    fut.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await fut
