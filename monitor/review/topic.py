"""The review queue's topic as a stream of raw lines for `rag-monitor review --topic`.

No consumer group: the reviewer's progress lives in the labels file (a record labelled there is
passed over), so every start reads the topic from its earliest offset and commits nothing; two
reviewers on one topic see the same queue."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer

from monitor.kafka.client import client_kwargs
from monitor.kafka.config import KafkaConfig

_FIXED = ("group_id", "auto_offset_reset", "enable_auto_commit")


async def topic_lines(config: KafkaConfig, topic: str) -> AsyncIterator[bytes]:
    """Every message value of `topic`, oldest first per partition, until cancelled."""
    consumer = AIOKafkaConsumer(
        topic,
        **client_kwargs(
            config, client=AIOKafkaConsumer, client_id=f"{config.client_id}-review", fixed=_FIXED
        ),
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        async for message in consumer:
            if message.value is not None:
                yield message.value
    finally:
        await consumer.stop()
