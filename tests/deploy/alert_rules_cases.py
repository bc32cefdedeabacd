"""What the alert-rule tests share: the rule files and the Alertmanager config of deploy/, every
alert's intended severity, the alerting rules as loaded, and the makings of a `promtool test rules`
case (series, counters, the estimate counters of a slice, an expected firing alert).

promtool and amtool come from Debian `prometheus` and `prometheus-alertmanager` (`make debs`)."""

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest
import yaml
from support import ESTIMATE_STATS, REPO

RULES = REPO / "deploy" / "prometheus" / "rules.yml"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERTMANAGER_CONFIG = REPO / "deploy" / "alertmanager" / "alertmanager.yml"

# The intended severity of every alert: also the list of alerts the tests must cover.
SEVERITY = {
    "RagmonFaithfulnessLow": "critical",
    "RagmonHallucinationRateHigh": "critical",
    "RagmonAnswerRelevanceLow": "warning",
    "RagmonContextRelevanceLow": "warning",
    "RagmonDriftActive": "warning",
    "RagmonJudgeUndecidedShift": "warning",
    "RagmonRetrievalDrift": "warning",
    "RagmonGoldenRegression": "warning",
    "RagmonGoldenBelowTarget": "warning",
    "RagmonGoldenUnmeasured": "warning",
    "RagmonGoldenStale": "warning",
    "RagmonJudgeErrorRateHigh": "warning",
    "RagmonJudgeBudgetExhausted": "warning",
    "RagmonJudgeCircuitOpen": "warning",
    "RagmonJudgeUnreliable": "warning",
    "RagmonJudgeCalibrationStale": "warning",
    "RagmonConsumerLagGrowing": "warning",
    "RagmonNoRecords": "warning",
    "RagmonDeadLettersFailing": "warning",
    "RagmonSamplesProduceFailing": "critical",
    "RagmonResultsWriteFailing": "warning",
    "RagmonStageStalled": "critical",
    "RagmonProduceDropped": "warning",
    "RagmonUnreadableTraces": "warning",
    "RagmonSidecarAbsent": "critical",
}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: `make debs` installs it (Debian prometheus, prometheus-alertmanager)")
    return path


def alert_rules() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert all("alert" in r for r in rules), "alerts.yml holds alerting rules only"
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), "alert names are unique"
    return {r["alert"]: r for r in rules}


def labelset(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    return {"series": name + labelset(labels), "values": values}


def counter(name: str, per_minute: float, minutes: int = 90, **labels: str) -> dict[str, str]:
    """A counter from 0 growing by `per_minute` each minute: increase() over any window is exact."""
    return series(name, f"0+{per_minute!r}x{minutes}", **labels)


def estimate_counters(
    judged: list[tuple[float, float, float]], minutes: int = 90, **labels: str
) -> list[dict[str, str]]:
    """The six ragmon_estimate_*_total counters of one replica's slice judging, every minute,
    `n` records of weight w and value y for each (n, w, y)."""
    return [
        counter(f"ragmon_estimate_{stat}_total", sum(n * f(w, y) for n, w, y in judged), minutes, **labels)
        for stat, f in ESTIMATE_STATS
    ]


def fired(alertname: str, labels: dict[str, str], description: str) -> dict[str, Any]:
    """An expected alert: its labels and every annotation, rendered."""
    annotations = alert_rules()[alertname]["annotations"]
    dashboard = re.sub(
        r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], annotations["dashboard_url"]
    )
    return {
        "exp_labels": {**labels, "severity": SEVERITY[alertname]},
        "exp_annotations": {
            "summary": annotations["summary"],
            "description": description,
            "runbook_url": annotations["runbook_url"],
            "dashboard_url": dashboard,
        },
    }


def check(alertname: str, at: str, *alerts: dict[str, Any]) -> dict[str, Any]:
    return {"alertname": alertname, "eval_time": at, "exp_alerts": list(alerts)}
