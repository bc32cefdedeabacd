"""`rag-monitor demo` end to end: the example service degraded part-way through through its own
`POST /admin/degrade`, the drift alarm, the alert at the demo's local webhook, and its resolution
once the service is restored — what a user watching `make demo` is promised to see."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from monitor.demo.broker import free_port
from monitor.demo.scene import SceneConfig
from monitor.demo.session import DemoOptions, run_demo

ALERT = "RagmonDriftDetected"


@pytest.mark.timeout(180)
async def test_demo_degrades_the_service_alerts_and_resolves(
    tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo_root)  # the demo runs the checkout's examples/rag_service
    view = io.StringIO()
    opts = DemoOptions(
        duration=45,
        rate=40,
        metrics_port=free_port(),
        results_file=tmp_path / "results.jsonl",
        bad_every=0,
        seed=7,
        source="service",
        scene=SceneConfig(degrade_at=12, degrade_for=8),
    )
    result = await run_demo(opts, Console(file=view, width=160))

    scene = result.scene
    assert scene is not None and scene.degraded_at is not None and scene.restored_at is not None
    got = [(a.at - scene.started, a) for a in result.alerts if a.name == ALERT]
    timeline = [(round(t, 1), a.status, a.labels["query_type"], a.labels["metric"]) for t, a in got]
    print(f"degraded at {scene.degraded_at:.1f}s, restored at {scene.restored_at:.1f}s; alerts: {timeline}")

    assert not [t for t, a in got if t < scene.degraded_at], "a drift alert while the service was healthy"
    fired = {tuple(sorted(a.labels.items())) for t, a in got if a.status == "firing"}
    assert fired, "no drift alert reached the webhook after the degrade"
    resolved = [
        a
        for t, a in got
        if a.status == "resolved" and t >= scene.restored_at and tuple(sorted(a.labels.items())) in fired
    ]
    assert resolved, "no drift alert resolved after the restore"
    assert any(a.labels["metric"] == "faithfulness" for a in resolved)
    assert {a.labels["severity"] for _, a in got} == {"warning"}
    alarms = sum(
        s.value for f in result.registry.collect() for s in f.samples if s.name == "ragmon_drift_alarms_total"
    )
    assert alarms >= len(fired) >= 1

    shown = view.getvalue()
    assert "restored at" in shown and ALERT in shown and "resolved" in shown
