"""The report of one golden replay (`ReplayReport`: the `--report` file, and the baseline a later
run compares with) and its assembly from the scored rows (`build_report`): aggregates, intervals,
the comparison with a baseline and the gate, warnings, and hints saying which half of the pipeline
to open when something regressed (`diagnose`), among them the two the evaluation practice names:
the oracle gap (with `--baselines oracle`: the oracle's correctness, else faithfulness, minus this
run's) under `ORACLE_GAP_GENERATOR` says the generator is what falls short, over
`ORACLE_GAP_RETRIEVAL` that retrieval is; and answers faithful to their chunks yet not relevant to
the question point at retrieval. Rows tagged with a `difficulty` get their metrics per tag
(`by_difficulty`), reported, never gated.

Self-evaluation: when the judge model is the model that generated the answers (`generator_model`:
the target's answers name no model, the sidecar passes the one production spans showed), the report
says so (`self_evaluation`, a warning). `baselines` holds the oracle and no-context replays of the
same rows, reported beside the normal one, never gated; `change` the event that triggered the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from monitor.golden.baselines import (
    MATCH_SHARE,
    BaselineMode,
    Baselines,
    ModeResult,
    ModeRow,
    score_baselines,
)
from monitor.golden.change import Change
from monitor.golden.comparison import (
    BASELINE_SCHEMA_VERSION,
    Baseline,
    Comparison,
    GateConfig,
    Regression,
    Unmeasured,
    compare,
    find_regressions,
    find_unmeasured,
    split_by_gate,
)
from monitor.golden.intervals import Interval, IntervalConfig
from monitor.golden.scores import ALL, RowResult, aggregate, metric_intervals
from monitor.judge import Judge
from monitor.judge.model import is_self_judged
from monitor.plumbing.errors import plural

__all__ = ["CORRECTNESS_METHOD", "Hint", "ReplayReport", "build_report", "diagnose"]

log = logging.getLogger(__name__)


# Diagnosis thresholds: "high" recall with a "low" MRR means the right chunks are there but low.
HINT_HIGH_RECALL = 0.8
HINT_LOW_MRR = 0.6
# The oracle gap (oracle − this run, on correctness or faithfulness): small, perfect retrieval would
# not help, so the generator falls short; large, retrieval costs the answers that much. Said only
# when the run falls short (under HINT_GOOD), and nothing between the two: both halves then.
ORACLE_GAP_GENERATOR = 0.05
ORACLE_GAP_RETRIEVAL = 0.15
HINT_GOOD = 0.9
# Answer relevance (on [0, 1]: a mean rating under "partly relevant") low while faithfulness is high:
# the answers keep to chunks that do not answer the question.
HINT_LOW_ANSWER_RELEVANCE = 0.5

# How `correctness` is measured, in the report (the LLM judges have no reference-answer check yet).
CORRECTNESS_METHOD: Mapping[str, Any] = {
    "method": "answer_match",
    "lexical_stand_in": True,
    "match_share": MATCH_SHARE,
    "note": f"lexical stand-in for an LLM judgement: 1 when the answer holds >= {MATCH_SHARE:.0%} of the "
    "reference answer's key tokens (lower-cased words and numbers, stop words out), else 0; it "
    "misses paraphrases and yes/no verdicts",
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
    # Per difficulty tag (tagged rows only; empty: no row is tagged), as `metrics` / `intervals`.
    by_difficulty: dict[str, dict[str, Any]] = field(default_factory=dict)
    difficulty_intervals: dict[str, dict[str, Interval | None]] = field(default_factory=dict)

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
            "correctness": dict(CORRECTNESS_METHOD),
            "by_difficulty": (
                {
                    "metrics": self.by_difficulty,
                    "intervals": _json_intervals(self.difficulty_intervals),
                }
                if self.by_difficulty
                else None
            ),
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
        return {**self.interval_config.model_dump(), "metrics": _json_intervals(self.intervals)}


def _json_intervals(per: Mapping[str, Mapping[str, Interval | None]]) -> dict[str, Any]:
    return {group: {m: iv.to_json() if iv else None for m, iv in ms.items()} for group, ms in per.items()}


def diagnose(
    metrics: Mapping[str, Mapping[str, Any]],
    gate: GateConfig,
    baseline: Baseline | None,
    side: Baselines | None = None,
) -> list[Hint]:
    """Which half of the pipeline to open, from the shape of the numbers (overall and per slice);
    `side`: the oracle / no-context replays, for the oracle gap."""
    hints: list[Hint] = []
    floors = (gate.floors.get("recall_at_k", 0.85), gate.floors.get("faithfulness", 0.9))
    for group, s in metrics.items():
        scope = "overall" if group == ALL else group
        if (retrieval := _retrieval_hint(group, scope, s, floors[0], baseline)) is not None:
            hints.append(retrieval)
        hints.extend(_generation_hints(group, scope, s, *floors))
        if (gap := _oracle_gap(side, group)) is not None:
            hints.append(gap)
        refusal = s.get("refusal_accuracy")
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


def _retrieval_hint(
    group: str, scope: str, s: Mapping[str, Any], recall_floor: float, baseline: Baseline | None
) -> Hint | None:
    """Low recall (retrieval), or relevant chunks ranked low or ranked lower than before (ranking)."""
    recall, mrr = s.get("recall_at_k"), s.get("mrr")
    if recall is None:
        return None
    if recall < recall_floor:
        return Hint(
            group,
            "retrieval",
            f"{scope}: low recall@k ({recall:.2f}): the relevant chunks are not retrieved — "
            "look at chunking, the embedding model / index, or raise k",
        )
    if mrr is None:
        return None
    if recall >= HINT_HIGH_RECALL and mrr < HINT_LOW_MRR:
        return Hint(
            group,
            "ranking",
            f"{scope}: recall@k {recall:.2f} but MRR {mrr:.2f}: relevant chunks are found but ranked "
            "low — look at the ranking (a reranker helps)",
        )
    before = baseline.metric(group, "mrr") if baseline is not None else None
    recall_before = baseline.metric(group, "recall_at_k") if baseline is not None else None
    if (
        before is not None
        and before - mrr > 0.05
        and recall_before is not None
        and recall_before - recall <= 0.02
    ):
        return Hint(
            group,
            "ranking",
            f"{scope}: MRR fell {before:.2f} → {mrr:.2f} with recall stable: the ranking changed "
            "(reranker, scoring, fusion weights)",
        )
    return None


def _generation_hints(
    group: str, scope: str, s: Mapping[str, Any], recall_floor: float, faith_floor: float
) -> list[Hint]:
    """Unfaithful answers on good retrieval (generation); faithful answers that do not answer the
    question (retrieval: the chunks do not hold the answer)."""
    out = []
    recall, faith, relevance = s.get("recall_at_k"), s.get("faithfulness"), s.get("answer_relevance")
    if faith is not None and faith < faith_floor and (recall is None or recall >= recall_floor):
        out.append(
            Hint(
                group,
                "generation",
                f"{scope}: retrieval is good but faithfulness is {faith:.2f}: answers say things the "
                "chunks do not — look at the generator / prompt",
            )
        )
    if (
        relevance is not None
        and relevance < HINT_LOW_ANSWER_RELEVANCE
        and faith is not None
        and faith >= faith_floor
    ):
        out.append(
            Hint(
                group,
                "retrieval",
                f"{scope}: answers are faithful to their chunks ({faith:.2f}) but not relevant to the "
                f"question (answer relevance {relevance:.2f}): the chunks do not answer it — look at "
                "retrieval (query handling, the embedding model / index, k)",
            )
        )
    return out


def _oracle_gap(side: Baselines | None, group: str) -> Hint | None:
    """The oracle gap's verdict for `group`: on correctness (answer match) where the rows have a
    reference answer, else on faithfulness. None when the oracle was not measured, this run is
    already good on it, the gap falls between the two thresholds, or its interval reaches past
    the other threshold (a slice of a dozen rows says nothing either way)."""
    if side is None:
        return None
    gaps = side.oracle_gap.get(group, {})
    normal = side.metrics.get("normal", {}).get(group, {})
    for metric, name in (("answer_match", "correctness"), ("faithfulness", "faithfulness")):
        gap, now = gaps.get(metric), normal.get(metric)
        if gap is None or gap.value is None or now is None:
            continue
        if now >= HINT_GOOD:
            return None
        scope = "overall" if group == ALL else group
        iv = f" [{gap.interval.low:+.2f}, {gap.interval.high:+.2f}]" if gap.interval else ""
        head = f"{scope}: {name} {now:.2f}, oracle gap {gap.value:+.3f}{iv}"
        iv_low = gap.interval.low if gap.interval else gap.value
        iv_high = gap.interval.high if gap.interval else gap.value
        if gap.value < ORACLE_GAP_GENERATOR and iv_high < ORACLE_GAP_RETRIEVAL:
            return Hint(
                group,
                "generation",
                f"{head} (< {ORACLE_GAP_GENERATOR}): the labelled chunks would not make the answers "
                "better — fix the generator / prompt, not retrieval",
            )
        if gap.value > ORACLE_GAP_RETRIEVAL and iv_low > ORACLE_GAP_GENERATOR:
            return Hint(
                group,
                "retrieval",
                f"{head} (> {ORACLE_GAP_RETRIEVAL}): given the labelled chunks the answers are that much "
                "better — fix retrieval",
            )
        return None
    return None


@dataclass(frozen=True, slots=True)
class _Scored:
    metrics: dict[str, dict[str, Any]]
    intervals: dict[str, dict[str, Interval | None]]
    comparison: Comparison | None
    findings: list[Regression]
    baselines: Baselines | None
    by_difficulty: dict[str, dict[str, Any]]
    difficulty_intervals: dict[str, dict[str, Interval | None]]


def _score(
    rows: Sequence[RowResult],
    gate: GateConfig,
    baseline: Baseline | None,
    cfg: IntervalConfig,
    modes: Mapping[BaselineMode, ModeResult],
) -> _Scored:
    """Aggregates, intervals, the paired comparison, the findings, the oracle / no-context side,
    and the same aggregates and intervals per difficulty tag."""
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
                r.correctness,  # the same answer match as the baselines'
                r.faithfulness,
                r.refused,
                r.judge_error,
            )
            for r in rows
        ]
        side = score_baselines(normal, modes, cfg)
    return _Scored(
        metrics,
        intervals,
        comparison,
        findings,
        side,
        aggregate(rows, difficulty=True),
        metric_intervals(rows, cfg, difficulty=True),
    )


def build_report(
    results: list[RowResult],
    modes: Mapping[BaselineMode, ModeResult],
    *,
    k: int,
    gate: GateConfig,
    baseline: Baseline | None,
    interval_config: IntervalConfig,
    judge: Judge,
    config: dict[str, Any],
    golden_sha256: str,
    golden_path: str,
    started: float,
    t0: float,
    warnings: list[str],
    change: Change | None,
    generator_model: str | None,
) -> ReplayReport:
    """The report of a replay whose rows are answered and judged (`results`; `modes`: the
    oracle / no-context replays): aggregates, intervals, the comparison with
    `baseline` and the gate's findings, hints, and the warnings after those of the run so far
    (`warnings`). CPU only (≈ 0.1–0.5 s of bootstrap): a sidecar runs it in a thread, so that
    its event loop keeps going meanwhile. `t0`: the run's `time.perf_counter()` start."""
    scored = _score(results, gate, baseline, interval_config, modes)
    regressions, waived = split_by_gate(scored.findings, gate)
    metrics = scored.metrics
    unmeasured = find_unmeasured(results, gate)
    for u in unmeasured:
        log.info("golden replay could not measure %s", u.description)
    warnings.extend(_mode_warnings(metrics[ALL]["judge_errors"], modes))
    self_evaluation = _self_evaluation(generator_model, judge, warnings)
    comparison = scored.comparison
    warnings.extend(_comparison_warnings(comparison))
    return ReplayReport(
        k=k,
        rows=results,
        metrics=metrics,
        regressions=regressions,
        hints=diagnose(metrics, gate, baseline, scored.baselines),
        warnings=warnings,
        config=config,
        golden_sha256=golden_sha256,
        golden_path=golden_path,
        started_at=started,
        duration_s=time.perf_counter() - t0,
        baseline_path=baseline.path if baseline else None,
        baseline_sha256=baseline.sha256 if baseline else None,
        intervals=scored.intervals,
        interval_config=interval_config,
        comparison=comparison,
        waived=waived,
        baselines=scored.baselines,
        change=change,
        self_evaluation=self_evaluation,
        unmeasured=unmeasured,
        by_difficulty=scored.by_difficulty,
        difficulty_intervals=scored.difficulty_intervals,
    )


def _comparison_warnings(comparison: Comparison | None) -> list[str]:
    """Rows the baseline and this run do not share: compared by id, they are in no drop."""
    if comparison is None or not (comparison.added or comparison.removed):
        return []
    return [
        f"compared with the baseline on the {comparison.rows_compared} rows present in both: "
        f"{len(comparison.added)} added and {len(comparison.removed)} removed rows are not in any "
        "drop (see comparison.rows_added / rows_removed)"
    ]


def _mode_warnings(judge_errors: int, modes: Mapping[BaselineMode, ModeResult]) -> list[str]:
    """Rows the judge left unjudged; baseline modes not measured, or measured on fewer rows."""
    out = []
    if judge_errors:
        out.append(
            f"{plural(judge_errors, 'row')} not judged (judge error or nothing to judge):"
            " see rows[].judge_error"
        )
    for mode, res in modes.items():
        name = mode.replace("_", "-")
        if not res.measured:
            out.append(f"{name} baseline not measured: {res.reason}")
        elif res.left_out:
            out.append(
                f"{name} baseline: {len(res.left_out)} answerable rows left out, their golden rows give "
                "no text for every relevant chunk (relevant_chunks)"
            )
    return out


def _self_evaluation(generator_model: str | None, judge: Judge, warnings: list[str]) -> dict[str, Any] | None:
    """Whether the judge grades its own model's answers (None: the generator is not known); a
    warning in `warnings` when it does."""
    if not generator_model:
        return None
    self_judged = is_self_judged(generator_model, judge.name, judge.model)
    if self_judged:
        text = (
            f"self-evaluation: the judge model {judge.model!r} generated the answers "
            f"({generator_model!r}); a model grading itself is biased — judge with another model family"
        )
        # The report and the terminal carry it; the log gets it once from the production
        # judge stage's guard, not again at every scheduled replay.
        log.info("golden replay: %s", text)
        warnings.append(text)
    return {"generator_model": generator_model, "judge_model": judge.model, "self_judged": self_judged}
