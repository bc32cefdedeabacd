"""Golden replay end to end: the real example RAG service (uvicorn on a loopback port, real BM25)
for the gate, and a small local HTTP server for what a broken target does (malformed JSON,
timeouts, 5xx, wrong shapes) and for custom request/response shapes."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import typer
from fake_llm import FakeAPI, Reply
from prometheus_client import CollectorRegistry
from support import degrade, eventually, running, settings_for
from typer.testing import CliRunner

from monitor.cli.golden import register
from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.golden import (
    GoldenGauges,
    GoldenRow,
    HttpTargetConfig,
    ReplayFailed,
    ResponseMapping,
    load_golden,
    make_target,
    run_replay,
)
from monitor.plumbing.replay_mark import body_digest, check

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "examples" / "golden.jsonl"


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _replay(*args: str) -> Any:
    return CliRunner().invoke(_cli(), ["replay", "--golden", str(GOLDEN), *args])


def test_gate_passes_then_catches_a_retrieval_regression(service: str, tmp_path: Path) -> None:
    target = f"{service}/query"
    baseline, report = tmp_path / "baseline.json", tmp_path / "report.json"
    first = _replay("--target", target, "--write-baseline", str(baseline))
    assert first.exit_code == 0, first.output
    data = json.loads(baseline.read_text())
    assert data["schema_version"] == 1 and data["kind"] == "rag-monitor-golden-baseline"
    assert data["golden"]["sha256"] == load_golden(GOLDEN).sha256 and data["config"]["k"] == 5
    assert data["metrics"]["all"]["recall_at_k"] >= 0.85 and "lookup" in data["metrics"]
    assert data["metrics"]["out_of_corpus"]["recall_at_k"] is None  # unanswerable: never recall

    again = _replay("--target", target, "--baseline", str(baseline), "--report", str(report))
    assert again.exit_code == 0, again.output
    assert "PASS" in again.output and json.loads(report.read_text())["status"] == "pass"

    degrade(service, drop_best_rate=1.0)
    try:
        bad = _replay("--target", target, "--baseline", str(baseline), "--report", str(report))
    finally:
        degrade(service, drop_best_rate=0.0)
    assert bad.exit_code == 1, bad.output
    assert "REGRESSION" in bad.output
    rep = json.loads(report.read_text())
    assert rep["status"] == "regression"
    drop = next(r for r in rep["regressions"] if r["metric"] == "recall_at_k" and r["kind"] == "drop")
    assert drop["query_type"] == "all" and drop["value"] < drop["reference"] - 0.05
    # Every row lost its best hit: far outside row noise, and the paired interval says so.
    assert drop["verdict"] == "regression" and drop["interval"][0] > 0.05
    assert "95% interval of the drop" in bad.output and "interval excludes 0 (real)" in bad.output
    before = {r["id"]: r for r in data["rows"].values()}
    after = {r["id"]: r for r in rep["rows"]}
    moved = {m["id"] for m in drop["rows"]}
    assert moved and all(after[i]["recall_at_k"] < before[i]["recall_at_k"] for i in moved)
    assert any(i in bad.output for i in moved)  # the terminal table names them too
    assert any(h["area"] == "retrieval" for h in rep["hints"])
    # The generation half is reported apart: the answers are still faithful to what was retrieved.
    assert not any(r["metric"] == "faithfulness" for r in rep["regressions"])


def test_generation_regression_points_at_the_generator(service: str, tmp_path: Path) -> None:
    target = f"{service}/query"
    baseline, report = tmp_path / "baseline.json", tmp_path / "report.json"
    assert _replay("--target", target, "--write-baseline", str(baseline)).exit_code == 0
    degrade(service, invent_rate=1.0)
    try:
        bad = _replay("--target", target, "--baseline", str(baseline), "--report", str(report))
    finally:
        degrade(service, invent_rate=0.0)
    assert bad.exit_code == 1, bad.output
    rep = json.loads(report.read_text())
    metrics = {(r["metric"], r["kind"]) for r in rep["regressions"]}
    assert ("faithfulness", "drop") in metrics and not any(m == "recall_at_k" for m, _ in metrics)
    assert any(h["area"] == "generation" for h in rep["hints"])


def test_baseline_made_with_another_k_is_bad_input(service: str, tmp_path: Path) -> None:
    baseline = tmp_path / "b.json"
    assert (
        _replay("--target", f"{service}/query", "--k", "3", "--write-baseline", str(baseline)).exit_code == 0
    )
    r = _replay("--target", f"{service}/query", "--baseline", str(baseline))
    assert r.exit_code == 2 and "k=3" in r.output
    baseline.write_text("{not json")
    r = _replay("--target", f"{service}/query", "--baseline", str(baseline))
    assert r.exit_code == 2 and "not JSON" in r.output


def test_the_config_file_sets_what_a_flag_sets_and_a_flag_wins(service: str, tmp_path: Path) -> None:
    """`k` and `concurrency` are keys of the `--config` file as of the sidecar's `golden` section
    (one model); a flag given wins; a bad value is exit 2 whichever way it came."""
    config, baseline = tmp_path / "replay.yaml", tmp_path / "b.json"
    config.write_text("k: 3\nconcurrency: 2\nintervals: {resamples: 0}\n")
    target = f"{service}/query"
    r = _replay("--target", target, "--config", str(config), "--write-baseline", str(baseline))
    assert r.exit_code == 0, r.output
    assert json.loads(baseline.read_text())["config"]["k"] == 3
    r = _replay("--target", target, "--config", str(config), "--k", "4", "--write-baseline", str(baseline))
    assert r.exit_code == 0, r.output
    assert json.loads(baseline.read_text())["config"]["k"] == 4
    config.write_text("k: 0\n")
    r = _replay("--target", target, "--config", str(config))
    assert r.exit_code == 2 and "k" in r.output
    r = _replay("--target", target, "--baselines", "oracle,nope")
    assert r.exit_code == 2 and "nope" in r.output


# --------------------------------------------------------------------------------------------
# A small local target that misbehaves on request


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.loads(raw or b"{}")
        with self.server.lock:
            self.server.seen.append((self.path, dict(self.headers), body))
            if self.path == "/echo":
                self.server.raw.append((dict(self.headers), raw))
        if self.path == "/malformed":
            self._send(200, b'{"answer": "oops", "chunks": [', "text/plain")
        elif self.path == "/slow":
            time.sleep(1.0)
            self._send(200, json.dumps({"answer": "late", "chunks": []}).encode())
        elif self.path == "/wrong-shape":
            self._send(200, json.dumps({"result": "no answer field"}).encode())
        elif self.path == "/error":
            self._send(503, b"busy")
        elif self.path == "/flaky":
            with self.server.lock:
                self.server.calls[body["query"]] = self.server.calls.get(body["query"], 0) + 1
                first = self.server.calls[body["query"]] == 1
            if first:
                self._send(503, b"try again")
            else:
                self._send(
                    200,
                    json.dumps(
                        {"answer": "It is c1.", "chunks": [{"id": "c1", "content": "It is c1."}]}
                    ).encode(),
                )
        elif self.path == "/echo":  # the default contract; every row refused
            self._send(200, json.dumps({"answer": "I don't know.", "chunks": []}).encode())
        elif self.path == "/custom":
            text = body["input"]["text"]
            docs = [{"doc_id": f"c{n}", "body": f"{text} doc {n}"} for n in range(body["input"]["top"])]
            self._send(200, json.dumps({"data": {"text": "I don't know.", "docs": docs}}).encode())
        else:
            self._send(404, b"{}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.seen: list[tuple[str, dict[str, str], Any]] = []
        self.raw: list[tuple[dict[str, str], bytes]] = []  # (headers, body bytes) of /echo
        self.calls: dict[str, int] = {}


@pytest.fixture
def fake() -> Iterator[tuple[str, _Server]]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("path", "flags", "message"),
    [
        ("/malformed", [], "malformed JSON"),
        ("/slow", ["--timeout", "0.2", "--retries", "0"], "timed out after 0.2 s"),
        ("/wrong-shape", [], "no 'answer' field"),
        ("/error", ["--retries", "1"], "HTTP 503 (2 attempts)"),
        (None, ["--retries", "0"], "connection failed"),
    ],
)
def test_a_broken_target_is_bad_input_and_writes_nothing(
    fake: tuple[str, _Server], tmp_path: Path, path: str | None, flags: list[str], message: str
) -> None:
    url = f"{fake[0]}{path}" if path else f"http://127.0.0.1:{free_port()}/query"
    baseline, report = tmp_path / "baseline.json", tmp_path / "report.json"
    t0 = time.monotonic()
    r = _replay("--target", url, "--write-baseline", str(baseline), "--report", str(report), *flags)
    assert r.exit_code == 2, r.output
    assert message in r.output and "row '" in r.output  # names the row it failed on
    assert not baseline.exists() and not report.exists() and not list(tmp_path.iterdir())
    assert time.monotonic() - t0 < 10  # fails fast, does not wait for every row


def _rows(n: int = 4) -> list[GoldenRow]:
    return [
        GoldenRow(id=f"r{i}", query=f"q{i}", query_type="lookup", relevant_chunk_ids=["c1"], answerable=True)
        for i in range(n)
    ] + [GoldenRow(id="u", query="unknowable", query_type="out_of_corpus", answerable=False)]


async def test_custom_shapes_auth_from_env_and_gauges(
    fake: tuple[str, _Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, server = fake
    monkeypatch.setenv("RAG_TOKEN", "s3cret")
    monkeypatch.setenv("RAGMON_REPLAY_SECRET", "replay-secret-0123456789")
    cfg = HttpTargetConfig(
        url=f"{base}/custom",
        request_template={"input": {"text": "Q: {query}", "top": "{k}"}, "kind": "{query_type}"},
        response=ResponseMapping(
            answer="data.text", chunks="data.docs", chunk_id="doc_id", chunk_content="body", chunk_score=None
        ),
        auth_env="RAG_TOKEN",
        auth_scheme="Bearer",
    )
    registry = CollectorRegistry()
    target = make_target(cfg)
    try:
        report = await run_replay(_rows(), target, k=3, gauges=GoldenGauges(registry))
    finally:
        await target.aclose()
    # Rows are replayed concurrently: requests arrive in any order.
    seen = {body["input"]["text"]: (headers, body) for _, headers, body in server.seen}
    _, body = seen["Q: q0"]
    assert body["input"]["top"] == 3 and body["kind"] == "lookup"
    assert seen["Q: unknowable"][1]["kind"] == "out_of_corpus"
    assert all(h["Authorization"] == "Bearer s3cret" for h, _ in seen.values())
    for h, b in seen.values():  # each request signed with the secret: the service will verify it
        assert (
            check(b"replay-secret-0123456789", h["X-RAG-Replay"], "POST", body_digest(json.dumps(b).encode()))
            is None
        )
    m = report.metrics["all"]
    assert m["recall_at_k"] == 1.0 and m["mrr"] == 0.5 and m["refusal_accuracy"] == 1.0
    assert m["false_refusal_rate"] == 1.0  # "I don't know." on answerable rows
    g = registry.get_sample_value
    assert g("ragmon_golden_metric_ratio", {"query_type": "all", "metric": "mrr"}) == 0.5
    assert g(
        "ragmon_golden_metric_ratio", {"query_type": "lookup", "metric": "precision_at_k"}
    ) == pytest.approx(1 / 3)
    assert (
        g("ragmon_golden_metric_ratio", {"query_type": "out_of_corpus", "metric": "refusal_accuracy"}) == 1.0
    )
    assert g("ragmon_golden_regression_active", {"metric": "recall_at_k"}) == 0.0
    assert (g("ragmon_golden_last_run_timestamp_seconds") or 0) > time.time() - 60

    monkeypatch.delenv("RAG_TOKEN")
    with pytest.raises(ValueError, match="RAG_TOKEN"):
        make_target(cfg)


async def test_retries_then_succeeds_and_failure_leaves_gauges(fake: tuple[str, _Server]) -> None:
    base, _ = fake
    registry = CollectorRegistry()
    gauges = GoldenGauges(registry)
    report = await run_replay(_rows(), f"{base}/flaky", k=2, gauges=gauges)
    assert report.metrics["all"]["hit_at_k"] == 1.0
    stamp = registry.get_sample_value("ragmon_golden_last_run_timestamp_seconds")
    with pytest.raises(ReplayFailed, match="malformed JSON"):
        await run_replay(_rows(), f"{base}/malformed", gauges=gauges)
    assert registry.get_sample_value("ragmon_golden_last_run_timestamp_seconds") == stamp  # stale = failing


def fake_rag(query: str, k: int) -> dict[str, Any]:
    """A `module:function` target for the test below."""
    answer = f"The answer to {query} is c1."
    return {"answer": answer, "chunks": [{"id": "c2"}, {"id": "c1", "content": answer}][:k]}


async def test_callable_target() -> None:
    report = await run_replay(_rows(), f"{__name__}:fake_rag", k=2)
    assert report.metrics["all"]["mrr"] == 0.5 and report.metrics["lookup"]["faithfulness"] == 1.0
    with pytest.raises(ValueError, match="cannot import"):
        make_target("no_such_module_xyz:fn")


# -- a gate that could not measure does not pass --------------------------------------------------


def _unmeasured_golden(tmp_path: Path) -> Path:
    """Four answerable rows (the fake judge finds every answer faithful)."""
    lines = GOLDEN.read_text().splitlines()
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(line + "\n" for line in lines[:4]))
    return golden


def _judged(api: FakeAPI, tmp_path: Path, *args: str, gate: dict[str, Any] | None = None) -> Any:
    """`rag-monitor replay` of the oracle target, judged by the real anthropic SDK at `api`."""
    config = tmp_path / "replay.json"
    options = {"base_url": api.url, "api_key": api.key, "max_retries": 0, "timeout_seconds": 5}
    config.write_text(json.dumps({"judge_options": options, "gate": gate or {}}))
    command = ["replay", "--golden", str(_unmeasured_golden(tmp_path)), "--target", "support:oracle_target"]
    return CliRunner().invoke(
        _cli(), [*command, "--judge", "anthropic", "--yes", "--config", str(config), *args]
    )


_BROKEN = itertools.count()


def _broken(path: str, body: dict[str, Any]) -> Reply:
    """A judge API gone wrong: every other answer a 500, the rest 200s that are not JSON."""
    if next(_BROKEN) % 2:
        return Reply(200, "{not json at all")
    return Reply(500, "<html>upstream exploded</html>")


def test_a_judge_failing_on_every_row_is_not_a_pass(api: FakeAPI, tmp_path: Path) -> None:
    api.default = _broken
    report, baseline = tmp_path / "report.json", tmp_path / "baseline.json"
    r = _judged(api, tmp_path, "--report", str(report), "--write-baseline", str(baseline))
    assert r.exit_code == 2, r.output
    assert "PASS" not in r.output
    assert "COULD NOT MEASURE" in r.output and "faithfulness: the judge failed on 4 of 4 rows" in r.output
    rep = json.loads(report.read_text())
    assert rep["status"] == "unmeasured"
    unmeasured = {u["metric"]: u for u in rep["unmeasured"]}
    assert unmeasured["faithfulness"]["failed_rows"] == unmeasured["faithfulness"]["rows"] == 4
    assert set(unmeasured) == {"faithfulness"}  # the default gate's only generation metric
    assert rep["metrics"]["all"]["faithfulness"] is None
    assert not baseline.exists(), "a baseline without faithfulness would hide every later drop"
    assert len(api.requests) == 4


def test_a_judge_failing_on_no_row_still_passes(api: FakeAPI, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    r = _judged(api, tmp_path, "--report", str(report))
    assert r.exit_code == 0, r.output
    assert "PASS" in r.output and "COULD NOT MEASURE" not in r.output
    rep = json.loads(report.read_text())
    assert rep["status"] == "pass" and rep["unmeasured"] == []
    assert rep["metrics"]["all"]["faithfulness"] is not None


def test_a_share_of_judge_failures_can_be_allowed(api: FakeAPI, tmp_path: Path) -> None:
    api.script(Reply(500, "garbage"))  # one row's judgement fails, the others' succeed
    strict = _judged(api, tmp_path)
    assert strict.exit_code == 2, strict.output  # default: any failed row of a gated metric
    api.script(Reply(500, "garbage"))
    lenient = _judged(api, tmp_path, gate={"max_judge_failure_share": 0.5})
    assert lenient.exit_code == 0, lenient.output
    assert "1 row not judged" in lenient.output


async def test_the_scheduled_replay_exports_what_it_could_not_measure(api: FakeAPI, tmp_path: Path) -> None:
    from monitor.judge import create_judge

    api.default = _broken
    registry = CollectorRegistry()
    gauges = GoldenGauges(registry)
    judge = create_judge("anthropic", {"base_url": api.url, "api_key": api.key, "max_retries": 0})
    try:
        rows = load_golden(_unmeasured_golden(tmp_path)).rows
        report = await run_replay(rows, "support:oracle_target", judge=judge, gauges=gauges)
    finally:
        await judge.aclose()
    assert report.exit_code == 2
    assert registry.get_sample_value("ragmon_golden_unmeasured", {"metric": "faithfulness"}) == 1
    assert registry.get_sample_value("ragmon_golden_unmeasured", {"metric": "recall_at_k"}) == 0
    assert registry.get_sample_value("ragmon_golden_regression_active", {"metric": "faithfulness"}) == 0


# --------------------------------------------------------------------------------------------
# The replay mark: both replay clients sign with the configured secret


REPLAY_SECRET = b"golden-replay-secret-0123"


def _marked(server: _Server, secret: bytes) -> list[str | None]:
    """Per /echo request: None when its mark verifies with `secret` for its exact body, else why not."""
    return [check(secret, h.get("X-RAG-Replay", ""), "POST", body_digest(raw)) for h, raw in server.raw]


def test_replay_command_signs_with_the_configured_secret(
    fake: tuple[str, _Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, server = fake
    monkeypatch.delenv("RAGMON_REPLAY_SECRET", raising=False)
    (tmp_path / "secret").write_bytes(REPLAY_SECRET + b"\n")
    config = tmp_path / "replay.yaml"
    config.write_text(f"target:\n  replay_secret_file: {tmp_path / 'secret'}\n")
    r = _replay("--target", f"{base}/echo", "--config", str(config))
    assert r.exit_code in (0, 1), r.output
    assert server.raw and _marked(server, REPLAY_SECRET) == [None] * len(server.raw)
    assert REPLAY_SECRET.decode() not in r.output
    # From the environment, the default: $RAGMON_REPLAY_SECRET.
    server.raw.clear()
    monkeypatch.setenv("RAGMON_REPLAY_SECRET", "env-replay-secret-0123456789")
    r = _replay("--target", f"{base}/echo")
    assert server.raw and _marked(server, b"env-replay-secret-0123456789") == [None] * len(server.raw)
    # No secret anywhere: unmarked (the service counts them as production), never a bare "1".
    server.raw.clear()
    monkeypatch.delenv("RAGMON_REPLAY_SECRET")
    r = _replay("--target", f"{base}/echo")
    assert server.raw and all("X-RAG-Replay" not in h for h, _ in server.raw)


@pytest.mark.asyncio
async def test_the_sidecars_scheduled_replay_signs_with_its_secret(
    fake: tuple[str, _Server], broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    base, server = fake
    (tmp_path / "secret").write_bytes(REPLAY_SECRET)
    settings = settings_for(
        broker.bootstrap_servers,
        topic,
        None,
        pipeline={"role": "judge"},
        golden={
            "file": str(GOLDEN),
            "target": f"{base}/echo",
            "interval_seconds": 0.5,
            "replay_secret_file": str(tmp_path / "secret"),
        },
    )
    async with running(settings):
        await eventually(lambda: len(server.raw) >= 3, what="the scheduled replay's requests")
    assert _marked(server, REPLAY_SECRET)[:3] == [None] * 3
