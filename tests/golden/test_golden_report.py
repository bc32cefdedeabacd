"""The complete golden report: answer relevance, context relevance and correctness against the
reference answer per query type with their intervals, the diagnosis hints the evaluation practice
names (the oracle gap; faithful but irrelevant answers), and difficulty tags reported per tag —
against the real example RAG service (uvicorn, real BM25) and, for an LLM judge's chunk ratings,
the real anthropic SDK talking to the local fake API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from fake_llm import FakeAPI, Reply
from prometheus_client import CollectorRegistry
from support import degrade
from typer.testing import CliRunner

from monitor.cli.golden import register
from monitor.golden import GoldenGauges, load_golden, run_replay, validate
from monitor.golden.baselines import match_reference

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "examples" / "golden.jsonl"
NEW = ("answer_relevance", "context_relevance", "correctness")


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _replay(golden: Path, *args: str) -> Any:
    return CliRunner().invoke(_cli(), ["replay", "--golden", str(golden), "--resamples", "500", *args])


def _flat(text: str) -> str:
    return " ".join(text.split())


def _tagged(path: Path, per_type: int = 4) -> Path:
    """`per_type` rows of each query type of the example set, tagged easy / hard / adversarial in
    turn, and one row in five left untagged."""
    rows, seen = [], {}
    for line in GOLDEN.read_text().splitlines():
        row = json.loads(line)
        if seen.get(row["query_type"], 0) < per_type:
            seen[row["query_type"]] = seen.get(row["query_type"], 0) + 1
            rows.append(row)
    for n, row in enumerate(rows):
        if n % 5:
            row["difficulty"] = ("easy", "hard", "adversarial")[n % 3]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_relevance_and_correctness_per_query_type(service: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    out = _replay(GOLDEN, "--target", f"{service}/query", "--baselines", "oracle", "--report", str(report))
    assert out.exit_code == 0, out.output  # reported, not gated: the default gate passes as before
    rep = json.loads(report.read_text())
    assert rep["status"] == "pass" and rep["regressions"] == []
    assert set(rep["config"]["gate"]["floors"]) == {"recall_at_k", "faithfulness"}
    # Correctness is the lexical answer match, and the report says so.
    assert rep["correctness"]["method"] == "answer_match" and rep["correctness"]["lexical_stand_in"]
    assert "lexical stand-in" in _flat(out.output) and "correctness (lexical)" in out.output
    golden = {r.id: r for r in load_golden(GOLDEN).rows}
    rows = rep["rows"]
    for r in rows:
        g = golden[r["id"]]
        want = match_reference(r["answer"], g.reference_answer) if g.answerable else None
        assert r["correctness"] == want, r["id"]
        if not g.answerable:  # a refusal is what refusal accuracy scores: no relevance, no correctness
            assert r["answer_relevance"] is None and r["context_relevance"] is None
    assert {r["correctness"] for r in rows if golden[r["id"]].answerable} == {0.0, 1.0}
    # The same answer match as the baselines' normal replay (which the oracle gap is computed on).
    normal = rep["baselines"]["modes"]["normal"]["metrics"]
    for group, stats in rep["metrics"].items():
        assert stats["correctness"] == normal[group]["answer_match"], group
    # Per query type, each with its interval; the lexical judge rates no chunks: no context relevance.
    for group, stats in rep["metrics"].items():
        ivs = rep["intervals"]["metrics"][group]
        assert stats["context_relevance"] is None and ivs["context_relevance"] is None
        if group == "out_of_corpus":
            assert stats["answer_relevance"] is None and stats["correctness"] is None
            continue
        for m in ("answer_relevance", "correctness"):
            assert 0.0 <= stats[m] <= 1.0 and ivs[m][0] <= stats[m] <= ivs[m][1], (group, m)
    assert rep["metrics"]["all"]["answer_relevance"] > 0.6  # the example's answers are on topic
    assert "relevance and correctness against the reference answer" in out.output
    # Oracle gap +0.011 overall with correctness 0.45: the labelled chunks would not help.
    gen = [h for h in rep["hints"] if h["query_type"] == "all" and "oracle gap" in h["message"]]
    assert [h["area"] for h in gen] == ["generation"] and "fix the generator" in gen[0]["message"]
    assert not any("not relevant to the question" in h["message"] for h in rep["hints"])
    assert "fix the generator" in _flat(out.output)


def test_lost_retrieval_shows_in_the_oracle_gap_and_in_faithful_irrelevant_answers(
    service: str, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    degrade(service, drop_best_rate=1.0)
    try:
        out = _replay(
            GOLDEN, "--target", f"{service}/query", "--baselines", "oracle", "--report", str(report)
        )
    finally:
        degrade(service, drop_best_rate=0.0)
    assert out.exit_code == 1, out.output  # recall floors, as before
    rep = json.loads(report.read_text())
    assert {r["metric"] for r in rep["regressions"]} == {"recall_at_k"}
    overall = [h for h in rep["hints"] if h["query_type"] == "all"]
    gap = next(h for h in overall if "oracle gap" in h["message"])
    assert gap["area"] == "retrieval" and "fix retrieval" in gap["message"]
    assert rep["baselines"]["oracle_gap"]["all"]["answer_match"]["gap"] > 0.15
    # The extractive generator still quotes its (wrong) chunks: faithful, but off the question.
    m = rep["metrics"]["all"]
    assert m["faithfulness"] >= 0.9 and m["answer_relevance"] < 0.5
    off = next(h for h in overall if "not relevant to the question" in h["message"])
    assert off["area"] == "retrieval"
    assert "fix the generator" not in _flat(out.output)


async def test_an_llm_judges_ratings_are_reported_and_exported(api: FakeAPI, tmp_path: Path) -> None:
    """The fake judge rates the first chunk 3 and the others 2: one chunk gives 1.0 on [0, 1], two
    give 0.75, three 2/3; every answer 3 (1.0). The oracle target answers with the reference answer."""
    from monitor.judge import create_judge

    rows = load_golden(_tagged(tmp_path / "g.jsonl", per_type=2)).rows
    registry = CollectorRegistry()
    judge = create_judge("anthropic", {"base_url": api.url, "api_key": api.key, "max_retries": 0})
    try:
        report = await run_replay(rows, "support:oracle_target", judge=judge, gauges=GoldenGauges(registry))
    finally:
        await judge.aclose()
    data = report.to_json_dict()
    by_id = {r.id: r for r in rows}
    for r in data["rows"]:
        row = by_id[r["id"]]
        if not row.answerable:
            assert r["context_relevance"] is None and r["answer_relevance"] is None
            continue
        shown = min(len(row.relevant_chunk_ids), 5)
        assert r["context_relevance"] == (
            1.0 if shown == 1 else pytest.approx((1.0 + 0.5 * (shown - 1)) / shown)
        )
        assert r["answer_relevance"] == 1.0 and r["correctness"] == 1.0
    m = report.metrics
    multi = [r["context_relevance"] for r in data["rows"] if r["query_type"] == "multi_hop"]
    assert m["lookup"]["context_relevance"] == 1.0 and m["multi_hop"]["context_relevance"] < 1.0
    assert m["multi_hop"]["context_relevance"] == pytest.approx(sum(multi) / len(multi))
    g = registry.get_sample_value
    for metric in NEW:
        assert g("ragmon_golden_metric_ratio", {"query_type": "all", "metric": metric}) == m["all"][metric]
        low = g(
            "ragmon_golden_metric_interval_ratio", {"query_type": "all", "metric": metric, "bound": "lower"}
        )
        assert low is not None and low <= m["all"][metric]
        assert g("ragmon_golden_regression_active", {"metric": metric}) == 0.0
    assert (
        g("ragmon_golden_metric_ratio", {"query_type": "multi_hop", "metric": "context_relevance"})
        == (m["multi_hop"]["context_relevance"])
    )


def test_difficulty_tags_are_reported_per_tag(service: str, tmp_path: Path) -> None:
    golden = _tagged(tmp_path / "g.jsonl")
    assert load_golden(golden).ok
    report = tmp_path / "report.json"
    out = _replay(golden, "--target", f"{service}/query", "--report", str(report))
    assert out.exit_code in (0, 1), out.output
    rep = json.loads(report.read_text())
    tags = {r["id"]: r.get("difficulty") for r in rep["rows"]}
    section = rep["by_difficulty"]
    assert set(section["metrics"]) == {"easy", "hard", "adversarial"}
    for tag, stats in section["metrics"].items():
        members = [r for r in rep["rows"] if tags[r["id"]] == tag]
        assert stats["rows"] == len(members) > 0
        answerable = [r for r in members if r["recall_at_k"] is not None]
        assert stats["recall_at_k"] == pytest.approx(
            sum(r["recall_at_k"] for r in answerable) / len(answerable)
        )
        iv = section["intervals"][tag]["recall_at_k"]
        assert iv is not None and iv[0] <= stats["recall_at_k"] <= iv[1]
    assert sum(s["rows"] for s in section["metrics"].values()) == sum(t is not None for t in tags.values())
    assert "per difficulty tag" in out.output and "adversarial" in out.output
    # Tags are reported, not gated, and a file without them reports no section.
    assert not any(r["query_type"] in section["metrics"] for r in rep["regressions"])
    plain = tmp_path / "plain.jsonl"
    plain.write_text(
        "".join(
            json.dumps({k: v for k, v in json.loads(line).items() if k != "difficulty"}) + "\n"
            for line in golden.read_text().splitlines()
        )
    )
    out = _replay(plain, "--target", f"{service}/query", "--report", str(report))
    assert json.loads(report.read_text())["by_difficulty"] is None and "per difficulty tag" not in out.output


def test_a_difficulty_outside_the_three_tags_is_an_error(tmp_path: Path) -> None:
    row = json.loads(GOLDEN.read_text().splitlines()[0])
    assert validate([{**row, "difficulty": "adversarial"}]).rows[0].difficulty == "adversarial"
    check = validate([{**row, "difficulty": "medium"}])
    assert not check.ok and "difficulty" in check.errors[0].message
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({**row, "difficulty": "medium"}) + "\n")
    r = CliRunner().invoke(_cli(), ["golden", "validate", str(path)])
    assert r.exit_code == 2 and "difficulty" in r.output


def test_the_new_metrics_gate_only_when_named_and_old_baselines_still_compare(
    service: str, tmp_path: Path
) -> None:
    golden = _tagged(tmp_path / "g.jsonl")
    floors = "gate:\n  floors: {}\n  slice_floor: {}\n"
    config = tmp_path / "replay.yaml"
    config.write_text(floors)
    baseline = tmp_path / "baseline.json"
    first = _replay(
        golden, "--target", f"{service}/query", "--config", str(config), "--write-baseline", str(baseline)
    )
    assert first.exit_code == 0, first.output
    # A baseline written before these metrics existed: their keys absent everywhere.
    old = json.loads(baseline.read_text())
    for stats in [*old["metrics"].values(), *old["rows"].values()]:
        for m in NEW:
            stats.pop(m, None)
    baseline.write_text(json.dumps(old))
    report = tmp_path / "report.json"
    again = _replay(
        golden, "--target", f"{service}/query", "--config", str(config), "--baseline", str(baseline),
        "--report", str(report),
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    changes = {
        (c["query_type"], c["metric"]): c for c in json.loads(report.read_text())["comparison"]["metrics"]
    }
    assert (
        changes[("all", "correctness")]["before"] is None and changes[("all", "correctness")]["drop"] is None
    )
    # Named in the gate, a new metric gates like any other.
    config.write_text(floors.replace("floors: {}", "floors: {correctness: 0.99}"))
    gated = _replay(golden, "--target", f"{service}/query", "--config", str(config), "--report", str(report))
    assert gated.exit_code == 1, gated.output
    assert [(r["metric"], r["kind"]) for r in json.loads(report.read_text())["regressions"]] == [
        ("correctness", "floor")
    ]
    config.write_text(floors.replace("floors: {}", "floors: {correctnes: 0.99}"))
    bad = _replay(golden, "--target", f"{service}/query", "--config", str(config))
    assert bad.exit_code == 2 and "correctnes" in bad.output


async def test_a_failed_judge_leaves_gated_relevance_unmeasured_but_not_correctness(
    api: FakeAPI, tmp_path: Path
) -> None:
    """Correctness needs no judge: gated, it is measured whatever the judge does."""
    from monitor.golden import GateConfig
    from monitor.judge import create_judge

    api.default = lambda path, body: Reply(500, "<html>upstream exploded</html>")
    rows = [r for r in load_golden(_tagged(tmp_path / "g.jsonl", per_type=2)).rows if r.answerable]
    gate = GateConfig(floors={"answer_relevance": 0.5, "correctness": 0.5}, slice_floor={}, max_drop={})
    judge = create_judge("anthropic", {"base_url": api.url, "api_key": api.key, "max_retries": 0})
    try:
        report = await run_replay(rows, "support:oracle_target", judge=judge, gate=gate)
    finally:
        await judge.aclose()
    assert report.exit_code == 2
    assert [u.metric for u in report.unmeasured] == ["answer_relevance"]
    assert report.metrics["all"]["correctness"] == 1.0 and report.metrics["all"]["answer_relevance"] is None
