"""What a golden replay measures, row by row: the metric names (retrieval's, `monitor.golden.
retrieval`; generation's: faithfulness, refusal accuracy, false refusals, citation precision), one
replayed row's scores (`RowResult`), and over rows their macro-averages (`aggregate`) and bootstrap
intervals (`metric_intervals`, `intervals`), overall (`ALL`) and per query type.

Citations: when the target's answers cite their chunks (``[1]``, ``[doc-3]``), each citation is
checked against the judge's claims (`monitor.judge.citations`) and `citation_precision` (per row:
supported / checked citations; aggregated like faithfulness, a macro-average over the rows that
have one) is a generation metric with its interval; a run whose answers cite nothing has none (the
terminal shows "–").

Relevance and correctness (answerable rows only: an unanswerable row expects a refusal, which
refusal accuracy scores): `answer_relevance` and `context_relevance` are the judge's 1-3 ratings
(`monitor.contracts.model.Judgement`; context relevance is the mean over the shown chunks) mapped onto [0, 1]
as (rating − 1) / 2, so that they average, bootstrap and export like every other golden ratio;
None when the judge gives none (the lexical judge rates no chunks). `correctness` is the answer
against the row's `reference_answer`: no judge here can be asked that yet, so it is the lexical
stand-in the baselines use (`baselines.match_reference`: 1 when the answer holds ≥ 80 % of the
reference's key tokens), said so in the report (`correctness`). It needs no judge, so a judge failure
never leaves it unmeasured. Rows may carry a `difficulty` tag; `by_difficulty` groups them as
`by_query_type` groups query types.
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
    "JUDGED_METRICS",
    "LOWER_IS_BETTER",
    "METRICS",
    "RELEVANCE_METRICS",
    "RowResult",
    "aggregate",
    "by_difficulty",
    "by_query_type",
    "mean",
    "metric_intervals",
    "rating_ratio",
    "worse",
]


ALL = "all"  # the query_type of the overall group (and of its gauge series)
GENERATION_METRICS = ("faithfulness", "refusal_accuracy", "false_refusal_rate", "citation_precision")
# The judge's ratings of the answer and of the chunks, and the answer against the reference.
RELEVANCE_METRICS = ("answer_relevance", "context_relevance", "correctness")
METRICS = RETRIEVAL_METRICS + GENERATION_METRICS + RELEVANCE_METRICS
# What a judge failure leaves unmeasured (correctness is lexical: no judge in it).
JUDGED_METRICS = (*GENERATION_METRICS, "answer_relevance", "context_relevance")
LOWER_IS_BETTER = frozenset(("false_refusal_rate",))
_ANSWERABLE_ONLY = frozenset(("false_refusal_rate", *RELEVANCE_METRICS))


def rating_ratio(rating: float | None) -> float | None:
    """A judge's 1-3 rating on [0, 1] (1 → 0, 2 → 0.5, 3 → 1); None stays None."""
    return None if rating is None else min(1.0, max(0.0, (float(rating) - 1.0) / 2.0))


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
    answer_relevance: float | None = None  # the judge's rating on [0, 1] (`rating_ratio`)
    context_relevance: float | None = None  # mean chunk rating on [0, 1]; None: no ratings
    correctness: float | None = None  # answer match against the reference (answerable rows)
    difficulty: str | None = None  # the golden row's optional tag (easy, hard, adversarial)
    # Why the judge could not decide the row's faithfulness (a `monitor.contracts.model.Undecided` value);
    # None: decided, or nothing to decide (a refusal, not judged). An undecided row has no
    # faithfulness: it is out of the mean and its interval, and counted in `decided_share`.
    undecided: str | None = None

    def counts_for(self, metric: str) -> bool:
        """Whether a judgement of this row would give `metric` a value: the rows a judge failure
        leaves `metric` unmeasured on. Rows skipped before judging (nothing to judge) never count."""
        if self.judge_error is not None and not self.judge_failed:
            return False
        if metric not in JUDGED_METRICS:
            return False
        if metric == "refusal_accuracy":
            return not self.answerable
        return self.answerable if metric in _ANSWERABLE_ONLY else True

    def value(self, metric: str) -> float | None:
        """This row's contribution to `metric` (None: the row does not count for it)."""
        if metric in RETRIEVAL_METRICS:
            return None if self.retrieval is None else self.retrieval.as_dict()[metric]
        if metric == "faithfulness":
            return self.faithfulness
        if metric == "citation_precision":
            return None if self.citations is None else self.citations.precision
        if metric in RELEVANCE_METRICS:
            if not self.answerable:
                return None
            if metric == "answer_relevance":
                return self.answer_relevance
            return self.context_relevance if metric == "context_relevance" else self.correctness
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
            **({"difficulty": self.difficulty} if self.difficulty is not None else {}),
            "answerable": self.answerable,
            "retrieved": self.retrieved,
            "answer": self.answer,
            **{m: self.value(m) for m in METRICS},
            "refused": self.refused,
            "citations": None
            if self.citations is None
            else {"count": len(self.citations.citations), **self.citations.counts()},
            "undecided": self.undecided,
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


def by_difficulty(rows: Sequence[RowResult]) -> dict[str, list[RowResult]]:
    """Tagged rows per difficulty (untagged rows are in no group); empty when no row is tagged."""
    groups: dict[str, list[RowResult]] = {}
    for r in rows:
        if r.difficulty is not None:
            groups.setdefault(r.difficulty, []).append(r)
    return dict(sorted(groups.items()))


def aggregate(rows: Sequence[RowResult], *, difficulty: bool = False) -> dict[str, dict[str, Any]]:
    """Macro-averages per query type and overall (`ALL`): every row weighs the same. With
    `difficulty`, per difficulty tag instead (tagged rows only, no overall)."""
    out: dict[str, dict[str, Any]] = {}
    groups = by_difficulty(rows) if difficulty else by_query_type(rows)
    for name, members in groups.items():
        stats: dict[str, Any] = {
            "rows": len(members),
            "answerable": sum(r.answerable for r in members),
            "unanswerable": sum(not r.answerable for r in members),
            "judged_claims": sum(r.faithfulness is not None for r in members),
            "undecided": sum(r.undecided is not None for r in members),
            "judge_errors": sum(r.judge_error is not None for r in members),
            "cited_rows": sum(r.citations is not None for r in members),
        }
        # Faithfulness rests on the decided rows only: its share of the rows the judge had to decide.
        to_decide = stats["judged_claims"] + stats["undecided"]
        stats["decided_share"] = stats["judged_claims"] / to_decide if to_decide else None
        for m in METRICS:
            stats[m] = mean([r.value(m) for r in members])
        out[name] = stats
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != ALL, kv[0])))


def worse(metric: str, now: float, before: float) -> float:
    """How much worse `now` is than `before` (positive = worse), whatever the metric's direction."""
    return now - before if metric in LOWER_IS_BETTER else before - now


def metric_intervals(
    rows: Sequence[RowResult], cfg: IntervalConfig, *, difficulty: bool = False
) -> dict[str, dict[str, Interval | None]]:
    """Bootstrap interval of every metric, overall and per query type, or per difficulty tag
    (keys as `aggregate`'s)."""
    out = {}
    groups = by_difficulty(rows) if difficulty else by_query_type(rows)
    for group, members in groups.items():
        values = {r.id: {m: r.value(m) for m in METRICS} for r in members}
        # Its own draws: a tag named like a query type does not share them.
        out[group] = mean_intervals(values, METRICS, cfg, f"difficulty/{group}" if difficulty else group)
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != ALL, kv[0])))
