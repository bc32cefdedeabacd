"""A real Alertmanager running deploy/alertmanager/alertmanager.yml as it is: it inhibits the quality
alerts, and only them, while a judge or consumer alert fires, and the sidecar's own drift alert
replaces the rule's of the same slice."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from alert_rules_cases import ALERTMANAGER_CONFIG, SEVERITY
from support import alertmanager_process

QUALITY = {
    "RagmonFaithfulnessLow",
    "RagmonHallucinationRateHigh",
    "RagmonDriftActive",
    "RagmonAnswerRelevanceLow",
    "RagmonContextRelevanceLow",
    "RagmonJudgeUndecidedShift",
}
PIPELINE_TROUBLE = {"RagmonJudgeErrorRateHigh", "RagmonJudgeCircuitOpen", "RagmonConsumerLagGrowing"}


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """A real Alertmanager running deploy/alertmanager/alertmanager.yml as it is."""
    with alertmanager_process(ALERTMANAGER_CONFIG, tmp_path / "data") as url:
        yield url


def post(url: str, alerts: list[dict[str, str]], *, resolved: bool = False) -> None:
    now = datetime.now(UTC)
    ends = now - timedelta(seconds=1) if resolved else now + timedelta(hours=1)
    body = [
        {
            "labels": labels,
            "annotations": {"summary": labels["alertname"]},
            "startsAt": (now - timedelta(minutes=5)).isoformat(),
            "endsAt": ends.isoformat(),
        }
        for labels in alerts
    ]
    httpx.post(f"{url}/api/v2/alerts", json=body, timeout=5).raise_for_status()


def states(url: str) -> dict[tuple[str, str], str]:
    """(alertname, query_type) -> state; "suppressed" can only be inhibition here (no silences)."""
    got = httpx.get(f"{url}/api/v2/alerts", timeout=5).json()
    return {(a["labels"]["alertname"], a["labels"].get("query_type", "")): a["status"]["state"] for a in got}


def wait_for(check: Callable[[], bool], what: str, within: float = 15) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


# The drift alarm the sidecar sends itself (monitor/outputs/alerts.py), with the rule's labels.
SIDECAR_DRIFT = "RagmonDriftDetected"


def alert_labels(name: str, query_type: str = "lookup") -> dict[str, str]:
    """Labels as the rules (or the sidecar) give them."""
    labels = {"alertname": name, "severity": SEVERITY.get(name, "warning"), "job": "rag-monitor"}
    if name in QUALITY or name == SIDECAR_DRIFT:
        labels.update(query_type=query_type, metric="faithfulness", service="shop")
    elif name == "RagmonGoldenBelowTarget":
        labels.update(query_type="all", metric="faithfulness")
    elif name == "RagmonGoldenRegression":
        labels["metric"] = "faithfulness"
    elif name == "RagmonJudgeErrorRateHigh":
        labels.update(backend="anthropic", model="judge-a")
    elif name == "RagmonConsumerLagGrowing":
        labels["topic"] = "rag-monitor-samples"
    return labels


def test_alertmanager_inhibits_quality_alerts_while_the_pipeline_is_in_trouble(alertmanager: str) -> None:
    targets = [n for n in SEVERITY if n not in PIPELINE_TROUBLE] + [SIDECAR_DRIFT]
    alerts = [alert_labels(n, query_type=t) for n in targets for t in ("lookup", "comparison")]
    for a in alerts:  # not the rule's drift alarm: that one the sidecar's replaces (test below)
        if a["alertname"] == SIDECAR_DRIFT:
            a["metric"] = "hallucination"
    post(alertmanager, alerts)

    def inhibited() -> set[str]:
        return {n for (n, _), state in states(alertmanager).items() if state == "suppressed"}

    wait_for(lambda: {n for n, _ in states(alertmanager)} == set(targets), "alerts received")
    assert set(states(alertmanager).values()) == {"active"}, "nothing inhibited without a source"
    for source in sorted(PIPELINE_TROUBLE):
        post(alertmanager, [alert_labels(source)])
        quality = QUALITY | {SIDECAR_DRIFT}
        wait_for(lambda: inhibited() == quality, f"{source} inhibits the quality alerts")  # noqa: B023
        assert all(  # of every query type: the sources carry none
            state == "suppressed" for (n, _), state in states(alertmanager).items() if n in quality
        )
        time.sleep(0.3)
        assert inhibited() == quality, f"{source} inhibits exactly {sorted(quality)}"
        post(alertmanager, [alert_labels(source)], resolved=True)
        wait_for(lambda: not inhibited(), f"{source} resolved, nothing inhibited")


def test_the_sidecars_drift_alert_replaces_the_rules_one(alertmanager: str) -> None:
    post(alertmanager, [alert_labels("RagmonDriftActive", t) for t in ("lookup", "comparison")])
    wait_for(lambda: len(states(alertmanager)) == 2, "alerts received")
    post(alertmanager, [alert_labels(SIDECAR_DRIFT, "lookup")])
    wait_for(
        lambda: states(alertmanager).get(("RagmonDriftActive", "lookup")) == "suppressed",
        "the sidecar's alert inhibits the rule's of the same slice",
    )
    assert states(alertmanager) == {
        ("RagmonDriftActive", "lookup"): "suppressed",
        ("RagmonDriftActive", "comparison"): "active",
        (SIDECAR_DRIFT, "lookup"): "active",
    }
