"""The drift stage through the real broker: one detector state per slice whatever the number of
drift members, rebuilt from the results topic on restart without counting an alarm twice, the
held alarm announced again, and resolved when the slice recovers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import Webhook, eventually, running, sample, settings_for

from monitor.config import Settings
from monitor.demo.workload import produce
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig

pytestmark = pytest.mark.kafka

DRIFT = {"reference_records": 100, "min_records": 10}


def line(query_type: str, hallucinated: bool, weight: float = 1.0) -> tuple[bytes, bytes]:
    """A results line as the judge stage writes it (the fields drift reads), keyed by slice."""
    body: dict[str, Any] = {
        "trace_id": "0" * 32,
        "query_type": query_type,
        "sampling_weight": weight,
        "faithfulness": None,
        "hallucinated": hallucinated,
        "answer_admits_uncertainty": not hallucinated,
        "false_refusal": False,
        "answer_relevance": None,
        "judge": {"outcome": "ok"},
    }
    return query_type.encode(), json.dumps(body).encode()


def stable(query_type: str, n: int) -> list[tuple[bytes, bytes]]:
    return [line(query_type, i % 20 == 0) for i in range(n)]  # 5 % hallucinated


def drifted(query_type: str, n: int) -> list[tuple[bytes, bytes]]:
    return [line(query_type, i % 2 == 0) for i in range(n)]  # 50 %


def drift_settings(bootstrap: str, topic: str, webhook: Webhook | None = None) -> Settings:
    alerts: dict[str, Any] = {"drift": DRIFT}
    if webhook is not None:
        alerts["webhook_url"] = webhook.url
    # A short session: tansu numbers the first generation 0, for which aiokafka sends no LeaveGroup,
    # so a restarted member waits for the old one's session to lapse.
    kafka = {"session_timeout_ms": 6000}
    return settings_for(bootstrap, topic, None, pipeline={"role": "drift"}, alerts=alerts, kafka=kafka)


def statuses(webhook: Webhook) -> list[str]:
    return [b["status"] for b in webhook.bodies if b["labels"].get("metric") == "hallucination"]


async def test_a_restart_rebuilds_the_state_counts_nothing_twice_and_resolves(
    broker: Any, topic: str, webhook: Webhook
) -> None:
    bs = broker.bootstrap_servers
    settings = drift_settings(bs, topic, webhook)
    results = settings.results.topic
    assert results is not None
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [results], partitions=3)
    await produce(bs, results, stable("lookup", 100) + drifted("lookup", 60))
    hall = {"query_type": "lookup", "metric": "hallucination"}

    async with running(settings) as first:
        await eventually(lambda: sample(first, "ragmon_drift_active", **hall) == 1, what="alarm")
        assert sample(first, "ragmon_drift_alarms_total", **hall) == 1
        await eventually(lambda: statuses(webhook) == ["firing"], what="webhook firing")
        statistic = sample(first, "ragmon_drift_statistic", **hall)
        assert first.drift is not None
        assert first.drift.seen == 160

    async with running(settings) as second:
        # Rebuilt from the topic: the same statistic; the alarm is held and told again, never
        # counted again (the first member counted it).
        await eventually(lambda: sample(second, "ragmon_drift_active", **hall) == 1, what="rebuilt alarm")
        assert sample(second, "ragmon_drift_statistic", **hall) == pytest.approx(statistic)
        assert not sample(second, "ragmon_drift_alarms_total", **hall)
        await eventually(lambda: statuses(webhook) == ["firing", "firing"], what="alarm announced again")
        # The slice recovers: the statistic falls to the release level and the alert resolves.
        await produce(bs, results, stable("lookup", 1200))  # from 2h to h/4 at ~0.017 a record
        await eventually(lambda: sample(second, "ragmon_drift_active", **hall) == 0, what="resolved")
        await eventually(lambda: statuses(webhook)[-1:] == ["resolved"], what="webhook resolved")
        assert second.drift is not None
        assert second.drift.seen == 1360


async def test_two_members_keep_one_state_per_slice(broker: Any, topic: str) -> None:
    """Two drift members in one group: each slice's judgements reach one detector, once; the
    other member has no detector and exports no series for it."""
    bs = broker.bootstrap_servers
    settings = drift_settings(bs, topic)
    results = settings.results.topic
    assert results is not None
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [results], partitions=3)
    counts = {"lookup": 150, "comparison": 120, "multi_hop": 110}
    async with running(settings) as a, running(settings) as b:
        assert a.drift is not None and b.drift is not None
        members = (a.drift, b.drift)
        await eventually(
            lambda: all(m.source.owned for m in members) and sum(len(m.source.owned) for m in members) == 3,
            within=60,
            what="the partitions shared by both members",
        )
        await produce(bs, results, [m for qt, n in counts.items() for m in stable(qt, n)])

        def judged(qt: str) -> list[int]:
            """Per member: the judgements its detector of (qt, hallucination) has taken in."""
            out = []
            for member in members:
                d = member.monitor.detectors.get((qt, "hallucination"))
                out.append(0 if d is None else d.reference.records + d.since_reference)
            return out

        await eventually(
            lambda: all(sorted(judged(qt)) == [0, n] for qt, n in counts.items()),
            within=60,
            what="every slice on exactly one member, each judgement once",
        )
        for qt in counts:
            labels = {"query_type": qt, "metric": "hallucination"}
            exported = [s.metrics.registry.get_sample_value("ragmon_drift_statistic", labels) for s in (a, b)]
            assert sorted(v is not None for v in exported) == [False, True], qt
