"""What a golden replay measures, row by row: the metric names (retrieval's, `monitor.golden.
retrieval`; generation's: faithfulness, refusal accuracy, false refusals, citation precision), one
replayed row's scores (`RowResult`), and over rows their macro-averages (`aggregate`) and bootstrap
intervals (`metric_intervals`, `intervals`), overall (`ALL`) and per query type.

Citations: when the target's answers cite their chunks (``[1]``, ``[doc-3]``), each citation is
checked against the judge's claims (`monitor.judge.citations`) and `citation_precision` (per row:
supported / checked citations; aggregated like faithfulness, a macro-average over the rows that
have one) is a generation metric with its interval; a run whose answers cite nothing has none (the
terminal shows "–").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from monitor.golden.intervals import Interval, IntervalConfig, mean_intervals
from monitor.golden.retrieval import RETRIEVAL_METRICS, RetrievalScores

if TYPE_CHECKING:
    from monitor.judge.citations import CitationReport

__all__ = [
    "ALL",
    "GENERATION_METRICS",
    "LOWER_IS_BETTER",
    "METRICS",
    "RowResult",
    "aggregate",
    "by_query_type",
    "mean",
    "metric_intervals",
    "worse",
]


ALL = "all"  # the query_type of the overall group (and of its gauge series)
GENERATION_METRICS = ("faithfulness", "refusal_accuracy", "false_refusal_rate", "citation_precision")
METRICS = RETRIEVAL_METRICS + GENERATION_METRICS
LOWER_IS_BETTER = frozenset(("false_refusal_rate",))


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


def mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def by_query_type(rows: Sequence[RowResult]) -> dict[str, list[RowResult]]:
    groups: dict[str, list[RowResult]] = {ALL: list(rows)}
    for r in rows:
        groups.setdefault(r.query_type, []).append(r)
    return groups


def aggregate(rows: Sequence[RowResult]) -> dict[str, dict[str, Any]]:
    """Macro-averages per query type and overall (`ALL`): every row weighs the same."""
    out: dict[str, dict[str, Any]] = {}
    for name, members in by_query_type(rows).items():
        stats: dict[str, Any] = {
            "rows": len(members),
            "answerable": sum(r.answerable for r in members),
            "unanswerable": sum(not r.answerable for r in members),
            "judged_claims": sum(r.faithfulness is not None for r in members),
            "judge_errors": sum(r.judge_error is not None for r in members),
            "cited_rows": sum(r.citations is not None for r in members),
        }
        for m in METRICS:
            stats[m] = mean([r.value(m) for r in members])
        out[name] = stats
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != ALL, kv[0])))


def worse(metric: str, now: float, before: float) -> float:
    """How much worse `now` is than `before` (positive = worse), whatever the metric's direction."""
    return now - before if metric in LOWER_IS_BETTER else before - now


def metric_intervals(rows: Sequence[RowResult], cfg: IntervalConfig) -> dict[str, dict[str, Interval | None]]:
    """Bootstrap interval of every metric, overall and per query type (keys as `aggregate`'s)."""
    out = {}
    for group, members in by_query_type(rows).items():
        values = {r.id: {m: r.value(m) for m in METRICS} for r in members}
        out[group] = mean_intervals(values, METRICS, cfg, group)
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != ALL, kv[0])))
