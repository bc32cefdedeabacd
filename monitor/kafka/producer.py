"""One acks=all producer per process, shared by the samples, results and dead-letter topics.

Messages go out through aiokafka's batch API (`create_batch`/`send_batch`): the ingest stage
produces a sample for a few percent of its records, and `send()` per message cost ~80 µs of CPU
against ~36 µs in batches (2.8 KB samples, this machine), which showed in ingest throughput.
Partitions are chosen here: a keyed message by a hash of its key (the same key, the same
partition), an unkeyed one round-robin.
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from monitor.kafka.client import client_kwargs
from monitor.kafka.config import KafkaConfig

Message = tuple[bytes | None, bytes]  # (key, value)

# Bytes a record batch and a record add to their payload (v2 format: a 61-byte batch header; a
# record's length, attributes, deltas and header count, with margin).
_BATCH_OVERHEAD = 64
_RECORD_OVERHEAD = 24


class KafkaOutput:
    def __init__(self, config: KafkaConfig) -> None:
        # Rejected messages can be larger than max_message_bytes (that is why they were
        # rejected); the dead-letter topic's max.message.bytes must allow this much.
        self.max_request_size = 4 * config.max_message_bytes
        settings: dict[str, Any] = {
            "acks": "all",
            "linger_ms": 20,
            "max_batch_size": 1024 * 1024,
            "max_request_size": self.max_request_size,
        }
        self._producer = AIOKafkaProducer(
            **settings,
            **client_kwargs(
                config, client=AIOKafkaProducer, client_id=f"{config.client_id}-out", fixed=settings
            ),
        )
        self._partitions: dict[str, list[int]] = {}
        self._round_robin = itertools.count()

    async def start(self) -> None:
        await self._producer.start()

    async def send_many(
        self, topic: str, items: Sequence[Message], max_bytes: int | None = None
    ) -> list[int]:
        """Every message acknowledged but those refused for their size, whose indices are
        returned (never sent: no retry can send them); any other failure raises (then some may
        have landed: callers retry the lot, at least once). `max_bytes`: the topic's
        `max.message.bytes` as configured here: batches are cut below it and a message over it
        is refused before it is sent."""
        partitions = self._partitions.get(topic)
        if partitions is None:
            found = await self._producer.partitions_for(topic)
            if not found:
                raise KafkaTimeoutError(f"no partitions known for topic {topic}")
            partitions = self._partitions[topic] = sorted(found)
        limit = self.max_request_size if max_bytes is None else min(max_bytes, self.max_request_size)
        room = limit - _BATCH_OVERHEAD
        producer = self._producer
        batches: dict[int, tuple[Any, int]] = {}  # partition: (aiokafka BatchBuilder, bytes in it)
        futures: list[asyncio.Future[object]] = []
        refused: list[int] = []
        for i, (key, value) in enumerate(items):
            size = len(value) + (len(key) if key else 0) + _RECORD_OVERHEAD
            if size > room:
                refused.append(i)
                continue
            p = self._partition(key, partitions)
            batch, used = batches.get(p) or (producer.create_batch(), 0)
            if used + size > room or batch.append(key=key, value=value, timestamp=None) is None:
                futures.append(await producer.send_batch(batch, topic, partition=p))
                batch, used = producer.create_batch(), 0
                batch.append(key=key, value=value, timestamp=None)
            batches[p] = (batch, used + size)
        for p, (batch, _) in batches.items():
            futures.append(await producer.send_batch(batch, topic, partition=p))
        try:
            await asyncio.gather(*futures)
        except MessageSizeTooLargeError:
            # The broker's limit is below the one configured here: one message a request, so
            # that only those it refuses alone are given up.
            refused = sorted(set(refused) | set(await self._one_by_one(topic, items, partitions, refused)))
        return refused

    def _partition(self, key: bytes | None, partitions: list[int]) -> int:
        return partitions[(zlib.crc32(key) if key else next(self._round_robin)) % len(partitions)]

    async def _one_by_one(
        self, topic: str, items: Sequence[Message], partitions: list[int], skip: list[int]
    ) -> list[int]:
        refused = []
        skipped = set(skip)
        for i, (key, value) in enumerate(items):
            if i in skipped:
                continue
            try:
                sent = await self._producer.send(
                    topic, value, key=key, partition=self._partition(key, partitions)
                )
                await sent
            except MessageSizeTooLargeError:
                refused.append(i)
        return refused

    async def close(self) -> None:
        await self._producer.stop()
