"""Attribution follows deployments (issue 38 item 5): the drift stage's release slots are the
releases first seen most recently, not the first 22 ever seen. With 30 releases deployed one after
another and the 30th breaking answers, the alert's `suspect_release` names the 30th (before: the
23rd and every later release were `other`, and `other` was what the alert could name)."""

from __future__ import annotations

import json
import random

from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from monitor.contracts.metrics import Metrics
from monitor.contracts.slices import RecentLabel, SlicesConfig
from monitor.drift.config import AlertsConfig, DriftPolicy
from monitor.drift.stage import DriftStage
from monitor.kafka.config import KafkaConfig

T0 = 1_790_000_000.0
TP = TopicPartition("results", 0)


def line(i: int, release: str, hallucinated: bool, at: float) -> bytes:
    return json.dumps(
        {
            "v": 1,
            "trace_id": f"{i + 1:032x}",
            "query_type": "lookup",
            "release": release,
            "end": at,
            "sampling_weight": 1.0,
            "faithfulness": 0.5 if hallucinated else 1.0,
            "hallucinated": hallucinated,
            "judge": {"backend": "lexical", "outcome": "ok"},
        }
    ).encode()


def test_the_thirtieth_release_breaking_is_the_suspect_release() -> None:
    registry = CollectorRegistry()
    stage = DriftStage(
        Metrics(registry), "results", None, kafka=KafkaConfig(), group_id="g",
        alerts=AlertsConfig(drift=DriftPolicy(reference_records=200, min_records=20)),
        slices=SlicesConfig(),
    )  # fmt: skip
    stage._slices[TP] = set()
    rng = random.Random(5)
    at, i = T0, 0
    for n in range(1, 31):  # a deploy every 40 records, one release serving at a time
        for _ in range(40 if n < 30 else 200):
            at += 1.0
            i += 1
            broken = n == 30 and rng.random() < 0.5
            stage._observe(TP, line(i, f"v{n}", broken or rng.random() < 0.03, at), live=True)
    alert = stage.alerts.alerts.get(("drift", "lookup", "hallucination"))
    assert alert is not None, "no drift alarm"
    assert alert.annotations["suspect_release"] == "v30"  # before: absent (v30 was `other`)
    assert alert.attribution is not None and alert.attribution.suspects[0].value == "v30"
    # the first-seen gauge keeps the releases in the slots only (22), the newest among them
    seen = {
        s.labels["release"]
        for m in registry.collect()
        if m.name == "ragmon_release_first_seen_timestamp_seconds"
        for s in m.samples
    }
    assert seen == {f"v{n}" for n in range(9, 31)}


def test_a_late_record_of_a_retired_release_does_not_evict_a_newer_one() -> None:
    evicted: list[str] = []
    slots = RecentLabel(None, 3, on_evict=evicted.append)
    for n, t in ((1, 10.0), (2, 20.0), (3, 30.0), (4, 40.0)):
        assert slots.bound(f"v{n}", t) == (f"v{n}", False)
    assert evicted == ["v1"]
    assert slots.bound("v0", 5.0) == ("other", True)  # older than every release held
    assert slots.bound("v2", 50.0) == ("v2", False)  # held: its slot is by first-seen time
    assert slots.bound("other", 60.0) == ("other", False) and slots.bound(None, 60.0) == ("unknown", False)
    assert RecentLabel(["a"], 3).bound("b") == ("other", True)  # an allow-list is an allow-list
