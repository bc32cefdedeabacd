"""Bootstrap intervals of golden metrics and the paired gate: reproducible with a seed, covering
the truth about as often as they claim (in simulation), narrower paired than unpaired on rows that
move together, and a gate that tells a real regression from row noise — failing both by default,
only the real one with `--gate interval`."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import typer
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from monitor.cli.golden import register
from monitor.golden import Baseline, GateConfig, GoldenRow, load_baseline, run_replay
from monitor.golden.gauges import GoldenGauges
from monitor.golden.intervals import IntervalConfig, difference_interval, mean_intervals

# -- a target whose retrieval the test breaks row by row ------------------------------------------

BROKEN: set[str] = set()


def rag(query: str, k: int) -> dict[str, Any]:
    """`module:function` target: answers from the right chunk, unless the query is in BROKEN."""
    chunk = "wrong" if query in BROKEN else "right"
    answer = f"{query} is in the {chunk} chunk."
    return {"answer": answer, "chunks": [{"id": chunk, "content": answer}][:k]}


TARGET = f"{__name__}:rag"


def _rows(n: int) -> list[GoldenRow]:
    return [
        GoldenRow(id=f"r{i:03d}", query=f"q{i}", query_type="lookup", relevant_chunk_ids=["right"])
        for i in range(n)
    ]


def _golden(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "golden.jsonl"
    path.write_text("".join(json.dumps(r.model_dump(exclude_none=True)) + "\n" for r in _rows(n)))
    return path


@pytest.fixture(autouse=True)
def _heal() -> Any:
    BROKEN.clear()
    yield
    BROKEN.clear()


# -- the interval itself --------------------------------------------------------------------------


def _values(rng: random.Random, n: int) -> dict[str, dict[str, float | None]]:
    return {f"r{i}": {"m": rng.betavariate(5, 1)} for i in range(n)}


def test_the_same_seed_and_rows_give_the_same_interval() -> None:
    rows = _values(random.Random(7), 40)
    cfg = IntervalConfig()
    first = mean_intervals(rows, ["m"], cfg)["m"]
    assert first is not None and first.low < sum(r["m"] or 0 for r in rows.values()) / 40 < first.high
    shuffled = dict(sorted(rows.items(), key=lambda kv: random.Random(1).random()))
    assert mean_intervals(shuffled, ["m"], cfg)["m"] == first  # file order does not matter
    assert mean_intervals(rows, ["m"], cfg.model_copy(update={"seed": 1}))["m"] != first
    assert mean_intervals(rows, ["m"], cfg.model_copy(update={"resamples": 0}))["m"] is None


def test_rows_all_at_one_still_get_an_honest_width() -> None:
    """Twelve rows at recall 1: every resample is 1 too, but 12 rows do not prove 1.00."""
    iv = mean_intervals({f"r{i}": {"m": 1.0} for i in range(12)}, ["m"], IntervalConfig())["m"]
    assert iv is not None and iv.high == 1.0 and 0.70 < iv.low < 0.76  # 0.025 ** (1 / 12) = 0.735


@pytest.mark.parametrize("method", ["bca", "percentile"])
def test_95_percent_intervals_cover_the_true_mean_about_95_percent_of_the_time(method: str) -> None:
    """200 simulated golden sets of 40 rows, scores skewed towards 1 (Beta(5, 1), mean 5/6)."""
    truth, n, sets = 5 / 6, 40, 200
    cfg = IntervalConfig(resamples=1000, method=method)
    covered = 0
    for s in range(sets):
        iv = mean_intervals(_values(random.Random(1000 + s), n), ["m"], cfg.model_copy(update={"seed": s}))[
            "m"
        ]
        assert iv is not None
        covered += iv.contains(truth)
    assert 0.88 <= covered / sets <= 0.99, covered / sets


def test_paired_interval_is_narrower_than_unpaired_on_rows_that_move_together() -> None:
    """Rows differ a lot from each other, little between the runs: pairing cancels the first."""
    rng = random.Random(3)
    before = [rng.random() for _ in range(60)]
    after = [min(1.0, max(0.0, b - 0.03 + rng.gauss(0, 0.02))) for b in before]
    cfg = IntervalConfig()
    paired = difference_interval(before, after, cfg, paired=True)
    unpaired = difference_interval(before, after, cfg, paired=False)
    assert paired is not None and unpaired is not None
    assert paired.width * 4 < unpaired.width
    assert paired.low > 0 and unpaired.low < 0  # only pairing sees that the drop is real


# -- the gate --------------------------------------------------------------------------------------


async def _baseline_and_rerun(n: int, broken: int, gate: GateConfig) -> Any:
    rows = _rows(n)
    BROKEN.clear()
    first = await run_replay(rows, TARGET, k=1)
    BROKEN.update(r.query for r in rows[:broken])
    return await run_replay(rows, TARGET, k=1, baseline=Baseline(first.baseline(), "mem"), gate=gate)


async def test_a_real_regression_fails_whatever_the_gate_mode() -> None:
    for mode in ("threshold", "interval"):
        report = await _baseline_and_rerun(60, 12, GateConfig(mode=mode))  # recall 1.0 -> 0.8
        drop = next(r for r in report.regressions if r.kind == "drop" and r.metric == "recall_at_k")
        assert drop.verdict == "regression" and drop.interval is not None and drop.interval.low > 0
        assert not report.passed and report.exit_code == 1
        change = report.comparison.change("all", "recall_at_k")
        assert change.drop == pytest.approx(0.2) and change.verdict == "regression"
        assert change.interval.contains(0.2)


async def test_gauges_carry_the_interval_bounds_and_the_rows_behind_each_metric() -> None:
    rows = _rows(40)
    BROKEN.update(r.query for r in rows[:10])  # recall 0.75 over 40 rows
    registry = CollectorRegistry()
    report = await run_replay(rows, TARGET, k=1, gauges=GoldenGauges(registry))
    g = registry.get_sample_value
    interval = report.intervals["all"]["recall_at_k"]
    labels = {"query_type": "all", "metric": "recall_at_k"}
    assert g("ragmon_golden_metric_ratio", labels) == 0.75
    lower = g("ragmon_golden_metric_interval_ratio", {**labels, "bound": "lower"})
    upper = g("ragmon_golden_metric_interval_ratio", {**labels, "bound": "upper"})
    assert (lower, upper) == (interval.low, interval.high)
    assert 0.5 < lower < 0.75 < upper < 1.0
    assert g("ragmon_golden_rows", {"query_type": "all"}) == 40
    assert g("ragmon_golden_rows", {"query_type": "lookup"}) == 40
    # Intervals off: the bounds disappear, the metric stays.
    await run_replay(
        rows,
        TARGET,
        k=1,
        gauges=GoldenGauges(registry := CollectorRegistry()),
        intervals=IntervalConfig(resamples=0),
    )
    assert registry.get_sample_value("ragmon_golden_metric_ratio", labels) == 0.75
    assert (
        registry.get_sample_value("ragmon_golden_metric_interval_ratio", {**labels, "bound": "lower"}) is None
    )


async def test_a_drop_within_row_noise_fails_by_default_and_is_waived_by_the_interval_gate() -> None:
    """One row of ten breaks: recall drops 0.1, over the 0.05 threshold, but a resample misses that
    row a third of the time (0.9 ** 10), so the interval includes 0."""
    report = await _baseline_and_rerun(10, 1, GateConfig())
    (drop,) = report.regressions
    assert drop.kind == "drop" and drop.verdict == "possible_noise"
    assert drop.interval is not None and drop.interval.low <= 0 < drop.interval.high
    assert "could be row noise" in drop.description and report.exit_code == 1

    report = await _baseline_and_rerun(10, 1, GateConfig(mode="interval"))
    assert report.passed and report.exit_code == 0
    assert [w.verdict for w in report.waived] == ["possible_noise"]
    data = report.to_json_dict()
    assert data["status"] == "pass" and data["waived"][0]["metric"] == "recall_at_k"


def _cli(tmp_path: Path, *args: str) -> Any:
    app = typer.Typer()
    register(app)
    golden = tmp_path / "golden.jsonl"
    return CliRunner().invoke(app, ["replay", "--golden", str(golden), "--target", TARGET, "--k", "1", *args])


def test_cli_reports_baseline_now_drop_interval_and_verdict(tmp_path: Path) -> None:
    _golden(tmp_path, 10)
    baseline, report = tmp_path / "baseline.json", tmp_path / "report.json"
    assert _cli(tmp_path, "--write-baseline", str(baseline)).exit_code == 0
    BROKEN.add("q0")

    strict = _cli(tmp_path, "--baseline", str(baseline), "--report", str(report))
    assert strict.exit_code == 1, strict.output
    assert "95% interval of the drop" in strict.output and "could be row noise" in strict.output
    assert "REGRESSION" in strict.output
    rep = json.loads(report.read_text())
    change = next(
        c for c in rep["comparison"]["metrics"] if c["metric"] == "recall_at_k" and c["query_type"] == "all"
    )
    assert change["before"] == 1.0 and change["after"] == pytest.approx(0.9)
    assert change["drop"] == pytest.approx(0.1) and change["allowed"] == 0.05
    assert change["interval"][0] <= 0 < change["interval"][1] and change["verdict"] == "possible_noise"
    assert rep["intervals"]["metrics"]["lookup"]["recall_at_k"][1] == 1.0
    assert rep["intervals"]["method"] == "bca" and rep["intervals"]["resamples"] == 2000

    lenient = _cli(tmp_path, "--baseline", str(baseline), "--gate", "interval")
    assert lenient.exit_code == 0, lenient.output
    assert "PASS" in lenient.output and "within row noise" in lenient.output

    BROKEN.update(f"q{i}" for i in range(1, 6))  # half the rows: a real regression
    real = _cli(tmp_path, "--baseline", str(baseline), "--gate", "interval", "--seed", "5")
    assert real.exit_code == 1 and "interval excludes 0" in real.output


def test_rows_added_or_removed_are_listed_not_counted_and_old_baselines_still_read(tmp_path: Path) -> None:
    golden = _golden(tmp_path, 12)
    baseline, report = tmp_path / "baseline.json", tmp_path / "report.json"
    assert _cli(tmp_path, "--write-baseline", str(baseline)).exit_code == 0
    data = json.loads(baseline.read_text())
    del data["intervals"]  # a baseline written before intervals existed (schema 1 all the same)
    data["rows"]["gone"] = {**data["rows"]["r000"], "id": "gone", "recall_at_k": 0.0}
    baseline.write_text(json.dumps(data))
    assert load_baseline(baseline).k == 1
    lines = golden.read_text().splitlines()
    lines.append(json.dumps({**json.loads(lines[0]), "id": "new", "query": "q-new"}))
    golden.write_text("\n".join(lines) + "\n")
    BROKEN.add("q-new")  # a new row that fails: not a drop, nothing to compare it with

    r = _cli(tmp_path, "--baseline", str(baseline), "--report", str(report))
    assert r.exit_code == 0, r.output
    rep = json.loads(report.read_text())["comparison"]
    assert rep["rows_compared"] == 12 and rep["rows_added"] == ["new"] and rep["rows_removed"] == ["gone"]
    recall = next(c for c in rep["metrics"] if c["metric"] == "recall_at_k" and c["query_type"] == "all")
    assert recall["before"] == 1.0 and recall["drop"] == 0.0
    assert "rows added (not in the baseline)" in r.output and "new" in r.output
