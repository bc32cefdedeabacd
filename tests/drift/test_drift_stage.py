"""The drift stage through the real broker: one detector state per slice whatever the number of
drift members, rebuilt from the results topic on restart without counting an alarm twice, the
held alarm announced again, and resolved when the slice recovers."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import Webhook, eventually, read_topic, result_lines, running, sample, settings_for

from monitor.app.config import Settings
from monitor.contracts.results import ReviewLine
from monitor.demo.workload import produce
from monitor.judge.config import ReviewConfig
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig

pytestmark = pytest.mark.kafka

DRIFT = {"reference_records": 100, "min_records": 10}
TEMPLATE = (
    "https://grafana.example.com/explore?left=%7B%22queries%22:%5B%7B%22query%22:%22{trace_id}%22%7D%5D%7D"
)
_ids = itertools.count(1)


def trace_id(tag: int) -> str:
    """A fresh trace id; `tag` (one byte) says which part of a stream wrote it."""
    return f"{tag:02x}{next(_ids):030x}"


STABLE, DRIFTED = 0x5A, 0xD1  # trace id tags


def claim_text(tid: str) -> str:
    """The unsupported claim of a failing record: span text with escapes and a long tail."""
    return f"\x1b[31mThe warranty covers\nwater damage\x07 ({tid}) " + "and more " * 40


def line(
    query_type: str,
    hallucinated: bool,
    weight: float = 1.0,
    tag: int = STABLE,
    faithfulness: float | None = None,
    release: str | None = None,
    end: float = 1_790_000_000.5,
) -> tuple[bytes, bytes]:
    """A results line as the judge stage writes it (the fields drift reads, a fresh trace id, and
    for a hallucination the claim the context did not support), keyed by slice."""
    tid = trace_id(tag)
    body: dict[str, Any] = {
        "trace_id": tid,
        "query_type": query_type,
        "answer": "Yes, it is covered.",
        "end": end,
        "sampling_weight": weight,
        "claims": [{"text": claim_text(tid), "verdict": "not_in_context"}] if hallucinated else [],
        "faithfulness": faithfulness,
        "hallucinated": hallucinated,
        "answer_admits_uncertainty": not hallucinated,
        "false_refusal": False,
        "answer_relevance": None,
        "judge": {"outcome": "ok"},
    }
    if release is not None:
        body["release"] = release
    return query_type.encode(), json.dumps(body).encode()


def stream(
    query_type: str, n: int, every: int, tag: int, bad_faithfulness: float | None
) -> list[tuple[bytes, bytes]]:
    """`n` lines, one in `every` hallucinated; with `bad_faithfulness`, that one's faithfulness
    (the others' 1)."""
    out = []
    for i in range(n):
        bad = i % every == 0
        f = None if bad_faithfulness is None else bad_faithfulness if bad else 1.0
        out.append(line(query_type, bad, tag=tag, faithfulness=f))
    return out


def stable(query_type: str, n: int, bad_faithfulness: float | None = None) -> list[tuple[bytes, bytes]]:
    return stream(query_type, n, 20, STABLE, bad_faithfulness)  # 5 % hallucinated


def drifted(query_type: str, n: int, bad_faithfulness: float | None = None) -> list[tuple[bytes, bytes]]:
    return stream(query_type, n, 2, DRIFTED, bad_faithfulness)  # 50 %


def failing_ids(lines: list[tuple[bytes, bytes]]) -> set[str]:
    return {doc["trace_id"] for _, v in lines if (doc := json.loads(v))["hallucinated"]}


def drift_settings(
    bootstrap: str, topic: str, webhook: Webhook | None = None, **alerts_extra: Any
) -> Settings:
    alerts: dict[str, Any] = {"drift": DRIFT, **alerts_extra}
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
    bad = drifted("lookup", 60)
    await produce(bs, results, stable("lookup", 100) + bad)
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
    # Every transition, before and after the restart, shows records of the drift.
    bodies = [b for b in webhook.bodies if b["labels"].get("metric") == "hallucination"]
    for body in bodies:
        ids = [e["trace_id"] for e in body["examples"]]
        assert 1 <= len(ids) <= 5 and set(ids) <= failing_ids(bad), body["status"]
        assert body["annotations"]["example_trace_ids"] == ",".join(ids)
    assert bodies[-1]["examples"] == bodies[-2]["examples"]  # the resolution: the alarm's examples


async def test_a_drift_member_alone_queues_its_alerts_examples_for_review(
    broker: Any, topic: str, webhook: Webhook, tmp_path: Path
) -> None:
    """Split roles (the chart's default): no judge stage runs beside the drift stage, so the
    member queues its alerts' example records itself, for `alert` only (the judge members draw
    the uniform share and the hard cases), to the review file and topic, written by shutdown."""
    bs = broker.bootstrap_servers
    review = {"enabled": True, "file": str(tmp_path / "review.jsonl"), "uniform_share": 1.0}
    settings = drift_settings(bs, topic, webhook).model_copy(
        update={"review": ReviewConfig.model_validate(review)}
    )
    results, review_topic = settings.results.topic, settings.review.topic
    assert results is not None and review_topic
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [results], partitions=3)
    bad = drifted("lookup", 60)
    await produce(bs, results, stable("lookup", 100) + bad)
    async with running(settings) as member:
        assert member.judge_stage is None and member.review is not None
        await eventually(lambda: "firing" in statuses(webhook), what="the alert")
    examples = {e["trace_id"] for b in webhook.bodies if b["status"] == "firing" for e in b["examples"]}
    lines = result_lines(tmp_path / "review.jsonl", ReviewLine)
    assert examples and examples <= failing_ids(bad)
    assert {line["trace_id"] for line in lines} == examples
    assert all(ln["review"]["reasons"] == ["alert"] and ln["review"]["uniform"] is False for ln in lines)
    on_topic = await read_topic(bs, review_topic, count=len(examples))
    assert {m.key.decode() for m in on_topic if m.key} == examples


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


def webhook_alerts(webhook: Webhook, status: str, metric: str) -> list[dict[str, Any]]:
    return [b for b in webhook.bodies if b["status"] == status and b["labels"]["metric"] == metric]


async def test_an_alarm_names_example_traces_since_the_change_in_alertmanager_and_the_webhook(
    broker: Any, topic: str, webhook: Webhook, alertmanager: str
) -> None:
    """The alert shows up to five failing records written after the change began — not the
    reference's, nor those of the stable stretch before it, even where those were worse — each
    with its link and its unsupported claim, clipped and without control characters; the
    resolution carries them too."""
    bs = broker.bootstrap_servers
    settings = drift_settings(
        bs, topic, webhook, alertmanager_url=alertmanager, resend_seconds=0.5, trace_url_template=TEMPLATE
    )
    results = settings.results.topic
    assert results is not None
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [results], partitions=3)
    # The reference, then 40 stable records past it (each statistic rises at their two failing
    # records, of faithfulness 0, and falls back to 0 before the drift), then the drift, whose
    # failing records (faithfulness 0.3) are less bad than those two.
    before = stable("lookup", 140, bad_faithfulness=0.0)
    bad = drifted("lookup", 100, bad_faithfulness=0.3)
    await produce(bs, results, before + bad)
    metrics = ("hallucination", "faithfulness")

    async with running(settings) as sidecar:
        await eventually(
            lambda: all(webhook_alerts(webhook, "firing", m) for m in metrics), what="both alarms firing"
        )
        firing = {m: webhook_alerts(webhook, "firing", m)[0] for m in metrics}
        for metric, body in firing.items():
            examples = body["examples"]
            assert 1 <= len(examples) <= 5, metric
            for e in examples:
                tid = e["trace_id"]
                assert tid in failing_ids(bad), f"{metric}: not a failing record written after the change"
                assert e["url"] == TEMPLATE.replace("{trace_id}", tid)
                assert e["reason"].startswith(f"The warranty covers water damage ({tid}) and more")
                assert len(e["reason"]) <= 200 and not re.search(r"[\x00-\x1f\x7f]", e["reason"])
                assert e["time"] == "2026-09-21T14:13:20.500000+00:00"
            annotations = body["annotations"]
            assert annotations["example_trace_ids"] == ",".join(e["trace_id"] for e in examples)
            assert annotations["trace_url"] == examples[0]["url"]
            assert annotations["example_traces"].splitlines() == [
                f"{e['trace_id']}: {e['reason']} <{e['url']}>" for e in examples
            ]

        def in_alertmanager() -> dict[str, dict[str, Any]]:
            shown: list[dict[str, Any]] = httpx.get(f"{alertmanager}/api/v2/alerts", timeout=5).json()
            return {a["labels"]["metric"]: a for a in shown}

        await eventually(lambda: set(in_alertmanager()) >= set(metrics), within=15, what="in Alertmanager")
        for metric, alert in in_alertmanager().items():
            for name in ("example_trace_ids", "trace_url", "example_traces"):
                assert alert["annotations"][name] == firing[metric]["annotations"][name], (metric, name)

        await produce(bs, results, stable("lookup", 1200))  # recovers: the alarm clears
        hall = {"query_type": "lookup", "metric": "hallucination"}
        await eventually(
            lambda: sample(sidecar, "ragmon_drift_active", **hall) == 0, what="resolved", within=90
        )
        resolved = lambda: webhook_alerts(webhook, "resolved", "hallucination")  # noqa: E731
        await eventually(lambda: bool(resolved()), what="webhook resolved")
        assert resolved()[0]["examples"] == firing["hallucination"]["examples"]
        await eventually(lambda: "hallucination" not in in_alertmanager(), within=15, what="resolved in AM")


async def test_an_alarm_names_the_release_that_holds_the_failing_records(
    broker: Any, topic: str, webhook: Webhook, alertmanager: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A new release takes half the traffic and hallucinates: the alert (Alertmanager, webhook,
    log line) names it with its counts on both sides of the change and its first-seen time, and
    not the release that served all along; ragmon_release_first_seen_timestamp_seconds has it."""
    bs = broker.bootstrap_servers
    settings = drift_settings(bs, topic, webhook, alertmanager_url=alertmanager, resend_seconds=0.5)
    results = settings.results.topic
    assert results is not None
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [results], partitions=3)
    t0 = 1_790_000_000.0  # 2026-09-21 14:13:20 UTC
    old = [line("lookup", i % 20 == 0, release="v1.4.1", end=t0 + i) for i in range(140)]
    new = [
        line("lookup", True, tag=DRIFTED, release="v1.4.2", end=t0 + 600 + i)
        if i % 2
        else line("lookup", i % 20 == 0, release="v1.4.1", end=t0 + 600 + i)
        for i in range(100)
    ]
    await produce(bs, results, old + new)
    caplog.set_level("WARNING", logger="monitor.outputs.alerts")

    async with running(settings) as sidecar:
        await eventually(lambda: webhook_alerts(webhook, "firing", "hallucination"), what="alarm firing")
        body = webhook_alerts(webhook, "firing", "hallucination")[0]
        attribution = body["attribution"]
        suspects = attribution["suspects"]
        assert [(s["dimension"], s["value"]) for s in suspects] == [("release", "v1.4.2")]
        v2 = suspects[0]
        assert v2["first_seen"] == "2026-09-21T14:23:21+00:00"  # t0 + 601: its first record
        assert v2["judged_before"] == 0 and v2["share_before"] == 0.0
        assert v2["judged_before_total"] == attribution["judged_before_total"] > 0
        assert v2["failing_since_total"] == attribution["failing_since_total"]
        assert v2["failing_share_since"] > 0.8 and v2["failing_since"] >= 5
        assert attribution["since"] >= "2026-09-21T14:13:20"
        annotations = body["annotations"]
        assert annotations["suspect_release"] == "v1.4.2"
        assert annotations["attribution"].startswith(
            f"release v1.4.2: {100 * v2['failing_share_since']:.0f} % of failing records since 2026-09-21 "
        )
        assert "first seen 2026-09-21 14:23 UTC" in annotations["attribution"]
        assert "v1.4.1" not in annotations["attribution"]
        logged = [r.getMessage() for r in caplog.records if "alert firing" in r.getMessage()]
        assert any(annotations["attribution"] in m for m in logged), logged

        def in_alertmanager() -> dict[str, Any]:
            shown: list[dict[str, Any]] = httpx.get(f"{alertmanager}/api/v2/alerts", timeout=5).json()
            return {a["labels"]["metric"]: a["annotations"] for a in shown}

        await eventually(lambda: "hallucination" in in_alertmanager(), within=15, what="in Alertmanager")
        shown = in_alertmanager()["hallucination"]
        assert shown["suspect_release"] == "v1.4.2"
        assert shown["attribution"] == annotations["attribution"]
        first_seen = "ragmon_release_first_seen_timestamp_seconds"
        assert sample(sidecar, first_seen, release="v1.4.2") == t0 + 601
        assert sample(sidecar, first_seen, release="v1.4.1") == t0


async def test_an_alert_fired_on_few_records_is_updated_once_they_name_the_release(
    broker: Any, topic: str, webhook: Webhook
) -> None:
    """Against a flawless reference one bad record raises the alarm, too few to name anything:
    the alert says so, and is sent again (same start) once the failing records name the release."""
    bs = broker.bootstrap_servers
    settings = drift_settings(bs, topic, webhook)
    results = settings.results.topic
    assert results is not None
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [results], partitions=3)
    good = [line("lookup", False, faithfulness=1.0, release="v1") for _ in range(140)]
    bad = [line("lookup", True, tag=DRIFTED, faithfulness=0.3, release="v2") for _ in range(30)]
    await produce(bs, results, good + bad)

    async with running(settings):

        def faithfulness() -> list[dict[str, Any]]:
            return webhook_alerts(webhook, "firing", "faithfulness")

        await eventually(lambda: len(faithfulness()) >= 2, what="the alert and its update")
        first, update = faithfulness()[:2]
        assert first["attribution"]["suspects"] == [] and first["attribution"]["failing_since_total"] < 5
        assert first["annotations"]["attribution"].startswith("no release or service over-represented")
        assert "suspect_release" not in first["annotations"]
        assert [s["value"] for s in update["attribution"]["suspects"]] == ["v2"]
        assert update["annotations"]["suspect_release"] == "v2"
        assert update["startsAt"] == first["startsAt"]
        assert update["examples"]  # the examples stay
    assert len(faithfulness()) == 2  # nothing changed after: no more updates
