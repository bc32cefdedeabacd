"""`rag-monitor demo` end to end: a faulty release of the example service (a new `service.version`)
rolled out part-way through, the drift alarm, the alert at the demo's local webhook naming that
release and carrying example traces, and its resolution once the release is rolled back — what a
user watching `make demo` is promised to see."""

from __future__ import annotations

import io
import json
import statistics
from pathlib import Path

import pytest
from rich.console import Console

from monitor.demo.broker import free_port
from monitor.demo.scene import SceneConfig
from monitor.demo.session import DemoOptions, run_demo
from monitor.drift.stage import MAX_UPDATES

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
    # One alert per incident: per (slice, metric) one firing episode (its later firing
    # notifications are attribution updates, with its startsAt, at most MAX_UPDATES), resolved
    # once, and never before the rollback.
    for key in fired:
        mine = [(t, a) for t, a in got if tuple(sorted(a.labels.items())) == key]
        firing = [a for _, a in mine if a.status == "firing"]
        assert len({a.starts_at for a in firing}) == 1, f"{key} fired more than once: {timeline}"
        assert len(firing) <= 1 + MAX_UPDATES, f"{key} updated more than {MAX_UPDATES} times"
        ends = [t for t, a in mine if a.status == "resolved"]
        assert len(ends) <= 1, f"{key} resolved more than once: {timeline}"
        assert all(t >= scene.restored_at for t in ends), f"{key} resolved before the rollback: {timeline}"
    assert any(a.labels["metric"] == "faithfulness" for a in resolved)
    assert {a.labels["severity"] for _, a in got} == {"warning"}
    alarms = sum(
        s.value for f in result.registry.collect() for s in f.samples if s.name == "ragmon_drift_alarms_total"
    )
    assert alarms >= len(fired) >= 1

    # The incident is a release: the alerts name it and show its failing records.
    new = scene.config.new_release
    lines = [json.loads(t) for t in opts.results_file.read_text().splitlines()]
    degraded = [
        doc
        for doc in lines
        if doc.get("release") == new and (doc.get("unsupported_claims") or doc.get("hallucinated"))
    ]
    assert degraded, f"no degraded record of release {new} in the results"
    failing_new = {doc["trace_id"] for doc in degraded}
    firings = [a for _, a in got if a.status == "firing"]
    with_examples = [a for a in firings if a.example_trace_ids]
    for a in with_examples:
        assert set(a.example_trace_ids) <= failing_new, (
            "an example trace that is not a failing record of the release"
        )
        assert a.annotations["example_trace_ids"] == ",".join(a.example_trace_ids)
    naming = [a for a in firings if a.names_release(new)]
    assert naming, f"no alert named release {new}"
    for a in naming:
        assert a.annotations["suspect_release"] == new
        assert a.annotations["attribution"].startswith(f"release {new}: ")
    assert not [a for a in firings if a.names_release(scene.config.stable_release)]
    named_keys = {tuple(sorted(a.labels.items())) for a in naming}
    first_bad = min(doc["end"] for doc in degraded)
    delays = sorted(
        min(a.wall for a in naming if tuple(sorted(a.labels.items())) == k) - first_bad for k in named_keys
    )
    print(
        f"alerts: {len(fired)}, named {new}: {len(named_keys)}; firing notifications with >= 1 example "
        f"trace: {len(with_examples)}/{len(firings)}; first degraded {new} record -> first alert naming it: "
        f"{delays[0]:.1f}s (median over alerts {statistics.median(delays):.1f}s, max {delays[-1]:.1f}s)"
    )
    assert len(with_examples) == len(firings), "a firing alert without example traces"

    shown = view.getvalue()
    assert "rolled back to" in shown and ALERT in shown and "resolved" in shown
    assert f"release {new}: " in shown and f"release {new} deployed" in shown
    assert any(tid in shown for a in with_examples for tid in a.example_trace_ids[:2]), (
        "no example trace id in the view"
    )


@pytest.mark.timeout(120)
async def test_each_demo_run_starts_a_fresh_results_file_and_keeps_the_last(tmp_path: Path) -> None:
    """Two runs into the same file: `compare` and `review` on it must see the second run only."""
    results = tmp_path / "results.jsonl"
    earlier = '{"v": 1, "trace_id": "0123456789abcdef0123456789abcdef", "release": "from-an-earlier-run"}\n'
    results.write_text(earlier)
    view = io.StringIO()
    opts = DemoOptions(
        duration=3, rate=20, metrics_port=free_port(), results_file=results, bad_every=0, seed=3,
        source="synthetic", scene=None,
    )  # fmt: skip
    result = await run_demo(opts, Console(file=view, width=160))
    lines = results.read_text().splitlines()
    assert result.produced > 0 and lines, "the run wrote no results"
    assert "from-an-earlier-run" not in results.read_text()
    assert len(lines) <= result.produced
    previous = tmp_path / "results.previous.jsonl"
    assert previous.read_text() == earlier
    assert f"the previous run's results: {previous}" in " ".join(view.getvalue().split())
