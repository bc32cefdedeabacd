"""The Kafka source: a consumer-group member with manual, at-least-once commits.

Offsets are committed only up to the first message that is not done (see `offsets`), on a timer,
on rebalance and on shutdown. Starting before the broker is up, or losing it, only delays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import ConsumerRecord

from monitor.config import KafkaConfig
from monitor.kafka.client import client_kwargs
from monitor.kafka.offsets import OffsetTracker

log = logging.getLogger(__name__)

RevokeHandler = Callable[[set[TopicPartition]], Awaitable[None]]
# (partitions this member owns, partitions of the topic): the member's share of the traffic.
AssignHandler = Callable[[int, int], None]


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if revoked:
            await self._source.handle_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info("assigned partitions: %s", sorted(tp.partition for tp in assigned))
        self._source.handle_assigned(assigned)


class KafkaSource:
    def __init__(
        self,
        config: KafkaConfig,
        tracker: OffsetTracker,
        on_revoked: RevokeHandler,
        on_assigned: AssignHandler | None = None,
    ) -> None:
        self._cfg = config
        self._tracker = tracker
        self._on_revoked = on_revoked
        self._on_assigned = on_assigned
        self._consumer: AIOKafkaConsumer | None = None
        self._committed: dict[TopicPartition, int] = {}
        self.assigned = asyncio.Event()  # set once the group has given this member partitions

    async def start(self, stop: asyncio.Event) -> bool:
        """Join the group, retrying with backoff until it works or `stop` is set."""
        delay = 0.25
        fetch_limit = self._cfg.max_message_bytes + 64 * 1024
        while not stop.is_set():
            consumer = AIOKafkaConsumer(
                group_id=self._cfg.group_id,
                enable_auto_commit=False,
                auto_offset_reset=self._cfg.auto_offset_reset,
                max_poll_records=self._cfg.max_poll_records,
                max_partition_fetch_bytes=fetch_limit,
                fetch_max_bytes=max(fetch_limit, 52_428_800),
                session_timeout_ms=self._cfg.session_timeout_ms,
                heartbeat_interval_ms=max(100, self._cfg.session_timeout_ms // 3),
                metadata_max_age_ms=30_000,
                **client_kwargs(self._cfg),
            )
            try:
                await consumer.start()
                consumer.subscribe([self._cfg.topic], listener=_Rebalance(self))
                self._consumer = consumer
                log.info("consuming %s as group %s", self._cfg.topic, self._cfg.group_id)
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

    async def fetch(self, timeout_ms: int) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        """Up to max_poll_records messages. May take far longer than `timeout_ms` while the group
        (re)joins (seen: 30 s), so callers must not tie their clock to it."""
        assert self._consumer is not None
        batch: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = await self._consumer.getmany(
            timeout_ms=timeout_ms, max_records=self._cfg.max_poll_records
        )
        return batch

    async def commit(self, only: set[TopicPartition] | None = None) -> None:
        """Commit every partition whose done-offset moved since the last successful commit."""
        if self._consumer is None:
            return
        assigned = self._consumer.assignment()
        offsets = {
            tp: off
            for tp, off in self._tracker.committable().items()
            if isinstance(tp, TopicPartition)
            and tp in assigned
            and (only is None or tp in only)
            and self._committed.get(tp) != off
        }
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
            self._committed.update(offsets)
        except CommitFailedError as exc:
            # The group moved on (rebalance): the new assignment re-reads from the last commit.
            log.warning("offset commit rejected by the group coordinator: %s", exc)
        except KafkaError as exc:
            log.warning("offset commit failed, will retry: %s", type(exc).__name__)

    async def handle_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.commit(only=revoked)
        await self._on_revoked(revoked)
        self._tracker.forget(list(revoked))
        for tp in revoked:
            self._committed.pop(tp, None)

    def handle_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.set()
        if self._on_assigned is None or self._consumer is None:
            return
        topic = self._cfg.topic
        total = len(self._consumer.partitions_for_topic(topic) or ())
        if total:
            self._on_assigned(sum(1 for tp in assigned if tp.topic == topic), total)

    def owns(self, tp: TopicPartition) -> bool:
        return self._consumer is not None and tp in self._consumer.assignment()

    async def lag(self) -> dict[int, int]:
        """Messages behind the high watermark per assigned partition, as last seen in fetches."""
        if self._consumer is None:
            return {}
        out: dict[int, int] = {}
        for tp in self._consumer.assignment():
            high = self._consumer.highwater(tp)
            if high is None:
                continue
            try:
                async with asyncio.timeout(1.0):
                    pos = await self._consumer.position(tp)
            except (KafkaError, TimeoutError, AssertionError):
                continue
            out[tp.partition] = max(0, high - pos)
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
