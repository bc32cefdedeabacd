"""`rag-monitor replay --pushgateway`: a CronJob's replay results reach Prometheus through a real
Pushgateway (Debian `prometheus-pushgateway`). The pushed group carries the same `ragmon_golden_*`
series the sidecar exports, under job/instance labels; a later push replaces the group (a query
type gone from the golden file disappears); a Pushgateway that cannot be reached or refuses the
credentials is one warning line, the report is still written and the exit code stays the gate's."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from prometheus_client.parser import text_string_to_metric_families
from support import REPO, pushgateway_process
from typer.testing import CliRunner

from monitor.cli.golden import register
from monitor.demo.broker import free_port

GOLDEN = REPO / "examples" / "golden.jsonl"
TARGET = "support:oracle_target"  # retrieves exactly the labelled chunks: recall and MRR at 1


def degraded(query: str, k: int) -> dict[str, Any]:
    """`module:function` target whose retrieval finds nothing: recall 0, under its floor (exit 1)."""
    return {"answer": "I don't know.", "chunks": []}


DEGRADED = f"{__name__}:degraded"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with pushgateway_process(tmp_path_factory.mktemp("pushgateway")) as url:
        yield url


def _golden(path: Path, types: tuple[str, ...], per_type: int = 3) -> Path:
    """The first `per_type` rows of each of `types` from the example golden set."""
    rows, seen = [], dict.fromkeys(types, 0)
    for line in GOLDEN.read_text().splitlines():
        row = json.loads(line)
        if seen.get(row["query_type"], per_type) < per_type:
            seen[row["query_type"]] += 1
            rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# The gate on retrieval only: the lexical judge's faithfulness of the oracle's answers is not 1 on
# every row, and the push must not depend on it.
GATE = "gate: {floors: {recall_at_k: 0.85}, slice_floor: {recall_at_k: 0.75}}\n"


def _replay(
    golden: Path, *args: str, target: str = TARGET, config: str = "", env: dict[str, str] | None = None
) -> Any:
    app = typer.Typer()
    register(app)
    path = golden.with_suffix(".replay.yaml")
    path.write_text(GATE + config)
    argv = ["replay", "--golden", str(golden), "--target", target, "--k", "5", "--config", str(path), *args]
    return CliRunner().invoke(app, argv, env=env)


def _samples(gateway: str, **match: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The Pushgateway's /metrics: (name, labels) -> value, for the series with the labels `match`."""
    text = httpx.get(f"{gateway}/metrics", timeout=5).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if all(s.labels.get(k) == v for k, v in match.items())
    }


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    (value,) = [v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items()]
    return value


def _query_types(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[str]:
    return {dict(ls)["query_type"] for n, ls in samples if n == "ragmon_golden_rows"}


def test_replay_pushes_the_golden_gauges_and_a_second_push_replaces_the_group(
    gateway: str, tmp_path: Path
) -> None:
    golden = _golden(tmp_path / "nightly.jsonl", ("lookup", "exact_match", "out_of_corpus"))
    report = tmp_path / "report.json"
    out = _replay(golden, "--pushgateway", gateway, "--report", str(report))
    assert out.exit_code == 0, out.output
    assert "results pushed" in out.output and "not pushed" not in out.output
    started = json.loads(report.read_text())["started_at"]

    pushed = _samples(gateway, job="rag-monitor-replay", instance="nightly.jsonl")
    name = "ragmon_golden_metric_ratio"
    assert _value(pushed, name, query_type="all", metric="recall_at_k") == 1.0
    assert _value(pushed, name, query_type="lookup", metric="mrr") == 1.0
    assert _value(pushed, name, query_type="out_of_corpus", metric="refusal_accuracy") == 1.0
    assert _value(pushed, "ragmon_golden_rows", query_type="all") == 9
    assert _value(pushed, "ragmon_golden_regression_active", metric="recall_at_k") == 0
    last_run = _value(pushed, "ragmon_golden_last_run_timestamp_seconds")
    assert last_run >= datetime.fromisoformat(started).timestamp()
    assert _query_types(pushed) == {"all", "lookup", "exact_match", "out_of_corpus"}
    assert _value(pushed, "push_time_seconds") > 0  # the Pushgateway's own, for staleness alerts

    # The golden file lost a query type: the PUT replaces the whole group, so it is gone too.
    _golden(golden, ("lookup",))
    out = _replay(golden, "--pushgateway", gateway)
    assert out.exit_code == 0, out.output
    pushed = _samples(gateway, job="rag-monitor-replay", instance="nightly.jsonl")
    assert _query_types(pushed) == {"all", "lookup"}
    assert _value(pushed, "ragmon_golden_rows", query_type="all") == 3
    assert _value(pushed, "ragmon_golden_last_run_timestamp_seconds") >= last_run

    # A regression fails the Job (exit 1) and is pushed all the same: that is what the alert reads.
    out = _replay(golden, "--pushgateway", gateway, target=DEGRADED)
    assert out.exit_code == 1, out.output
    pushed = _samples(gateway, job="rag-monitor-replay", instance="nightly.jsonl")
    assert _value(pushed, "ragmon_golden_regression_active", metric="recall_at_k") == 1
    assert _value(pushed, "ragmon_golden_metric_ratio", query_type="all", metric="recall_at_k") == 0


def test_a_change_stays_pushed_when_scheduled_runs_replace_the_results(gateway: str, tmp_path: Path) -> None:
    """The change marker is its own group per kind: the next push without a change (a scheduled
    run) replaces the results group but leaves the deploy's time for the dashboards' annotation."""
    golden = _golden(tmp_path / "changes.jsonl", ("lookup",))
    out = _replay(golden, "--pushgateway", gateway, "--change", "deploy:v1.2.3")
    assert out.exit_code == 0, out.output
    out = _replay(golden, "--pushgateway", gateway)
    assert out.exit_code == 0, out.output
    pushed = _samples(gateway, job="rag-monitor-replay", instance="changes.jsonl")
    changes = {
        dict(ls)["kind"]: v for (n, ls), v in pushed.items() if n.startswith("ragmon_golden_last_change")
    }
    assert set(changes) == {"deploy"} and changes["deploy"] > 0
    assert _value(pushed, "ragmon_golden_metric_ratio", query_type="all", metric="recall_at_k") == 1.0


def test_job_and_instance_from_the_config_file_and_flags_which_win(gateway: str, tmp_path: Path) -> None:
    golden = _golden(tmp_path / "g.jsonl", ("exact_match",))
    config = f"pushgateway: {{url: {gateway}, job: from-file, instance: staging}}\n"
    assert _replay(golden, config=config).exit_code == 0
    assert _query_types(_samples(gateway, job="from-file", instance="staging")) == {"all", "exact_match"}
    out = _replay(golden, "--push-job", "from-flag", "--push-instance", "prod/eu", config=config)
    assert out.exit_code == 0, out.output
    assert _query_types(_samples(gateway, job="from-flag", instance="prod/eu")) == {"all", "exact_match"}


def test_an_unreachable_pushgateway_is_a_warning_and_the_gate_still_decides(tmp_path: Path) -> None:
    golden = _golden(tmp_path / "g.jsonl", ("lookup", "comparison"))
    report, baseline = tmp_path / "report.json", tmp_path / "baseline.json"
    nobody = f"http://127.0.0.1:{free_port()}"
    out = _replay(golden, "--pushgateway", nobody, "--report", str(report), "--write-baseline", str(baseline))
    assert out.exit_code == 0, out.output
    (warning,) = [line for line in out.output.splitlines() if line.startswith("warning: results not pushed")]
    assert nobody in warning and "refused" in warning.lower() and "exit code 0" in warning
    assert json.loads(report.read_text())["status"] == "pass" and baseline.exists()

    # A regression keeps its exit 1: the Job fails for the regression, never for the push.
    out = _replay(golden, "--pushgateway", nobody, "--report", str(report), target=DEGRADED)
    assert out.exit_code == 1, out.output
    assert "exit code 1 is the gate's" in out.output
    assert json.loads(report.read_text())["status"] == "regression"


@pytest.mark.parametrize(
    ("reply", "reason"), [(None, "timed out"), (b"SSH-2.0-OpenSSH\r\n", "BadStatusLine")]
)
def test_a_pushgateway_that_hangs_or_is_no_http_server_is_a_warning_too(
    tmp_path: Path, reply: bytes | None, reason: str
) -> None:
    """Something listens, but never answers within pushgateway.timeout_seconds, or not in HTTP."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(0.2)  # the whole request (headers, then the body) before replying
                with contextlib.suppress(TimeoutError):
                    while conn.recv(65536):
                        pass
                if reply is None:
                    time.sleep(2)
                else:
                    conn.sendall(reply)

        threading.Thread(target=serve, daemon=True).start()
        report = tmp_path / "report.json"
        config = f"pushgateway: {{url: 'http://127.0.0.1:{port}', timeout_seconds: 0.5}}\n"
        out = _replay(_golden(tmp_path / "g.jsonl", ("lookup",)), "--report", str(report), config=config)
    assert out.exit_code == 0, out.output
    (warning,) = [line for line in out.output.splitlines() if line.startswith("warning: results not pushed")]
    assert reason in warning and report.exists()


# bcrypt of PASSWORD (cost 4), as a Pushgateway web config holds it.
USER, PASSWORD = "ragmon", "pw-0123456789"
HASHED = "$2b$04$jYLbF6RKvit6./knzEW5M.dc3pNvdvHpHdakq0t0nTF9lN7hItGxu"


def test_basic_auth_comes_from_the_environment_and_is_never_printed(tmp_path: Path) -> None:
    golden = _golden(tmp_path / "g.jsonl", ("lookup",))
    with pushgateway_process(tmp_path, (USER, PASSWORD, HASHED)) as gateway:
        out = _replay(golden, "--pushgateway", gateway, "--push-auth-env", "PG_AUTH",
                      env={"PG_AUTH": f"{USER}:{PASSWORD}"})  # fmt: skip
        assert out.exit_code == 0 and "results pushed" in out.output, out.output
        text = httpx.get(f"{gateway}/metrics", auth=(USER, PASSWORD), timeout=5).text
        assert 'ragmon_golden_rows{instance="g.jsonl",job="rag-monitor-replay",query_type="lookup"} 3' in text

        wrong = _replay(golden, "--pushgateway", gateway, "--push-auth-env", "PG_AUTH",
                        env={"PG_AUTH": f"{USER}:not-{PASSWORD}"})  # fmt: skip
        assert wrong.exit_code == 0 and "401" in wrong.output, wrong.output
        anonymous = _replay(golden, "--pushgateway", gateway)
        assert anonymous.exit_code == 0 and "401" in anonymous.output
        assert PASSWORD not in out.output + wrong.output + anonymous.output

    # Checked before the replay: exit 2, nothing written.
    report = tmp_path / "report.json"
    unset = _replay(golden, "--pushgateway", "http://127.0.0.1:9", "--push-auth-env", "PG_AUTH_UNSET",
                    "--report", str(report))  # fmt: skip
    assert unset.exit_code == 2 and "PG_AUTH_UNSET is unset or not user:password" in unset.output
    in_url = _replay(
        golden, "--pushgateway", f"http://{USER}:{PASSWORD}@127.0.0.1:9", "--report", str(report)
    )
    assert in_url.exit_code == 2 and "--push-auth-env" in in_url.output and PASSWORD not in in_url.output
    assert not report.exists()
