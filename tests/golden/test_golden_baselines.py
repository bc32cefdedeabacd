"""Oracle and no-context baselines against the real example RAG service (uvicorn, real BM25): the
same golden rows with the labelled chunks as the context and with none, side by side with the
normal replay; a target that ignores the context, or cannot take it, is reported as not measured."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import typer
from support import degrade
from typer.testing import CliRunner

from monitor.cli.golden import register
from monitor.demo.broker import free_port
from monitor.golden import load_golden, validate

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "examples" / "golden.jsonl"


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


NO_FLOORS = "gate:\n  floors: {}\n  slice_floor: {}\n"  # a handful of rows: the floors are noise


def _replay(golden: Path, *args: str) -> Any:
    return CliRunner().invoke(_cli(), ["replay", "--golden", str(golden), "--resamples", "300", *args])


def _config(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "replay.yaml"
    path.write_text(NO_FLOORS + extra)
    return str(path)


def _small_golden(path: Path, per_type: int = 4, strip_text: int = 0) -> Path:
    """`per_type` rows of each query type of the example set; the first `strip_text` answerable
    rows lose their chunk text."""
    rows, seen = [], {}
    for line in GOLDEN.read_text().splitlines():
        row = json.loads(line)
        if seen.get(row["query_type"], 0) < per_type:
            seen[row["query_type"]] = seen.get(row["query_type"], 0) + 1
            rows.append(row)
    for row in [r for r in rows if r["answerable"]][:strip_text]:
        del row["relevant_chunks"]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_oracle_beats_degraded_retrieval_and_no_context_refuses(service: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    degrade(service, drop_best_rate=1.0)
    try:
        out = _replay(
            GOLDEN,
            "--target",
            f"{service}/query",
            "--baselines",
            "oracle,no-context",
            "--report",
            str(report),
        )
    finally:
        degrade(service, drop_best_rate=0.0)
    rep = json.loads(report.read_text())
    assert out.exit_code == 1, out.output  # recall under its floors: the normal replay's gate
    assert {r["metric"] for r in rep["regressions"]} == {"recall_at_k"}  # baselines are never gated
    side = rep["baselines"]
    normal, oracle, none = (side["modes"][m] for m in ("normal", "oracle", "no_context"))
    assert oracle["status"] == none["status"] == "measured" and oracle["reason"] is None
    assert oracle["rows_replayed"] == none["rows_replayed"] == 111 and oracle["rows_left_out"] == []
    # Every best hit dropped: the service answers from the wrong chunk, or refuses. Given the
    # labelled chunks it answers again: the oracle gap is what retrieval costs, and it is real.
    n, o = normal["metrics"]["all"], oracle["metrics"]["all"]
    assert o["answer_match"] > n["answer_match"] + 0.2
    assert o["false_refusal_rate"] < n["false_refusal_rate"] - 0.3
    gap = side["oracle_gap"]["all"]
    assert gap["answer_match"]["gap"] == pytest.approx(o["answer_match"] - n["answer_match"])
    assert gap["answer_match"]["interval"][0] > 0 and gap["false_refusal_rate"]["interval"][0] > 0
    # Unanswerable rows get an empty oracle context: the service refuses them all.
    assert oracle["metrics"]["out_of_corpus"]["refusal_accuracy"] == 1.0
    # With no context this extractive service refuses everything: nothing answered from memory.
    nc = none["metrics"]["all"]
    assert nc["answered_rate"] == 0.0 and nc["answer_match"] == 0.0 and nc["refusal_accuracy"] == 1.0
    assert "faithfulness" not in nc  # nothing to be faithful to
    assert all(r["returned"] == [] for r in none["rows"])
    # Side by side in the terminal, per query type, with the gap.
    assert "no-context" in out.output and "oracle gap" in out.output and "multi_hop" in out.output


def test_without_degradation_the_oracle_gap_is_small(service: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    out = _replay(
        _small_golden(tmp_path / "g.jsonl"), "--target", f"{service}/query", "--baselines", "oracle",
        "--report", str(report), "--config", _config(tmp_path),
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    side = json.loads(report.read_text())["baselines"]
    assert set(side["modes"]) == {"normal", "oracle"}
    gap = side["oracle_gap"]["all"]["answer_match"]
    assert abs(gap["gap"]) <= 0.1 and gap["interval"][0] <= 0 <= gap["interval"][1]


def test_rows_without_chunk_text_are_left_out_of_the_oracle(service: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    golden = _small_golden(tmp_path / "g.jsonl", strip_text=3)
    out = _replay(
        golden, "--target", f"{service}/query", "--baselines", "oracle", "--report", str(report),
        "--config", _config(tmp_path),
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    oracle = json.loads(report.read_text())["baselines"]["modes"]["oracle"]
    assert oracle["status"] == "measured" and len(oracle["rows_left_out"]) == 3
    assert oracle["rows_replayed"] == len(load_golden(golden).rows) - 3
    assert "3 answerable rows left out" in out.output


class _Ignorer:
    """An HTTP RAG endpoint that always retrieves the same chunk, whatever context it is given."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                body = json.dumps(
                    {"answer": "Paris.", "chunks": [{"id": "c1", "content": "Paris.", "score": 1.0}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/q"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_target_that_ignores_the_context_is_reported_not_measured(tmp_path: Path) -> None:
    target = _Ignorer()
    report = tmp_path / "report.json"
    try:
        out = _replay(
            _small_golden(tmp_path / "g.jsonl"), "--target", target.url, "--baselines", "oracle,no-context",
            "--report", str(report), "--config", _config(tmp_path),
        )  # fmt: skip
    finally:
        target.close()
    assert out.exit_code == 0, out.output  # the normal replay stands; the baselines are not gated
    given = [b["context"] for b in target.bodies if "context" in b]
    assert [] in given and any(c and set(c[0]) == {"id", "content"} for c in given)  # the contract
    rep = json.loads(report.read_text())
    for mode in ("oracle", "no_context"):
        m = rep["baselines"]["modes"][mode]
        assert m["status"] == "not_measured" and m["metrics"] is None and m["rows"] == []
        assert m["reason"].startswith("target ignores context:")
    assert "oracle not measured: target ignores context" in " ".join(out.output.split())
    assert any("no-context baseline not measured" in w for w in rep["warnings"])
    assert rep["metrics"]["all"]["rows"] == len(load_golden(tmp_path / "g.jsonl").rows)


def test_a_target_that_takes_no_context_is_reported_not_measured(tmp_path: Path) -> None:
    config = _config(tmp_path, "target:\n  context:\n    field: null\n")
    target = _Ignorer()
    report = tmp_path / "report.json"
    try:
        out = _replay(
            _small_golden(tmp_path / "g.jsonl"), "--target", target.url, "--config", config,
            "--baselines", "oracle", "--report", str(report),
        )  # fmt: skip
    finally:
        target.close()
    assert out.exit_code == 0, out.output
    assert not any("context" in b for b in target.bodies)  # never asked
    oracle = json.loads(report.read_text())["baselines"]["modes"]["oracle"]
    assert oracle["status"] == "not_measured" and "takes no context" in oracle["reason"]
    # A module:function target without a `context` parameter: the same.
    out = _replay(
        _small_golden(tmp_path / "g.jsonl"), "--target", "support:oracle_target", "--baselines", "oracle",
        "--report", str(report), "--config", _config(tmp_path),
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert json.loads(report.read_text())["baselines"]["modes"]["oracle"]["status"] == "not_measured"


def test_baselines_can_come_from_the_config_file(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    out = _replay(
        _small_golden(tmp_path / "g.jsonl"), "--target", "support:oracle_target", "--report", str(report),
        "--config", _config(tmp_path, "baselines: [no_context]\n"),
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert set(json.loads(report.read_text())["baselines"]["modes"]) == {"normal", "no_context"}
    bad = _replay(
        _small_golden(tmp_path / "g.jsonl"), "--target", "support:oracle_target",
        "--config", _config(tmp_path, "baselines: [rag]\n"),
    )  # fmt: skip
    assert bad.exit_code == 2 and "baselines" in bad.output


def test_bad_baseline_names_are_bad_input(tmp_path: Path) -> None:
    out = _replay(
        _small_golden(tmp_path / "g.jsonl"), "--target", "support:oracle_target", "--baselines", "rag"
    )
    assert out.exit_code == 2 and "unknown baseline" in out.output


def test_relevant_chunks_must_name_relevant_chunks() -> None:
    row = json.loads(GOLDEN.read_text().splitlines()[0])
    assert validate([row]).rows[0].oracle_context() == [
        type(c)(id=c.id, content=c.content) for c in validate([row]).rows[0].relevant_chunks or []
    ]
    bad = {**row, "relevant_chunks": [{"id": "nope", "content": "x"}]}
    check = validate([bad])
    assert any("relevant_chunks for chunks not in relevant_chunk_ids" in e.message for e in check.errors)
