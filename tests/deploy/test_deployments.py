"""Two deployments on one Kafka cluster (staging and production, or two services' monitors) never
meet: each one's internal topics and groups derive from its own `kafka.group_id`, so its judge
stage judges only what its own ingest stage sampled, and its results hold only its own traces."""

from __future__ import annotations

import asyncio
import json
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

from support import eventually, read_topic, result_ids, running, settings_for

from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig


async def test_two_deployments_on_one_cluster_judge_only_their_own_traces(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    # Each deployment its own input topic and group id (as settings_for gives), nothing else set:
    # the samples and results topics and the judge and drift groups are left to their defaults.
    topics = [f"spans-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), topics, partitions=3)
    settings = [settings_for(bs, t, tmp_path / f"{t}.jsonl") for t in topics]
    work = [generate(40, seed=241), generate(40, seed=242)]
    expected = [{t.trace_id for t in w.traces} for w in work]
    assert expected[0] and expected[1] and not expected[0] & expected[1]
    files = [s.results.file for s in settings]
    assert files[0] is not None and files[1] is not None

    async with AsyncExitStack() as stack:
        # Started together: joining the groups is most of the wait.
        await asyncio.gather(*(stack.enter_async_context(running(s)) for s in settings))
        for t, w in zip(topics, work, strict=True):
            await produce(bs, t, w.pairs())
        # Every trace judged by one deployment or the other (sampling rate 1) ...
        await eventually(
            lambda: result_ids(files[0]) | result_ids(files[1]) >= expected[0] | expected[1],
            what="every trace judged",
        )
    # ... each by the deployment whose ingest stage read it, and by it alone.
    assert result_ids(files[0]) == expected[0]
    assert result_ids(files[1]) == expected[1]
    for s, ids in zip(settings, expected, strict=True):
        assert s.results.topic is not None
        lines = await read_topic(bs, s.results.topic, within=10)
        assert {json.loads(m.value)["trace_id"] for m in lines} == ids
