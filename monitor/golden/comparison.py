"""A replay against a baseline, and the gate: what counts as a regression.

A baseline (`Baseline`, written by `ReplayReport.baseline()`, read by `load_baseline`) is an
earlier run's metrics and rows. The comparison (`compare`) is paired per row id: the drop and its
bootstrap interval are measured on the rows present in both runs (rows added or removed are listed,
never counted), so the gate can say whether a drop over its threshold is a real regression (the
drop's interval excludes 0) or could be row noise (it does not). `GateConfig.mode` decides what
fails (`split_by_gate`): `threshold` (default, as before intervals: any drop over its threshold or
metric under its floor) or `interval` (only those the interval confirms).

A gate that could not measure does not pass: when the judge failed (an outage, an answer it could
not parse) on more than `GateConfig.max_judge_failure_share` of the rows a gated generation metric
is computed from (default 0: on any of them), the metric is `unmeasured` (`find_unmeasured`), the
report says so and the run exits 2 — a null faithfulness would otherwise pass every floor and drop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from monitor.golden.intervals import Interval, IntervalConfig, drop_intervals
from monitor.golden.scores import (
    ALL,
    JUDGED_METRICS,
    LOWER_IS_BETTER,
    METRICS,
    RowResult,
    by_query_type,
    mean,
    worse,
)
from monitor.plumbing.errors import plural

__all__ = [
    "BASELINE_SCHEMA_VERSION",
    "Baseline",
    "BaselineError",
    "Comparison",
    "GateConfig",
    "MetricChange",
    "Regression",
    "RowMove",
    "Unmeasured",
    "compare",
    "find_regressions",
    "find_unmeasured",
    "load_baseline",
    "split_by_gate",
]


BASELINE_SCHEMA_VERSION = 1


class BaselineError(Exception):
    """A baseline that cannot be compared with this run (unreadable, other schema, other k)."""


@dataclass(frozen=True, slots=True)
class Unmeasured:
    """A gated metric the judge failed on too many rows of: the gate cannot say it passed."""

    metric: str
    failed: int  # rows the judge failed on
    rows: int  # rows the metric is computed from, had the judge answered
    allowed_share: float

    @property
    def description(self) -> str:
        return (
            f"{self.metric}: the judge failed on {self.failed} of {plural(self.rows, 'row')} "
            f"(allowed: {self.allowed_share:.0%}); see rows[].judge_error"
        )

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "failed_rows": self.failed,
            "rows": self.rows,
            "allowed_share": self.allowed_share,
            "description": self.description,
        }


def find_unmeasured(rows: Sequence[RowResult], gate: GateConfig) -> list[Unmeasured]:
    """The gated judged metrics whose judge failures exceed `gate.max_judge_failure_share`."""
    out = []
    for metric in JUDGED_METRICS:
        if metric not in gate.gated():
            continue
        counted = [r for r in rows if r.counts_for(metric)]
        failed = sum(r.judge_failed for r in counted)
        if counted and failed > gate.max_judge_failure_share * len(counted) + 1e-9:
            out.append(Unmeasured(metric, failed, len(counted), gate.max_judge_failure_share))
    return out


class GateConfig(BaseModel):
    """What counts as a regression. Drops are absolute (0.05 = five points of recall), measured
    paired on the rows present in the baseline and in this run.

    `floors` apply to the overall group, `slice_floor` to every query type, `slice_floors` per
    query type override it (`{"multi_hop": {"recall_at_k": 0.6}}`). A metric a group has no data
    for (recall on unanswerable-only slices) is never a regression.

    `mode`: `threshold` (default) fails on the thresholds alone, as the gate always did — a drop
    over its threshold whose interval includes 0 still fails, flagged "could be row noise";
    conservative, because with few rows the interval is wide and a real regression can hide in it.
    `interval` fails only when the interval confirms it too (the drop's interval excludes 0; a
    floor's metric interval lies wholly on the wrong side of it) and reports the rest as waived.
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["threshold", "interval"] = Field(
        "threshold",
        description="threshold: a drop over its threshold fails; interval: only when its interval also "
        "excludes no change",
    )
    max_drop: dict[str, float] = Field(
        default_factory=lambda: {"recall_at_k": 0.05, "faithfulness": 0.03},
        description="largest drop from the baseline per metric, absolute, paired on shared rows",
    )
    floors: dict[str, float] = Field(
        default_factory=lambda: {"recall_at_k": 0.85, "faithfulness": 0.9},
        description="lowest value per metric over all rows",
    )
    slice_floor: dict[str, float] = Field(
        default_factory=lambda: {"recall_at_k": 0.75, "faithfulness": 0.75},
        description="lowest value per metric in every query type",
    )
    slice_floors: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="per query type, floors that override slice_floor"
    )
    max_judge_failure_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of a gated generation metric's rows the judge may fail on before the "
        "metric is unmeasured and the run exits 2 (0: any failed row)",
    )

    def gated(self) -> set[str]:
        """Every metric some threshold of this gate reads."""
        names = {*self.max_drop, *self.floors, *self.slice_floor}
        return names | {m for per in self.slice_floors.values() for m in per}

    def model_post_init(self, context: Any, /) -> None:
        names = [*self.max_drop, *self.floors, *self.slice_floor]
        names += [m for per in self.slice_floors.values() for m in per]
        unknown = sorted(set(names) - set(METRICS))
        if unknown:
            raise ValueError(f"unknown gate metric(s) {unknown}: expected some of {list(METRICS)}")


@dataclass(frozen=True, slots=True)
class Baseline:
    data: dict[str, Any]
    path: str = ""

    @property
    def k(self) -> int:
        return int(self.data["config"]["k"])

    @property
    def sha256(self) -> str:
        return str(self.data["golden"]["sha256"])

    def metric(self, group: str, metric: str) -> float | None:
        value = self.data["metrics"].get(group, {}).get(metric)
        return float(value) if isinstance(value, int | float) else None

    def row_value(self, row_id: str, metric: str) -> float | None:
        value = self.data.get("rows", {}).get(row_id, {}).get(metric)
        return float(value) if isinstance(value, int | float) else None


def load_baseline(path: Path | str) -> Baseline:
    """A baseline written by `ReplayReport.baseline()`; BaselineError when it cannot be used."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BaselineError(f"baseline {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != "rag-monitor-golden-baseline":
        raise BaselineError(f"{path} is not a rag-monitor golden baseline")
    if data.get("schema_version") != BASELINE_SCHEMA_VERSION:
        raise BaselineError(
            f"baseline {path} has schema_version {data.get('schema_version')!r}; "
            f"this version reads {BASELINE_SCHEMA_VERSION}: write a new baseline"
        )
    for key in ("golden", "config", "metrics", "rows"):
        if not isinstance(data.get(key), dict):
            raise BaselineError(f"baseline {path} lacks {key!r}")
    return Baseline(data, str(path))


@dataclass(frozen=True, slots=True)
class RowMove:
    id: str
    query_type: str
    before: float | None
    after: float | None

    def to_json_dict(self) -> dict[str, Any]:
        return {"id": self.id, "query_type": self.query_type, "before": self.before, "after": self.after}


Verdict = Literal["regression", "possible_noise", "no_interval"]
_VERDICT_TEXT: Mapping[tuple[str, str], str] = {
    ("drop", "regression"): "real: the drop's interval excludes 0",
    ("drop", "possible_noise"): "could be row noise: the drop's interval includes 0 — rerun or add rows",
    ("floor", "regression"): "real: the whole interval is past the floor",
    ("floor", "possible_noise"): "could be row noise: the interval reaches the floor — rerun or add rows",
}


@dataclass(frozen=True, slots=True)
class Regression:
    """A threshold the run fails: a drop since the baseline over `threshold`, or a floor.

    `interval`: of the drop (kind drop; positive = worse) or of the metric (kind floor).
    """

    metric: str
    query_type: str  # ALL or a query type
    kind: Literal["drop", "floor"]
    value: float
    reference: float  # baseline value (drop) or the floor
    threshold: float  # allowed drop (drop) or the floor
    rows: tuple[RowMove, ...]
    interval: Interval | None = None

    @property
    def verdict(self) -> Verdict:
        """`regression` when the interval confirms the finding: a drop whose interval excludes 0
        (the drop is real, though not necessarily as large as the threshold), a metric whose
        interval lies wholly past its floor; `possible_noise` when it does not."""
        iv = self.interval
        if iv is None:
            return "no_interval"
        if self.kind == "drop":
            real = iv.low > 1e-12
        elif self.metric in LOWER_IS_BETTER:
            real = iv.low > self.threshold
        else:
            real = iv.high < self.threshold
        return "regression" if real else "possible_noise"

    @property
    def description(self) -> str:
        scope = "overall" if self.query_type == ALL else f"query_type {self.query_type}"
        iv = self.interval
        if self.kind == "drop":
            drop = worse(self.metric, self.value, self.reference)
            text = (
                f"{self.metric} {scope}: {self.value:.3f} vs baseline {self.reference:.3f} "
                f"(drop {drop:+.3f}, allowed {self.threshold:.3f}"
            )
            text += f"; drop interval [{iv.low:+.3f}, {iv.high:+.3f}])" if iv else ")"
        else:
            text = f"{self.metric} {scope}: {self.value:.3f} below floor {self.threshold:.3f}"
            text += f" (interval [{iv.low:.3f}, {iv.high:.3f}])" if iv else ""
        verdict = _VERDICT_TEXT.get((self.kind, self.verdict), "no interval (off, or too few rows)")
        return f"{text}: {verdict}"

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "query_type": self.query_type,
            "kind": self.kind,
            "value": self.value,
            "reference": self.reference,
            "threshold": self.threshold,
            "interval": self.interval.to_json() if self.interval else None,
            "verdict": self.verdict,
            "description": self.description,
            "rows": [r.to_json_dict() for r in self.rows],
        }


ChangeVerdict = Literal["regression", "possible_noise", "worse", "better", "no_clear_change"]


@dataclass(frozen=True, slots=True)
class MetricChange:
    """One metric of one group, before (baseline) and now, on the rows present in both.

    `drop` is positive when worse, whatever the metric's direction; `interval` is its paired
    bootstrap interval. `allowed`: the gate's threshold for this drop (None: not gated).
    """

    query_type: str
    metric: str
    before: float | None
    after: float | None
    drop: float | None
    interval: Interval | None
    allowed: float | None

    @property
    def verdict(self) -> ChangeVerdict:
        """Over the threshold: `regression` (interval excludes 0) or `possible_noise`; otherwise
        what the interval says: `worse`, `better` or `no_clear_change`."""
        iv = self.interval
        if self.drop is not None and self.allowed is not None and self.drop > self.allowed + 1e-9:
            return "regression" if iv is not None and iv.low > 1e-12 else "possible_noise"
        if iv is not None and iv.low > 1e-12:
            return "worse"
        if iv is not None and iv.high < -1e-12:
            return "better"
        return "no_clear_change"

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "query_type": self.query_type,
            "metric": self.metric,
            "before": self.before,
            "after": self.after,
            "drop": self.drop,
            "interval": self.interval.to_json() if self.interval else None,
            "allowed": self.allowed,
            "verdict": self.verdict,
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """This run against a baseline, paired by row id (`compare`)."""

    rows_compared: int
    added: tuple[str, ...]  # in this run, not in the baseline: not in any drop
    removed: tuple[str, ...]  # in the baseline, not in this run
    changes: tuple[MetricChange, ...]

    def change(self, group: str, metric: str) -> MetricChange | None:
        return next((c for c in self.changes if c.query_type == group and c.metric == metric), None)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "rows_compared": self.rows_compared,
            "rows_added": list(self.added),
            "rows_removed": list(self.removed),
            "metrics": [c.to_json_dict() for c in self.changes],
        }


def _below(metric: str, value: float, floor: float) -> bool:
    return value > floor if metric in LOWER_IS_BETTER else value < floor


def _moved_rows(
    rows: Sequence[RowResult], group: str, metric: str, baseline: Baseline | None, limit: int = 50
) -> tuple[RowMove, ...]:
    """Rows of `group` that got worse on `metric` since the baseline; without a baseline (or when
    none moved: a floor already broken at the baseline) the rows pulling the group down."""
    members = [r for r in rows if group in (ALL, r.query_type) and r.value(metric) is not None]
    moved: list[tuple[float, RowMove]] = []
    if baseline is not None:
        for r in members:
            now, before = r.value(metric), baseline.row_value(r.id, metric)
            if now is not None and before is not None and worse(metric, now, before) > 1e-9:
                moved.append((-worse(metric, now, before), RowMove(r.id, r.query_type, before, now)))
    if not moved:
        perfect = 0.0 if metric in LOWER_IS_BETTER else 1.0
        for r in members:
            now = r.value(metric)
            if now is not None and worse(metric, now, perfect) > 1e-9:
                before = baseline.row_value(r.id, metric) if baseline else None
                moved.append((-worse(metric, now, perfect), RowMove(r.id, r.query_type, before, now)))
    moved.sort(key=lambda t: (t[0], t[1].id))
    return tuple(m for _, m in moved[:limit])


def compare(
    rows: Sequence[RowResult], baseline: Baseline, gate: GateConfig, cfg: IntervalConfig
) -> Comparison:
    """Every metric, overall and per query type (this run's types), before and now on the rows
    present in both runs, with the paired interval of the drop."""
    stored = baseline.data.get("rows", {})
    now_ids = {r.id for r in rows}
    added = tuple(sorted(now_ids - set(stored)))
    removed = tuple(sorted(set(stored) - now_ids))
    common = [r for r in rows if r.id in stored]
    changes: list[MetricChange] = []
    for group, members in by_query_type(common).items():
        after = {r.id: {m: r.value(m) for m in METRICS} for r in members}
        before = {r.id: {m: baseline.row_value(r.id, m) for m in METRICS} for r in members}
        intervals = drop_intervals(before, after, METRICS, cfg, group, LOWER_IS_BETTER)
        for m in METRICS:
            b = mean([before[i][m] for i in before])
            a = mean([after[i][m] for i in after])
            drop = None if a is None or b is None else worse(m, a, b)
            allowed = gate.max_drop.get(m) if group == ALL else None
            changes.append(MetricChange(group, m, b, a, drop, intervals[m], allowed))
    return Comparison(len(common), added, removed, tuple(changes))


def find_regressions(
    rows: Sequence[RowResult],
    metrics: Mapping[str, Mapping[str, Any]],
    gate: GateConfig,
    baseline: Baseline | None,
    intervals: Mapping[str, Mapping[str, Interval | None]] | None = None,
    comparison: Comparison | None = None,
) -> list[Regression]:
    """Every threshold the run fails, each with its interval (whether it fails the gate is
    `GateConfig.mode`'s call: see `split_by_gate`). Drops come from the paired `comparison`."""
    out: list[Regression] = []
    overall = metrics[ALL]
    intervals = intervals or {}

    def interval(group: str, metric: str) -> Interval | None:
        return intervals.get(group, {}).get(metric)

    if baseline is not None and comparison is not None:
        for metric, allowed in gate.max_drop.items():
            c = comparison.change(ALL, metric)
            if c is None or c.drop is None or c.before is None or c.after is None:
                continue
            if c.drop > allowed + 1e-9:
                moves = _moved_rows(rows, ALL, metric, baseline)
                out.append(Regression(metric, ALL, "drop", c.after, c.before, allowed, moves, c.interval))
    for metric, floor in gate.floors.items():
        now = overall.get(metric)
        if now is not None and _below(metric, now, floor):
            moves = _moved_rows(rows, ALL, metric, baseline)
            out.append(Regression(metric, ALL, "floor", now, floor, floor, moves, interval(ALL, metric)))
    for group, stats in metrics.items():
        if group == ALL:
            continue
        floors = {**gate.slice_floor, **gate.slice_floors.get(group, {})}
        for metric, floor in floors.items():
            now = stats.get(metric)
            if now is not None and _below(metric, now, floor):
                moves = _moved_rows(rows, group, metric, baseline)
                out.append(
                    Regression(metric, group, "floor", now, floor, floor, moves, interval(group, metric))
                )
    return out


def split_by_gate(
    findings: Sequence[Regression], gate: GateConfig
) -> tuple[list[Regression], list[Regression]]:
    """(failing, waived): in `threshold` mode every finding fails; in `interval` mode only those
    the interval confirms, or that have no interval to say otherwise (never waived on no evidence)."""
    if gate.mode == "threshold":
        return list(findings), []
    failing = [r for r in findings if r.verdict != "possible_noise"]
    waived = [r for r in findings if r.verdict == "possible_noise"]
    return failing, waived
