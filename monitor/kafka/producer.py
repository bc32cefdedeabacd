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

from monitor.config import KafkaConfig
from monitor.kafka.client import client_kwargs

Message = tuple[bytes | None, bytes]  # (key, value)


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

    async def send_many(self, topic: str, items: Sequence[Message]) -> None:
        """Every message acknowledged, or an exception (then some may have landed: callers
        retry the lot, at least once)."""
        partitions = self._partitions.get(topic)
        if partitions is None:
            found = await self._producer.partitions_for(topic)
            if not found:
                raise KafkaTimeoutError(f"no partitions known for topic {topic}")
            partitions = self._partitions[topic] = sorted(found)
        n = len(partitions)
        producer = self._producer
        batches: dict[int, Any] = {}  # aiokafka BatchBuilder
        futures: list[asyncio.Future[object]] = []
        for key, value in items:
            size = len(value) + (len(key) if key else 0)
            if size > self.max_request_size:
                raise MessageSizeTooLargeError(f"{size} bytes > max_request_size {self.max_request_size}")
            p = partitions[(zlib.crc32(key) if key else next(self._round_robin)) % n]
            batch = batches.get(p)
            if batch is None:
                batch = batches[p] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:
                futures.append(await producer.send_batch(batch, topic, partition=p))
                batch = batches[p] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
        for p, batch in batches.items():
            futures.append(await producer.send_batch(batch, topic, partition=p))
        await asyncio.gather(*futures)

    async def close(self) -> None:
        await self._producer.stop()
