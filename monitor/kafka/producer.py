"""One acks=all producer per process, shared by the samples, results and dead-letter topics."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer

from monitor.config import KafkaConfig
from monitor.kafka.client import client_kwargs


class KafkaOutput:
    """One producer for the results topic and the dead-letter topic."""

    def __init__(self, config: KafkaConfig) -> None:
        self._producer = AIOKafkaProducer(
            acks="all",
            linger_ms=20,
            # Rejected messages can be larger than max_message_bytes (that is why they were
            # rejected); the dead-letter topic's max.message.bytes must allow this much.
            max_request_size=4 * config.max_message_bytes,
            **client_kwargs(config, client_id=f"{config.client_id}-out"),
        )

    async def start(self) -> None:
        await self._producer.start()

    async def send_many(self, topic: str, items: list[tuple[bytes | None, bytes]]) -> None:
        futures = [await self._producer.send(topic, value=v, key=k) for k, v in items]
        await asyncio.gather(*futures)

    async def close(self) -> None:
        await self._producer.stop()
