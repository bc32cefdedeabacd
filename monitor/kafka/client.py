"""Settings every Kafka client of the sidecar shares (consumer, producer, admin), and topic
administration.

One place builds the connection keyword arguments, so security settings (TLS, SASL) apply to every
client alike and no client can be forgotten.
"""

from __future__ import annotations

import contextlib
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from monitor.config import KafkaConfig


def client_kwargs(config: KafkaConfig, *, client_id: str | None = None) -> dict[str, Any]:
    """Connection keyword arguments for any aiokafka client."""
    return {
        "bootstrap_servers": config.bootstrap_servers,
        "client_id": client_id or config.client_id,
        **config.extra,
    }


async def ensure_topics(config: KafkaConfig, topics: list[str], partitions: int = 3) -> None:
    """Create topics that do not exist (the demo and tests; production topics are provisioned)."""
    admin = AIOKafkaAdminClient(**client_kwargs(config, client_id=f"{config.client_id}-admin"))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [NewTopic(t, partitions, 1) for t in topics if t not in existing]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):  # a concurrent creator won
                await admin.create_topics(new)
    finally:
        await admin.close()
