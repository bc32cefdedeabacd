"""Pinned drift baselines: `rag-monitor baseline pin` from a window of production judgements or a
golden baseline, versioned; a pinned reference watches from the first record and never moves; a
bad file is a one-line start-up error; alerts say which baseline they are measured against."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support import REPO, Webhook, eventually, running, settings_for
from test_drift_stage import drifted, line

from monitor.config import KafkaConfig
from monitor.demo.workload import produce
from monitor.drift import DriftMonitor, DriftPolicy
from monitor.drift.baseline import BaselineFileError, load_baseline
from monitor.kafka.client import ensure_topics
from monitor.metrics import Metrics
from monitor.run import Sidecar

T0 = 1_800_000_000.0


def result(qt: str, hallucinated: bool, end: float, **extra: Any) -> dict[str, Any]:
    body = json.loads(line(qt, hallucinated)[1])
    body["end"] = end
    body.update(extra)
    return body


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )


def test_pin_takes_the_window_and_says_what_it_left_out(tmp_path: Path) -> None:
    lines = [result("lookup", i % 10 == 0, T0 + i) for i in range(300)]  # 10 % in the window
    lines += [result("lookup", True, T0 - 50 - i) for i in range(50)]  # before it
    lines += [result("lookup", True, T0 + 10 + i, replay=True) for i in range(20)]  # golden replays
    lines += [result("lookup", True, T0 + i, judge={"outcome": "timeout"}) for i in range(7)]
    lines += [result("comparison", False, T0 + i) for i in range(30)]  # too few to pin
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    out = tmp_path / "baseline.json"
    since = "2027-01-15T08:00:00+00:00"  # T0
    done = cli("baseline", "pin", "--results", str(results), "--since", since, "--out", str(out))
    assert done.returncode == 0, done.stderr
    baseline = load_baseline(out)
    ref = baseline.slices["lookup"]["hallucination"]
    assert ref.records == 300 and ref.mean == pytest.approx(0.1)
    assert "comparison" not in baseline.slices
    assert baseline.version.startswith("sha256:") and baseline.source["kind"] == "results"
    for reason in (
        "outside the window (50)",
        "golden replay (20)",
        "not judged (7)",
        "not a JSON object (1)",
    ):
        assert reason in done.stdout, reason
    assert "comparison/hallucination: 30 < --min-records" in done.stdout
    # Same input, same version: the name is the content.
    again = cli("baseline", "pin", "--results", str(results), "--since", since, "--out", str(tmp_path / "b2"))
    assert load_baseline(tmp_path / "b2").version == baseline.version and again.returncode == 0
    shown = cli("baseline", "show", str(out))
    assert baseline.version in shown.stdout and "0.1000" in shown.stdout


def test_pin_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(result("lookup", False, T0)) + "\n")
    few = cli("baseline", "pin", "--results", str(results), "--out", str(tmp_path / "b.json"))
    assert few.returncode == 2 and "nothing pinned" in few.stderr and not (tmp_path / "b.json").exists()
    naive = cli("baseline", "pin", "--results", str(results), "--since", "2027-01-15T08:00", "--out", "x")
    assert naive.returncode == 2 and "time zone" in naive.stderr


def test_pin_from_a_golden_baseline_takes_faithfulness_only(tmp_path: Path) -> None:
    rows = {
        f"r{i}": {"query_type": "lookup" if i % 2 else "comparison", "faithfulness": 0.9, "refused": False}
        for i in range(40)
    }
    rows["u"] = {"query_type": "lookup", "faithfulness": None, "refused": True}
    golden = tmp_path / "golden-baseline.json"
    golden.write_text(json.dumps({"kind": "rag-monitor-golden-baseline", "rows": rows}))
    out = tmp_path / "b.json"
    done = cli(
        "baseline",
        "pin",
        "--golden-baseline",
        str(golden),
        "--min-records",
        "10",
        "--out",
        str(out),
        "--version",
        "g1",
    )
    assert done.returncode == 0, done.stderr
    baseline = load_baseline(out)
    assert baseline.version == "g1"
    assert {m for ms in baseline.slices.values() for m in ms} == {"faithfulness"}
    assert baseline.slices["lookup"]["faithfulness"].records == 20


def test_a_pinned_reference_watches_at_once_and_never_moves(tmp_path: Path) -> None:
    """Pinned at 5 %: a sustained 20 % is found within a few dozen records and the alarm holds
    for as long as it lasts (a reference taken from the slice itself would have absorbed it)."""
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(result("lookup", i % 20 == 0, T0 + i)) for i in range(1000)))
    out = tmp_path / "b.json"
    assert cli("baseline", "pin", "--results", str(results), "--out", str(out)).returncode == 0
    metrics = Metrics(CollectorRegistry())
    monitor = DriftMonitor(DriftPolicy(), metrics.drift, load_baseline(out).references())
    raised_at = None
    for i in range(3000):
        for _, _, up in monitor.observe("lookup", 1.0, [("hallucination", 1.0 if i % 5 == 0 else 0.0)]):
            if up and raised_at is None:
                raised_at = i
    assert raised_at is not None and raised_at < 300
    detector = monitor.detectors[("lookup", "hallucination")]
    assert detector.active and detector.reference.mean == pytest.approx(0.05)


async def test_a_bad_baseline_file_stops_the_start_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "b.json"
    bad.write_text(json.dumps({"kind": "rag-monitor-drift-baseline", "schema_version": 1, "version": "x"}))
    settings = settings_for("127.0.0.1:1", "t", None, alerts={"drift": {"baseline_file": str(bad)}})
    with pytest.raises(BaselineFileError, match=r"b\.json: created_at: Field required"):
        Sidecar(settings)
    config = tmp_path / "c.yaml"
    config.write_text(
        f"alerts:\n  drift:\n    baseline_file: {bad}\nkafka:\n  bootstrap_servers: 127.0.0.1:1\n"
    )
    done = cli("run", "--config", str(config), "--metrics-port", "0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: drift baseline {bad}: created_at: Field required"]


@pytest.mark.kafka
async def test_alerts_name_the_pinned_baseline(
    broker: Any, topic: str, webhook: Webhook, tmp_path: Path
) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(result("lookup", i % 20 == 0, T0 + i)) for i in range(500)))
    out = tmp_path / "b.json"
    assert (
        cli(
            "baseline", "pin", "--results", str(results), "--out", str(out), "--version", "prod-2027-01"
        ).returncode
        == 0
    )
    bs = broker.bootstrap_servers
    settings = settings_for(
        bs,
        topic,
        None,
        pipeline={"role": "drift"},
        alerts={"webhook_url": webhook.url, "drift": {"baseline_file": str(out), "min_records": 10}},
    )
    assert settings.results.topic is not None
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [settings.results.topic], partitions=1)
    await produce(bs, settings.results.topic, drifted("lookup", 80))
    async with running(settings) as sidecar:
        await eventually(lambda: bool(webhook.bodies), what="an alert")
        assert (
            sidecar.metrics.registry.get_sample_value(
                "ragmon_drift_baseline_info", {"version": "prod-2027-01"}
            )
            == 1
        )
    first = webhook.bodies[0]
    assert first["labels"]["metric"] == "hallucination"
    assert first["annotations"]["baseline_version"] == "prod-2027-01"
    assert first["annotations"]["baseline"] == "0.0500"
    assert "baseline prod-2027-01" in first["annotations"]["description"]
