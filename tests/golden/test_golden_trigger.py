"""Eval on change: `POST /golden/replay` on the real metrics server (401/403/400/202/409/429), the
token never in a log line or a report, the change in the report and in
`ragmon_golden_last_change_timestamp_seconds{kind}`; `rag-monitor golden trigger` against it; and
the sidecar's judge stage serving it on the member that owns the replays (real broker)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from support import eventually, running, settings_for
from typer.testing import CliRunner

from monitor.cli.golden import register
from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.golden import GoldenGauges, ReplayReport, load_golden, run_replay
from monitor.golden.change import Change
from monitor.golden.trigger import PATH, GoldenRunner, TriggerEndpoint
from monitor.judge.metered import BUDGET_EXHAUSTED
from monitor.outputs.http import MetricsServer

REPO = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-trigger-token-0123456789"


def _golden(path: Path, n: int = 12) -> Path:
    lines = (REPO / "examples" / "golden.jsonl").read_text().splitlines()
    path.write_text("\n".join(lines[i] for i in range(0, 111, 111 // n)) + "\n")
    return path


@dataclass
class Served:
    url: str
    runner: GoldenRunner
    registry: CollectorRegistry
    release: asyncio.Event
    leader: list[bool]
    reports: Path


@asynccontextmanager
async def served(tmp_path: Path, *, hold: bool = False) -> AsyncIterator[Served]:
    """A runner replaying a small golden set against a perfect callable target, its trigger on a
    real MetricsServer. With `hold`, each replay waits for `release` first (to observe 429)."""
    rows = load_golden(_golden(tmp_path / "golden.jsonl")).rows
    registry = CollectorRegistry()
    gauges = GoldenGauges(registry)
    release = asyncio.Event()
    if not hold:
        release.set()
    leader = [True]

    async def replay(change: Change | None) -> ReplayReport | None:
        await release.wait()
        return await run_replay(rows, "support:oracle_target", gauges=gauges, change=change)

    reports = tmp_path / "reports"
    runner = GoldenRunner(replay, lambda: leader[0], report_dir=reports, member="judge-0")
    runner.attach(asyncio.get_running_loop())
    endpoint = TriggerEndpoint(runner, TOKEN.encode(), samples_topic="staging-samples")
    server = MetricsServer(registry, "127.0.0.1", 0, routes={PATH: endpoint.handle})
    port = server.start()
    try:
        yield Served(f"http://127.0.0.1:{port}", runner, registry, release, leader, reports)
    finally:
        server.stop()
        await runner.aclose()


def _gauge(text: str, name: str) -> dict[str, float]:
    return {
        s.labels.get("kind", ""): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    }


def _total(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include `labels`."""
    return sum(
        s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


async def _post(url: str, body: Any = None, token: str | None = TOKEN, **headers: str) -> httpx.Response:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(f"{url}{PATH}", json=body, headers=headers)


@pytest.mark.asyncio
async def test_trigger_is_authenticated_and_records_the_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with served(tmp_path, hold=True) as s:
        body = {"kind": "deploy", "ref": "v1.2.3"}
        no_auth = await _post(s.url, body, token=None)
        assert no_auth.status_code == 401 and no_auth.headers["www-authenticate"] == "Bearer"
        basic = await _post(s.url, body, token=None, Authorization="Basic dXNlcjpwYXNz")
        assert basic.status_code == 401
        wrong = await _post(s.url, body, token=TOKEN[:-1] + "X")
        assert wrong.status_code == 403 and wrong.json() == {"error": "wrong token"}
        bad = await _post(s.url, {"kind": "release", "ref": "v1"})
        assert bad.status_code == 400 and "deploy, reindex, prompt, model, other" in bad.json()["error"]
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{s.url}{PATH}")).status_code == 405
            assert (await client.get(f"{s.url}/metrics")).status_code == 200  # still there

        accepted = await _post(s.url, body)
        assert accepted.status_code == 202, accepted.text
        assert accepted.json()["change"]["kind"] == "deploy" and accepted.json()["member"] == "judge-0"
        busy = await _post(s.url, {"kind": "model", "ref": "claude-x"})  # the first is still running
        assert busy.status_code == 429 and busy.headers["retry-after"] == "30"
        assert "deploy:v1.2.3" in busy.json()["error"]
        s.release.set()
        await eventually(lambda: s.runner.running is None and s.runner.last_report is not None, within=30)

        # The change is in the report the sidecar wrote, and in the gauge dashboards annotate.
        (path,) = s.reports.glob("replay-*-deploy.json")
        report = json.loads(path.read_text())
        assert report["change"]["kind"] == "deploy" and report["change"]["ref"] == "v1.2.3"
        assert report["metrics"]["all"]["recall_at_k"] == 1.0
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"{s.url}/metrics")).text
        at = _gauge(text, "ragmon_golden_last_change_timestamp_seconds")
        assert set(at) == {"deploy", "reindex", "prompt", "model", "other"}  # a closed set of kinds
        assert at["deploy"] == pytest.approx(s.runner.last_report.change.at)  # type: ignore[union-attr]
        assert at["model"] == 0.0  # refused while busy: not a replay, not annotated
        assert "v1.2.3" not in text  # the free-form ref is never a label

        # A member that does not own the replays says so.
        s.leader[0] = False
        other = await _post(s.url, {"kind": "reindex", "ref": "idx-7"})
        assert other.status_code == 409
        assert "does not run golden replays" in other.json()["error"]
        assert "partition 0 of staging-samples" in other.json()["error"]

    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "golden trigger from 127.0.0.1" in logged and "wrong token" in logged
    assert TOKEN not in logged and TOKEN[:-1] not in logged and TOKEN not in path.read_text()


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


@pytest.mark.asyncio
async def test_trigger_command(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    runner = CliRunner()

    def trigger(*args: str) -> Any:
        return runner.invoke(_cli(), ["golden", "trigger", *args])

    async with served(tmp_path, hold=True) as s:
        down = f"http://127.0.0.1:{free_port()}"  # nothing listens: the next address is tried
        ok = await asyncio.to_thread(
            trigger, "--sidecar", down, "--sidecar", s.url, "--change", "prompt:rev-42",
            "--token-file", str(token_file),
        )  # fmt: skip
        assert ok.exit_code == 0, ok.output
        assert "accepted by judge-0: prompt:rev-42" in ok.output
        busy = await asyncio.to_thread(
            trigger, "--sidecar", s.url, "--change", "deploy:v2", "--token-file", str(token_file)
        )
        assert busy.exit_code == 1 and "busy" in busy.output
        s.release.set()
        await eventually(lambda: s.runner.running is None, within=30)
        s.leader[0] = False
        nobody = await asyncio.to_thread(
            trigger, "--sidecar", s.url, "--change", "deploy:v2", "--token-file", str(token_file)
        )
        assert nobody.exit_code == 1 and "does not run golden replays" in nobody.output
        wrong = tmp_path / "wrong"
        wrong.write_text("not-the-token-0123456789")
        refused = await asyncio.to_thread(
            trigger, "--sidecar", s.url, "--change", "deploy:v2", "--token-file", str(wrong)
        )
        assert refused.exit_code == 2 and "403" in refused.output
        typo = await asyncio.to_thread(
            trigger, "--sidecar", s.url, "--change", "deploi:v2", "--token-file", str(token_file)
        )
        assert typo.exit_code == 2 and "unknown change kind 'deploi'" in typo.output


def test_replay_change_flag_records_the_change(tmp_path: Path) -> None:
    report, config = tmp_path / "report.json", tmp_path / "replay.yaml"
    config.write_text("gate:\n  floors: {}\n  slice_floor: {}\n")  # 12 rows: floors are noise
    out = CliRunner().invoke(
        _cli(),
        [
            "replay", "--golden", str(_golden(tmp_path / "g.jsonl")), "--target", "support:oracle_target",
            "--change", "reindex:corpus-2024-06", "--report", str(report), "--config", str(config),
        ],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert json.loads(report.read_text())["change"]["ref"] == "corpus-2024-06"
    assert "change: reindex 'corpus-2024-06'" in out.output
    bad = CliRunner().invoke(
        _cli(), ["replay", "--golden", str(tmp_path / "g.jsonl"), "--target", "x:y", "--change", "oops:1"]
    )
    assert bad.exit_code == 2 and "unknown change kind" in bad.output


@pytest.mark.asyncio
async def test_the_sidecar_serves_the_trigger_on_the_replay_member(
    broker: EmbeddedBroker, topic: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    settings = settings_for(
        broker.bootstrap_servers,
        topic,
        None,
        pipeline={"role": "judge"},
        golden={
            "file": str(_golden(tmp_path / "golden.jsonl")),
            "target": "support:oracle_target",
            "interval_seconds": 3600.0,  # only the trigger replays in this test
            "trigger_token_file": str(token_file),
            "report_dir": str(tmp_path / "reports"),
        },
    )
    async with running(settings) as sidecar:
        routes = sidecar.http_routes()
        assert set(routes) == {PATH}
        server = MetricsServer(sidecar.metrics.registry, "127.0.0.1", 0, routes=routes)
        url = f"http://127.0.0.1:{server.start()}"
        try:
            r = await _post(url, {"kind": "model", "ref": "gpt-x-2025"})
            assert r.status_code == 202, r.text  # one member: it owns partition 0
            await eventually(lambda: any((tmp_path / "reports").glob("replay-*-model.json")), within=30)
            async with httpx.AsyncClient() as client:
                text = (await client.get(f"{url}/metrics")).text
            assert _gauge(text, "ragmon_golden_last_change_timestamp_seconds")["model"] > 0
        finally:
            server.stop()
    assert TOKEN not in "\n".join(r.getMessage() for r in caplog.records)


@pytest.mark.asyncio
async def test_the_sidecars_replays_spend_the_judge_stages_budget_and_stop_with_it(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """The golden service beside the judge stage judges with the stage's judge: its calls take
    the stage's budget (5 calls a minute: 5 rows judged, the others not) and count in the judge request
    metrics, never in the verdict metrics. Once the sidecar has stopped, triggers get 503."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    settings = settings_for(
        broker.bootstrap_servers,
        topic,
        None,
        pipeline={"role": "judge"},
        judge={"budget": {"calls_per_minute": 5}},
        golden={
            "file": str(_golden(tmp_path / "golden.jsonl")),
            "target": "support:oracle_target",
            "interval_seconds": 0.5,
            "trigger_token_file": str(token_file),
            "report_dir": str(tmp_path / "reports"),
        },
    )
    async with running(settings) as sidecar:
        await eventually(lambda: any((tmp_path / "reports").glob("replay-*.json")), within=30)
    reports = [json.loads(p.read_text()) for p in sorted((tmp_path / "reports").glob("replay-*.json"))]
    first = [row["judge_error"] for row in reports[0]["rows"]]
    assert first.count(None) == 5 and first.count(BUDGET_EXHAUSTED) == len(first) - 5 > 0
    judged = sum(row["judge_error"] is None for report in reports for row in report["rows"])
    registry = sidecar.metrics.registry
    assert _total(registry, "ragmon_judge_requests_total", backend="lexical", outcome="ok") == judged
    assert _total(registry, "ragmon_judge_latency_seconds_count") == judged
    assert _total(registry, "ragmon_judged_total") == 0  # no production sample; replays are not counted
    server = MetricsServer(sidecar.metrics.registry, "127.0.0.1", 0, routes=sidecar.http_routes())
    try:
        r = await _post(f"http://127.0.0.1:{server.start()}", {"kind": "deploy", "ref": "v2"})
    finally:
        server.stop()
    assert r.status_code == 503, r.text
