"""Several sidecar replicas in one consumer group: they split the judge budget and the sampling
floor between them instead of each spending all of it."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from support import eventually, result_lines, running, settings_for

from monitor.app.sidecar import Sidecar
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce


def owners(group: list[Sidecar], topic: str) -> list[int]:
    """How many of the 3 partitions of the input topic (ingest), the samples topic (judge) and the
    results topic (drift) each member owns."""
    return [
        sum(src.owns(TopicPartition(src.spec.topic, p)) for p in range(3)) for s in group for src in s.sources
    ]


async def test_two_replicas_spend_the_budget_once_between_them(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    files = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    settings = [
        settings_for(
            broker.bootstrap_servers,
            topic,
            f,
            sampling={"rate": 1.0},
            judge={"budget": {"calls_per_minute": 12, "replicas": 2}},
        )
        for f in files
    ]
    async with contextlib.AsyncExitStack() as stack:
        group = [await stack.enter_async_context(running(s)) for s in settings]
        await eventually(
            lambda: sorted(owners(group, topic)) == [1, 1, 1, 2, 2, 2], within=60, what="balanced groups"
        )
        # The floor follows the partitions each member owns; the budget is split as configured.
        assert sorted(s.ingest.sampler.share for s in group if s.ingest) == pytest.approx([1 / 3, 2 / 3])
        assert [s.judge_stage.budget.share for s in group if s.judge_stage and s.judge_stage.budget] == [
            0.5,
            0.5,
        ]

        work = generate(90, seed=21, mode="per_trace")
        await produce(broker.bootstrap_servers, topic, [(m.key, m.value) for m in work.messages])
        await eventually(
            lambda: sum(len(result_lines(f)) for f in files) == 90, within=60, what="every trace written"
        )

        # Each replica shows its own share as spent; limits not configured have no series.
        def left(s: Sidecar, limit: str) -> float | None:
            return s.metrics.registry.get_sample_value("ragmon_judge_budget_remaining", {"limit": limit})

        await eventually(lambda: [left(s, "calls") for s in group] == [0.0, 0.0], what="budget gauges")
        assert [left(s, "tokens") for s in group] == [None, None]
    lines = [result_lines(f) for f in files]
    judged = [sum("judge_skipped" not in r for r in rs) for rs in lines]
    # Every record was sampled; two replicas together judged the group's limit of 12, not 24.
    assert judged == [6, 6], judged
    skipped = {r["judge_skipped"] for rs in lines for r in rs if "judge_skipped" in r}
    assert skipped == {"budget"}
