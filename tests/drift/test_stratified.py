"""The stratified detector through the real drift stage: a change in what the sampler oversamples
(scenario (c) of bench/drift.py) is no alarm, a change in production's mix of the same kinds
(scenario (b)) is one, and the state is rebuilt from the results topic on restart; a baseline
pinned from lines with strata keeps them, and an older file still loads, its slices on the
weighted CUSUM with a log line that says so."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support import eventually, running, sample
from test_drift_baseline import OLD_FILE, T0, cli
from test_drift_stage import drift_settings, trace_id

from monitor.app.config import Settings
from monitor.contracts.metrics import Metrics
from monitor.demo.workload import produce
from monitor.drift import Detector, DriftMonitor, DriftPolicy
from monitor.drift.detector import StratifiedDetector
from monitor.drift.reference import load_baseline
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig

REFERENCE = 1000
# (stratum, production share, inclusion probability, hallucination rate): a rare kind that fails
# often, oversampled, and the common one.
BEFORE = [("no_chunks", 0.02, 0.25, 0.5), ("rate", 0.98, 0.05, 0.02)]
# (c) a floor samples every record of the failing kind: the sample's rate goes 0.064 -> 0.16,
# production's stays 0.0296.
SAMPLE_ONLY = [("no_chunks", 0.02, 1.0, 0.5), ("rate", 0.98, 0.05, 0.02)]
# (b) six times as many queries of the failing kind: production's rate 0.0296 -> 0.0776, and no
# kind's own rate moves.
TRAFFIC = [("no_chunks", 0.12, 0.25, 0.5), ("rate", 0.88, 0.05, 0.02)]
HALL = {"query_type": "lookup", "metric": "hallucination"}


def lines(
    rng: random.Random, kinds: list[tuple[str, float, float, float]], n: int, stratum: bool = True
) -> list[tuple[bytes, bytes]]:
    """`n` judged results lines of the lookup slice drawn from `kinds` as the sampler samples them
    (each kind in proportion to share x p, weight 1/p), with the stratum it sampled them as."""
    shares = [s * p for _, s, p, _ in kinds]
    out = []
    for _ in range(n):
        name, _, p, rate = rng.choices(kinds, shares)[0]
        hallucinated = rng.random() < rate
        body: dict[str, Any] = {
            "trace_id": trace_id(0x5A),
            "query_type": "lookup",
            "answer": "Yes.",
            "end": T0,
            "sampling_weight": 1 / p,
            "hallucinated": hallucinated,
            "judge": {"outcome": "ok"},
        }
        if stratum:
            body["stratum"] = name
        out.append((b"lookup", json.dumps(body).encode()))
    return out


def stage_settings(broker: Any, topic: str) -> Settings:
    return drift_settings(broker.bootstrap_servers, topic, drift={"reference_records": REFERENCE})


async def feed(broker: Any, settings: Settings, messages: list[tuple[bytes, bytes]]) -> None:
    bs = broker.bootstrap_servers
    assert settings.results.topic is not None
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [settings.results.topic], partitions=1)
    await produce(bs, settings.results.topic, messages)


@pytest.mark.kafka
async def test_a_change_in_what_is_sampled_raises_no_alarm(broker: Any, topic: str) -> None:
    """Scenario (c): the judged sample fails 2.5 times as often, production not at all. Without
    the stratum (an unweighted test of the sample) this pages at once."""
    rng = random.Random(7)
    settings = stage_settings(broker, topic)
    after = lines(rng, SAMPLE_ONLY, 4000)
    await feed(broker, settings, lines(rng, BEFORE, REFERENCE) + after)
    async with running(settings) as sidecar:
        assert sidecar.drift is not None
        drift = sidecar.drift
        await eventually(lambda: drift.seen == REFERENCE + len(after), what="every line read")
        detector = drift.monitor.detectors[("lookup", "hallucination")]
        assert isinstance(detector, StratifiedDetector)
        assert detector.alarms == 0 and sample(sidecar, "ragmon_drift_active", **HALL) == 0
        assert sample(sidecar, "ragmon_drift_statistic", **HALL) < sample(
            sidecar, "ragmon_drift_threshold", **HALL
        )
    # The same lines without strata, as a detector blind to them sees the sample: an alarm.
    blind = DriftMonitor(DriftPolicy(reference_records=REFERENCE), Metrics(CollectorRegistry()).drift)
    rng = random.Random(7)
    raised = False
    for _, value in lines(rng, BEFORE, REFERENCE, stratum=False) + lines(rng, SAMPLE_ONLY, 4000, False):
        doc = json.loads(value)
        changed = blind.observe(
            "lookup", doc["sampling_weight"], [("hallucination", float(doc["hallucinated"]))]
        )
        raised = raised or any(up for _, _, up in changed)
    assert raised


@pytest.mark.kafka
async def test_more_queries_of_a_failing_kind_page_and_a_restart_rebuilds(broker: Any, topic: str) -> None:
    """Scenario (b): production's rate rises only through its mix, which the composition test
    sees; a restarted member rebuilds the same state from the topic, holds the alarm, and does not
    count it again."""
    rng = random.Random(8)
    settings = stage_settings(broker, topic)
    after = lines(rng, TRAFFIC, 600)
    await feed(broker, settings, lines(rng, BEFORE, REFERENCE) + after)
    async with running(settings) as first:
        await eventually(lambda: sample(first, "ragmon_drift_active", **HALL) == 1, what="alarm")
        assert first.drift is not None
        drift = first.drift
        await eventually(lambda: drift.seen == REFERENCE + len(after), what="every line read")
        detector = drift.monitor.detectors[("lookup", "hallucination")]
        assert isinstance(detector, StratifiedDetector)
        assert detector.composition >= detector.composition_threshold  # the mix, not a kind's rate
        assert sample(first, "ragmon_drift_alarms_total", **HALL) == 1
        statistic = sample(first, "ragmon_drift_statistic", **HALL)
    async with running(settings) as second:
        await eventually(lambda: sample(second, "ragmon_drift_active", **HALL) == 1, what="rebuilt alarm")
        assert sample(second, "ragmon_drift_statistic", **HALL) == pytest.approx(statistic)
        assert not sample(second, "ragmon_drift_alarms_total", **HALL)


def test_a_pin_keeps_the_strata_and_an_older_file_keeps_the_weighted_cusum(tmp_path: Path) -> None:
    rng = random.Random(9)
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(v.decode() for _, v in lines(rng, BEFORE, 1500)))
    out = tmp_path / "b.json"
    assert cli("baseline", "pin", "--results", str(results), "--out", str(out)).returncode == 0
    pinned = load_baseline(out)
    stats = pinned.slices["lookup"]["hallucination"]
    assert pinned.schema_version == 2 and stats.strata is not None
    assert set(stats.strata) == {"no_chunks", "rate"}
    assert sum(s.records for s in stats.strata.values()) == stats.records == 1500
    assert pinned.without_strata() == []
    metrics = Metrics(CollectorRegistry())
    monitor = DriftMonitor(DriftPolicy(), metrics.drift, pinned.references())
    monitor.observe("lookup", 4.0, [("hallucination", 0.0)], stratum="no_chunks")
    assert type(monitor.detectors[("lookup", "hallucination")]) is StratifiedDetector

    old = tmp_path / "old.json"
    old.write_text(json.dumps(OLD_FILE))
    baseline = load_baseline(old)
    assert baseline.without_strata() == ["lookup/hallucination"]
    monitor = DriftMonitor(DriftPolicy(), metrics.drift, baseline.references())
    monitor.observe("lookup", 1.0, [("hallucination", 0.0)])
    assert type(monitor.detectors[("lookup", "hallucination")]) is Detector  # as before the strata


@pytest.mark.kafka
async def test_the_stage_says_what_an_older_baseline_lacks(
    broker: Any, topic: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps(OLD_FILE))
    settings = drift_settings(broker.bootstrap_servers, topic, drift={"baseline_file": str(old)})
    await feed(broker, settings, lines(random.Random(1), BEFORE, 10))
    with caplog.at_level(logging.WARNING, logger="monitor.drift.stage"):
        async with running(settings) as sidecar:
            assert sidecar.drift is not None
            drift = sidecar.drift
            await eventually(lambda: drift.seen == 10, what="lines read")
    said = [r.getMessage() for r in caplog.records if "per-stratum" in r.getMessage()]
    assert said == [
        "drift: baseline sha256:0123456789ab has no per-stratum references for lookup/hallucination "
        "(pinned before strata, or from a golden replay): those slices keep the weighted CUSUM; "
        "re-pin from results (rag-monitor baseline pin) for the stratified detector"
    ]
