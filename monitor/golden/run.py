"""One golden replay: ask the target every row, score retrieval and generation separately,
compare with a baseline, and say which half of the pipeline to open when something regressed.

`run_replay` is what both the one-shot CLI (CI, CronJob) and the sidecar's schedule call. It writes
no file and touches nothing but the gauges it is given: the caller decides where the report and
the baseline go. A row the target cannot answer (timeout after retries, malformed JSON, wrong
shape) fails the whole run with `ReplayFailed` — never a partial report or baseline, because a
missing row would read as a retrieval miss.

The target answers every row before the judge sees any: what the judge will be sent is then known,
so a caller can price it and stop before spending (`approve_judging`, the CLI's cost estimate).

Every metric carries a bootstrap interval over rows (`intervals`), and the comparison with a
baseline is paired per row id: the drop and its interval are measured on the rows present in both
runs (rows added or removed are listed, never counted), so the gate can say whether a drop over its
threshold is a real regression (the drop's interval excludes 0) or could be row noise (it does not).
`GateConfig.mode` decides what fails: `threshold` (default, as before intervals: any drop over its
threshold or metric under its floor) or `interval` (only those the interval confirms).

Citations: when the target's answers cite their chunks (``[1]``, ``[doc-3]``), each citation is
checked against the judge's claims (`monitor.judge.citations`) and `citation_precision` (per row:
supported / checked citations; aggregated like faithfulness, a macro-average over the rows that
have one) is a generation metric with its interval; a run whose answers cite nothing has none (the
terminal shows "–"). Self-evaluation: when the judge model is the model that generated the answers
(`generator_model`: the target's answers name no model, the sidecar passes the one production
spans showed), the report says so (`self_evaluation`, a warning).

A gate that could not measure does not pass: when the judge failed (an outage, an answer it could
not parse) on more than `GateConfig.max_judge_failure_share` of the rows a gated generation metric
is computed from (default 0: on any of them), the metric is `unmeasured`, the report says so and
the run exits 2 — a null faithfulness would otherwise pass every floor and drop.

`baselines` adds the oracle and no-context replays of the same rows (`baselines.py`): reported
beside the normal one, never gated. `change` records the event that triggered the run (a deploy, a
re-index…) in the report and, through the gauges, for dashboards to annotate.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from monitor.golden.baselines import (
    REPLAY_SERVICE,
    BaselineMode,
    Baselines,
    ModeResult,
    ModeRow,
    ask_mode,
    match_reference,
    replay_ids,
    score_baselines,
)
from monitor.golden.change import Change
from monitor.golden.gauges import GoldenGauges
from monitor.golden.intervals import Interval, IntervalConfig, drop_intervals, mean_intervals
from monitor.golden.retrieval import RETRIEVAL_METRICS, RetrievalScores, score_ranking
from monitor.golden.schema import GoldenRow
from monitor.golden.targets import Target, TargetError, make_target
from monitor.judge import Judge, create_judge, skip_reason
from monitor.judge.citations import CitationReport, check_citations, read_citations
from monitor.judge.model import is_self_judged
from monitor.model import RagRecord

__all__ = [
    "ALL",
    "BASELINE_SCHEMA_VERSION",
    "GENERATION_METRICS",
    "METRICS",
    "Baseline",
    "BaselineError",
    "Comparison",
    "GateConfig",
    "Hint",
    "MetricChange",
    "Regression",
    "ReplayFailed",
    "ReplayReport",
    "RowMove",
    "RowResult",
    "Unmeasured",
    "aggregate",
    "compare",
    "load_baseline",
    "run_replay",
]

log = logging.getLogger(__name__)

BASELINE_SCHEMA_VERSION = 1
ALL = "all"  # the query_type of the overall group (and of its gauge series)
GENERATION_METRICS = ("faithfulness", "refusal_accuracy", "false_refusal_rate", "citation_precision")
METRICS = RETRIEVAL_METRICS + GENERATION_METRICS
LOWER_IS_BETTER = frozenset(("false_refusal_rate",))

# Diagnosis thresholds: "high" recall with a "low" MRR means the right chunks are there but low.
HINT_HIGH_RECALL = 0.8
HINT_LOW_MRR = 0.6


class ReplayFailed(Exception):
    """The target could not be replayed (bad input: exit 2). `errors` name the rows."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"replay failed: {errors[0] if errors else 'unknown error'}{more}")


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
            f"{self.metric}: the judge failed on {self.failed} of {self.rows} rows "
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
    """The gated generation metrics whose judge failures exceed `gate.max_judge_failure_share`."""
    out = []
    for metric in GENERATION_METRICS:
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

    mode: Literal["threshold", "interval"] = "threshold"

    max_drop: dict[str, float] = Field(default_factory=lambda: {"recall_at_k": 0.05, "faithfulness": 0.03})
    floors: dict[str, float] = Field(default_factory=lambda: {"recall_at_k": 0.85, "faithfulness": 0.9})
    slice_floor: dict[str, float] = Field(default_factory=lambda: {"recall_at_k": 0.75, "faithfulness": 0.75})
    slice_floors: dict[str, dict[str, float]] = Field(default_factory=dict)
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


@dataclass(slots=True)
class RowResult:
    """One replayed row: what came back and how it scored."""

    id: str
    query_type: str
    answerable: bool
    retrieved: list[str]
    answer: str
    retrieval: RetrievalScores | None  # None for unanswerable rows (never scored for recall)
    faithfulness: float | None = None  # None: no claims (a refusal), judge skipped or failed
    refused: bool | None = None  # the answer declines to answer (refuses); None: not judged
    judge_error: str | None = None
    latency_s: float = 0.0
    citations: CitationReport | None = None  # None: the answer cites nothing (or not judged)
    judge_failed: bool = False  # sent to the judge, which failed (not a row skipped as nothing to judge)

    def counts_for(self, metric: str) -> bool:
        """Whether a judgement of this row would give `metric` a value: the rows a judge failure
        leaves `metric` unmeasured on. Rows skipped before judging (nothing to judge) never count."""
        if self.judge_error is not None and not self.judge_failed:
            return False
        if metric == "refusal_accuracy":
            return not self.answerable
        if metric == "false_refusal_rate":
            return self.answerable
        return metric in GENERATION_METRICS

    def value(self, metric: str) -> float | None:
        """This row's contribution to `metric` (None: the row does not count for it)."""
        if metric in RETRIEVAL_METRICS:
            return None if self.retrieval is None else self.retrieval.as_dict()[metric]
        if metric == "faithfulness":
            return self.faithfulness
        if metric == "citation_precision":
            return None if self.citations is None else self.citations.precision
        if self.refused is None:
            return None
        if metric == "refusal_accuracy":
            return None if self.answerable else float(self.refused)
        if metric == "false_refusal_rate":
            return float(self.refused) if self.answerable else None
        raise KeyError(metric)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "query_type": self.query_type,
            "answerable": self.answerable,
            "retrieved": self.retrieved,
            "answer": self.answer,
            **{m: self.value(m) for m in METRICS},
            "refused": self.refused,
            "citations": None
            if self.citations is None
            else {"count": len(self.citations.citations), **self.citations.counts()},
            "judge_error": self.judge_error,
            "latency_s": round(self.latency_s, 4),
        }


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _groups(rows: Sequence[RowResult]) -> dict[str, list[RowResult]]:
    groups: dict[str, list[RowResult]] = {ALL: list(rows)}
    for r in rows:
        groups.setdefault(r.query_type, []).append(r)
    return groups


def aggregate(rows: Sequence[RowResult]) -> dict[str, dict[str, Any]]:
    """Macro-averages per query type and overall (`ALL`): every row weighs the same."""
    out: dict[str, dict[str, Any]] = {}
    for name, members in _groups(rows).items():
        stats: dict[str, Any] = {
            "rows": len(members),
            "answerable": sum(r.answerable for r in members),
            "unanswerable": sum(not r.answerable for r in members),
            "judged_claims": sum(r.faithfulness is not None for r in members),
            "judge_errors": sum(r.judge_error is not None for r in members),
            "cited_rows": sum(r.citations is not None for r in members),
        }
        for m in METRICS:
            stats[m] = _mean([r.value(m) for r in members])
        out[name] = stats
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != ALL, kv[0])))


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
            drop = _worse(self.metric, self.value, self.reference)
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


@dataclass(frozen=True, slots=True)
class Hint:
    query_type: str
    area: Literal["ranking", "retrieval", "generation", "refusal"]
    message: str

    def to_json_dict(self) -> dict[str, str]:
        return {"query_type": self.query_type, "area": self.area, "message": self.message}


@dataclass(slots=True)
class ReplayReport:
    """Everything one run measured; `to_json_dict()` is the `--report` file."""

    k: int
    rows: list[RowResult]
    metrics: dict[str, dict[str, Any]]
    regressions: list[Regression]
    hints: list[Hint]
    warnings: list[str]
    config: dict[str, Any]
    golden_sha256: str
    golden_path: str
    started_at: float
    duration_s: float
    baseline_path: str | None = None
    baseline_sha256: str | None = None
    # group -> metric -> interval of the metric (None: intervals off, or too few rows)
    intervals: dict[str, dict[str, Interval | None]] = field(default_factory=dict)
    interval_config: IntervalConfig = field(default_factory=IntervalConfig)
    comparison: Comparison | None = None
    # Over a threshold but not failing: `--gate interval` and the interval includes no change.
    waived: list[Regression] = field(default_factory=list)
    judge_cost: dict[str, Any] | None = None  # the CLI's estimate and actual, for LLM judges
    baselines: Baselines | None = None  # oracle / no-context, when asked for
    change: Change | None = None  # what triggered this run out of schedule
    # {generator_model, judge_model, self_judged}; None: the generator model is not known
    self_evaluation: dict[str, Any] | None = None
    # Gated metrics the judge failed on too often: the run could not measure them (exit 2).
    unmeasured: list[Unmeasured] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.regressions and not self.unmeasured

    @property
    def status(self) -> Literal["pass", "regression", "unmeasured"]:
        if self.unmeasured:
            return "unmeasured"
        return "regression" if self.regressions else "pass"

    @property
    def exit_code(self) -> int:
        """0 pass, 1 regression, 2 could not measure (a regression found too is in the report)."""
        return {"pass": 0, "regression": 1, "unmeasured": 2}[self.status]

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "schema_version": BASELINE_SCHEMA_VERSION,
            "kind": "rag-monitor-golden-report",
            "status": self.status,
            "started_at": datetime.fromtimestamp(self.started_at, UTC).isoformat(),
            "duration_seconds": round(self.duration_s, 3),
            "golden": {"path": self.golden_path, "sha256": self.golden_sha256, "rows": len(self.rows)},
            "baseline": (
                {"path": self.baseline_path, "golden_sha256": self.baseline_sha256}
                if self.baseline_path is not None
                else None
            ),
            "config": self.config,
            "metrics": self.metrics,
            "intervals": self._intervals_json(),
            "comparison": self.comparison.to_json_dict() if self.comparison else None,
            "regressions": [r.to_json_dict() for r in self.regressions],
            "unmeasured": [u.to_json_dict() for u in self.unmeasured],
            "waived": [r.to_json_dict() for r in self.waived],
            "judge_cost": self.judge_cost,
            "change": self.change.to_json_dict() if self.change else None,
            "baselines": self.baselines.to_json_dict() if self.baselines else None,
            "self_evaluation": self.self_evaluation,
            "hints": [h.to_json_dict() for h in self.hints],
            "warnings": self.warnings,
            "rows": [r.to_json_dict() for r in self.rows],
        }

    def baseline(self) -> dict[str, Any]:
        """The versioned baseline a later run compares with."""
        return {
            "schema_version": BASELINE_SCHEMA_VERSION,
            "kind": "rag-monitor-golden-baseline",
            "created_at": datetime.fromtimestamp(self.started_at, UTC).isoformat(),
            "golden": {"path": self.golden_path, "sha256": self.golden_sha256, "rows": len(self.rows)},
            "config": self.config,
            "metrics": self.metrics,
            "intervals": self._intervals_json(),
            "rows": {r.id: r.to_json_dict() for r in self.rows},
        }

    def _intervals_json(self) -> dict[str, Any]:
        """Additive to schema 1: readers of older reports and baselines ignore it."""
        return {
            **self.interval_config.model_dump(),
            "metrics": {
                group: {m: iv.to_json() if iv else None for m, iv in per.items()}
                for group, per in self.intervals.items()
            },
        }


# -- the gate -------------------------------------------------------------------------------------


def _worse(metric: str, now: float, before: float) -> float:
    """How much worse `now` is than `before` (positive = worse), whatever the metric's direction."""
    return now - before if metric in LOWER_IS_BETTER else before - now


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
            if now is not None and before is not None and _worse(metric, now, before) > 1e-9:
                moved.append((-_worse(metric, now, before), RowMove(r.id, r.query_type, before, now)))
    if not moved:
        perfect = 0.0 if metric in LOWER_IS_BETTER else 1.0
        for r in members:
            now = r.value(metric)
            if now is not None and _worse(metric, now, perfect) > 1e-9:
                before = baseline.row_value(r.id, metric) if baseline else None
                moved.append((-_worse(metric, now, perfect), RowMove(r.id, r.query_type, before, now)))
    moved.sort(key=lambda t: (t[0], t[1].id))
    return tuple(m for _, m in moved[:limit])


def metric_intervals(rows: Sequence[RowResult], cfg: IntervalConfig) -> dict[str, dict[str, Interval | None]]:
    """Bootstrap interval of every metric, overall and per query type (keys as `aggregate`'s)."""
    out = {}
    for group, members in _groups(rows).items():
        values = {r.id: {m: r.value(m) for m in METRICS} for r in members}
        out[group] = mean_intervals(values, METRICS, cfg, group)
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != ALL, kv[0])))


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
    for group, members in _groups(common).items():
        after = {r.id: {m: r.value(m) for m in METRICS} for r in members}
        before = {r.id: {m: baseline.row_value(r.id, m) for m in METRICS} for r in members}
        intervals = drop_intervals(before, after, METRICS, cfg, group, LOWER_IS_BETTER)
        for m in METRICS:
            b = _mean([before[i][m] for i in before])
            a = _mean([after[i][m] for i in after])
            drop = None if a is None or b is None else _worse(m, a, b)
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


def diagnose(
    metrics: Mapping[str, Mapping[str, Any]], gate: GateConfig, baseline: Baseline | None
) -> list[Hint]:
    """Which half of the pipeline to open, from the shape of the numbers (overall and per slice)."""
    hints: list[Hint] = []
    recall_floor = gate.floors.get("recall_at_k", 0.85)
    faith_floor = gate.floors.get("faithfulness", 0.9)
    for group, s in metrics.items():
        scope = "overall" if group == ALL else group
        recall, mrr, faith = s.get("recall_at_k"), s.get("mrr"), s.get("faithfulness")
        refusal = s.get("refusal_accuracy")
        if recall is not None and recall < recall_floor:
            hints.append(
                Hint(
                    group,
                    "retrieval",
                    f"{scope}: low recall@k ({recall:.2f}): the relevant chunks are not retrieved — "
                    "look at chunking, the embedding model / index, or raise k",
                )
            )
        elif recall is not None and mrr is not None and recall >= HINT_HIGH_RECALL and mrr < HINT_LOW_MRR:
            hints.append(
                Hint(
                    group,
                    "ranking",
                    f"{scope}: recall@k {recall:.2f} but MRR {mrr:.2f}: relevant chunks are found but ranked "
                    "low — look at the ranking (a reranker helps)",
                )
            )
        elif (
            baseline is not None
            and mrr is not None
            and (before := baseline.metric(group, "mrr")) is not None
            and before - mrr > 0.05
            and recall is not None
            and (rb := baseline.metric(group, "recall_at_k")) is not None
            and rb - recall <= 0.02
        ):
            hints.append(
                Hint(
                    group,
                    "ranking",
                    f"{scope}: MRR fell {before:.2f} → {mrr:.2f} with recall stable: the ranking changed "
                    "(reranker, scoring, fusion weights)",
                )
            )
        if faith is not None and faith < faith_floor and (recall is None or recall >= recall_floor):
            hints.append(
                Hint(
                    group,
                    "generation",
                    f"{scope}: retrieval is good but faithfulness is {faith:.2f}: answers say things the "
                    "chunks do not — look at the generator / prompt",
                )
            )
        if refusal is not None and refusal < 0.8:
            hints.append(
                Hint(
                    group,
                    "refusal",
                    f"{scope}: refusal accuracy {refusal:.2f}: unanswerable questions get answers — look at "
                    "the refusal threshold / the prompt's instruction to say it does not know",
                )
            )
    return hints


# -- the replay -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _State:
    failures: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Asked:
    """A row the target answered, and the record the judge will be given (None: not judged)."""

    result: RowResult | ModeRow
    record: RagRecord | None


async def _ask_row(
    row: GoldenRow,
    target: Target,
    k: int,
    slots: asyncio.Semaphore,
    state: _State,
    generator_model: str | None = None,
) -> _Asked | None:
    async with slots:
        if state.failures:  # fail fast: the run is lost, do not keep the target busy
            return None
        t0 = time.perf_counter()
        try:
            resp = await target.ask(row_id=row.id, query=row.query, query_type=row.query_type, k=k)
        except TargetError as exc:
            state.failures.append(str(exc))
            return None
        latency = time.perf_counter() - t0
    retrieved = [c.id for c in resp.chunks]
    scores = score_ranking(retrieved, row.relevance(), k) if row.answerable else None
    result = RowResult(
        row.id, row.query_type, row.answerable, retrieved, resp.answer, scores, latency_s=latency
    )
    trace_id, span_id = replay_ids(row.id)
    record = RagRecord(
        trace_id,
        span_id,
        REPLAY_SERVICE,
        row.query,
        row.query_type,
        list(resp.chunks),
        resp.answer,
        model=generator_model,
        replay=True,
    )
    skipped = skip_reason(record)
    if skipped is not None:
        result.judge_error = f"skipped: {skipped}"
        return _Asked(result, None)
    return _Asked(result, record)


async def _judge_row(asked: _Asked, judge: Judge, slots: asyncio.Semaphore) -> None:
    result, record = asked.result, asked.record
    if record is None:
        return
    async with slots:
        try:
            # Without its citation markers, as the judge stage judges (`read_citations`).
            judged, cited = read_citations(record)
            judgement = await judge.judge(judged)
        except Exception as exc:  # a judge is not supposed to raise; one bad row must not end the run
            result.judge_error = f"{exc.__class__.__name__}: {exc}"
            if isinstance(result, RowResult):
                result.judge_failed = True
            return
    if judgement.error is not None:
        result.judge_error = judgement.error
        if isinstance(result, RowResult):
            result.judge_failed = True
    else:
        result.faithfulness = judgement.faithfulness
        result.refused = judgement.refuses  # no answer given; a hedged answer is an answer
        if isinstance(result, RowResult):
            result.citations = check_citations(record.chunks, cited, judgement)


@dataclass(frozen=True, slots=True)
class _Scored:
    metrics: dict[str, dict[str, Any]]
    intervals: dict[str, dict[str, Interval | None]]
    comparison: Comparison | None
    findings: list[Regression]
    baselines: Baselines | None


def _score(
    rows: Sequence[RowResult],
    gate: GateConfig,
    baseline: Baseline | None,
    cfg: IntervalConfig,
    modes: Mapping[BaselineMode, ModeResult],
    references: Mapping[str, str],
) -> _Scored:
    """Aggregates, intervals, the paired comparison and the findings: CPU only (≈ 0.1–0.5 s of
    bootstrap), run in a thread so that a sidecar's event loop keeps going meanwhile."""
    metrics = aggregate(rows)
    intervals = metric_intervals(rows, cfg)
    comparison = compare(rows, baseline, gate, cfg) if baseline is not None else None
    findings = find_regressions(rows, metrics, gate, baseline, intervals, comparison)
    side = None
    if modes:
        normal = [
            ModeRow(
                r.id,
                r.query_type,
                r.answerable,
                r.answer,
                r.retrieved,
                match_reference(r.answer, references[r.id]) if r.answerable else None,
                r.faithfulness,
                r.refused,
                r.judge_error,
            )
            for r in rows
        ]
        side = score_baselines(normal, modes, cfg)
    return _Scored(metrics, intervals, comparison, findings, side)


async def run_replay(
    rows: Sequence[GoldenRow],
    target: Target | str,
    *,
    k: int = 5,
    judge: Judge | str | None = None,
    concurrency: int = 8,
    baseline: Baseline | None = None,
    gate: GateConfig | None = None,
    intervals: IntervalConfig | None = None,
    golden_sha256: str = "",
    golden_path: str = "",
    gauges: GoldenGauges | None = None,
    config: Mapping[str, Any] | None = None,
    approve_judging: Callable[[Sequence[RagRecord]], None] | None = None,
    baselines: Sequence[BaselineMode] = (),
    change: Change | None = None,
    generator_model: str | None = None,
) -> ReplayReport:
    """Replay `rows` against `target`, score, gate. Raises ReplayFailed / BaselineError (bad input).

    `target` and `judge` given as objects are not closed (the caller owns them); given by name they
    are made and closed here. `gauges` (a `GoldenGauges`) is updated only after a complete run, so
    `ragmon_golden_last_run_timestamp_seconds` going stale is what a failing schedule looks like.
    `approve_judging` is called with the records about to be judged, after the target answered
    every row and before the first judge request; whatever it raises ends the run, nothing judged.
    `baselines` ("oracle", "no_context") replays the rows again with the given context; their
    judgements are in what `approve_judging` sees. A baseline the target cannot serve is reported
    as not measured and never fails the run. `generator_model`: the model that wrote the target's
    answers, when known (the report notes a judge of the same model: `self_evaluation`).
    """
    if k < 1 or concurrency < 1:
        raise ValueError("k and concurrency must be >= 1")
    if not rows:
        raise ReplayFailed(["no golden rows"])
    gate = gate or GateConfig()
    interval_cfg = intervals or IntervalConfig()
    warnings: list[str] = []
    if baseline is not None:
        if baseline.k != k:
            raise BaselineError(f"baseline {baseline.path} was made with k={baseline.k}, this run uses k={k}")
        if golden_sha256 and baseline.sha256 != golden_sha256:
            warnings.append(
                f"the baseline was made from another golden file (sha256 {baseline.sha256[:12]}…, now "
                f"{golden_sha256[:12]}…): rows are compared by id"
            )
    own_target = isinstance(target, str)
    tgt = make_target(target, concurrency=concurrency) if isinstance(target, str) else target
    own_judge = judge is None or isinstance(judge, str)
    jdg = create_judge(judge or "lexical") if judge is None or isinstance(judge, str) else judge
    started, t0 = time.time(), time.perf_counter()
    state = _State()
    try:
        http_slots, judge_slots = asyncio.Semaphore(concurrency), asyncio.Semaphore(concurrency)
        asked = await asyncio.gather(*(_ask_row(r, tgt, k, http_slots, state, generator_model) for r in rows))
        if state.failures:
            raise ReplayFailed(state.failures)
        done = [a for a in asked if a is not None]
        wanted = list(dict.fromkeys(baselines))
        answered = await asyncio.gather(*(ask_mode(rows, tgt, k, m, http_slots) for m in wanted))
        modes: dict[BaselineMode, ModeResult] = dict(zip(wanted, answered, strict=True))
        extra = [
            _Asked(row, record)
            for res in modes.values()
            for row, record in zip(res.rows, res.records, strict=True)
        ]
        if approve_judging is not None:
            approve_judging([a.record for a in (*done, *extra) if a.record is not None])
        await asyncio.gather(*(_judge_row(a, jdg, judge_slots) for a in (*done, *extra)))
    finally:
        if own_target:
            await tgt.aclose()
        if own_judge:
            await jdg.aclose()
    results = [a.result for a in done if isinstance(a.result, RowResult)]
    references = {r.id: r.reference_answer for r in rows}
    scored = await asyncio.to_thread(_score, results, gate, baseline, interval_cfg, modes, references)
    regressions, waived = split_by_gate(scored.findings, gate)
    metrics = scored.metrics
    unmeasured = find_unmeasured(results, gate)
    for u in unmeasured:
        log.info("golden replay could not measure %s", u.description)
    judge_errors = metrics[ALL]["judge_errors"]
    if judge_errors:
        warnings.append(
            f"{judge_errors} rows not judged (judge error or nothing to judge): see rows[].judge_error"
        )
    for mode, res in modes.items():
        name = mode.replace("_", "-")
        if not res.measured:
            warnings.append(f"{name} baseline not measured: {res.reason}")
        elif res.left_out:
            warnings.append(
                f"{name} baseline: {len(res.left_out)} answerable rows left out, their golden rows give "
                "no text for every relevant chunk (relevant_chunks)"
            )
    self_evaluation = None
    if generator_model:
        self_judged = is_self_judged(generator_model, jdg.name, jdg.model)
        self_evaluation = {
            "generator_model": generator_model,
            "judge_model": jdg.model,
            "self_judged": self_judged,
        }
        if self_judged:
            text = (
                f"self-evaluation: the judge model {jdg.model!r} generated the answers "
                f"({generator_model!r}); a model grading itself is biased — judge with another model family"
            )
            # The report and the terminal carry it; the log gets it once from the production
            # judge stage's guard, not again at every scheduled replay.
            log.info("golden replay: %s", text)
            warnings.append(text)
    comparison = scored.comparison
    if comparison is not None and (comparison.added or comparison.removed):
        warnings.append(
            f"compared with the baseline on the {comparison.rows_compared} rows present in both: "
            f"{len(comparison.added)} added and {len(comparison.removed)} removed rows are not in any "
            "drop (see comparison.rows_added / rows_removed)"
        )
    report = ReplayReport(
        k=k,
        rows=results,
        metrics=metrics,
        regressions=regressions,
        hints=diagnose(metrics, gate, baseline),
        warnings=warnings,
        config={
            "k": k,
            "target": tgt.description,
            "judge": {"backend": jdg.name, "model": jdg.model},
            "concurrency": concurrency,
            "gate": gate.model_dump(),
            "baselines": list(modes),
            **(config or {}),
        },
        golden_sha256=golden_sha256,
        golden_path=golden_path,
        started_at=started,
        duration_s=time.perf_counter() - t0,
        baseline_path=baseline.path if baseline else None,
        baseline_sha256=baseline.sha256 if baseline else None,
        intervals=scored.intervals,
        interval_config=interval_cfg,
        comparison=comparison,
        waived=waived,
        baselines=scored.baselines,
        change=change,
        self_evaluation=self_evaluation,
        unmeasured=unmeasured,
    )
    if gauges is not None:
        gauges.publish(report)
    return report
