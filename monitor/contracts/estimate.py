"""Windowed, sampling-weighted estimates of faithfulness and hallucination rate, with intervals.

Judged records are a sample drawn with unequal probabilities (priority signals, the per-slice
floor), so a plain average over them is biased towards whatever was oversampled. Each record is
weighted by 1/p (its `sampling_weight`) and the estimates are Hájek ratios, sum(w*y) / sum(w):
unbiased to first order for any inclusion probabilities, and, unlike Horvitz–Thompson, free of the
unknown population size.

- faithfulness: the weighted mean of per-record faithfulness over judged answers that make
  claims (a refusal has no faithfulness and is left out, as in the judge);
- hallucination rate: the weighted share of successfully judged records that are hallucinated
  (the context cannot answer the query and the answer does not admit it) — its prevalence in
  traffic, not the share among unanswerable queries that the two counters give.

Intervals are for the window's records. The rate's is Wilson's with the effective sample size in
place of n; the effective size is the design-based one, p(1-p)/v with v the linearised variance of
the Hájek ratio (Korn & Graubard), because it accounts for weights being correlated with the
outcome — Kish's (sum w)^2/sum w^2 assumes they are not and under-covers under priority sampling
(tests/test_estimate.py shows both) — and Kish's where the rate is 0 or 1 and v is 0.
The mean's is Student's t on the linearised variance; below 30 effective samples it is widened to
also contain the Wilson interval of the mean (valid because a [0, 1] score's variance is at most
m(1-m)), since a few identical scores give a zero variance and would otherwise claim certainty.
A slice with no judged records has no estimate (None), never NaN.

The window slides in `bucket_seconds` steps: sums are kept per (time bucket, query type) and a
snapshot adds up the buckets still inside the window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist
from typing import TypeGuard

from pydantic import BaseModel, ConfigDict, Field, model_validator

from monitor.contracts.model import Judgement

__all__ = [
    "OVERALL",
    "Estimate",
    "EstimatePolicy",
    "SliceEstimate",
    "WeightedSums",
    "WindowEstimator",
    "t_quantile",
    "weighted_mean",
    "weighted_rate",
    "wilson",
]

# The key of the all-query-types estimate in a snapshot (and its `query_type` label value).
OVERALL = "all"
_SMALL_N = 30.0
# 1/p for p down to 1e-9: far below any sampling rate, and its square still far from overflow.
_MAX_WEIGHT = 1e9
_MIN_WEIGHT = 1e-6  # p <= 1 makes weights >= 1; a little below is tolerated, subnormals are not

# The per-answer values y of the estimates exported as sufficient statistics (`metric` label):
# faithfulness, hallucinated 0/1, refused 0/1 (no answer given; a hedged answer is not a refusal),
# false refusal 0/1, answer relevance 1-3, context relevance 1-3 (mean over the record's chunks).
ESTIMATE_METRICS = (
    "faithfulness",
    "hallucination",
    "refusal",
    "false_refusal",
    "relevance",
    "context_relevance",
)


def usable_weight(weight: float) -> bool:
    """A weight is 1/p with p in (0, 1]; NaN, inf or absurd ones would poison every sum."""
    return _MIN_WEIGHT <= weight <= _MAX_WEIGHT


def estimate_values(j: Judgement) -> list[tuple[str, float]]:
    """(metric, y) for each estimate a successful judgement contributes to; a value the judge did
    not give (faithfulness of a refusal, relevance it left out) contributes nothing, never 0."""
    if not j.ok:
        return []
    return verdict_values(
        j.faithfulness,
        j.hallucinated,
        j.refuses,
        j.false_refusal,
        j.answer_relevance,
        context_relevance=j.context_relevance,
    )


def verdict_values(
    faithfulness: object,
    hallucinated: object,
    refusal: object,
    false_refusal: object,
    relevance: object,
    *,
    context_relevance: object = None,
) -> list[tuple[str, float]]:
    """`estimate_values` from the verdict fields, as a results line carries them: anything but a
    finite number (or a bool for the flags) is left out, so a malformed line adds nothing."""
    out: list[tuple[str, float]] = []
    if _number(faithfulness):
        out.append(("faithfulness", min(1.0, max(0.0, float(faithfulness)))))
    for metric, flag in (
        ("hallucination", hallucinated),
        ("refusal", refusal),
        ("false_refusal", false_refusal),
    ):
        if isinstance(flag, bool):
            out.append((metric, 1.0 if flag else 0.0))
    if _number(relevance):
        out.append(("relevance", float(relevance)))
    if _number(context_relevance):
        out.append(("context_relevance", min(3.0, max(1.0, float(context_relevance)))))
    return out


def _number(x: object) -> TypeGuard[float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


class EstimatePolicy(BaseModel):
    """The `estimates` config section."""

    model_config = ConfigDict(extra="forbid")

    window_seconds: float = Field(3600.0, gt=0)
    bucket_seconds: float = Field(60.0, gt=0, description="the window slides in steps of this")
    confidence: float = Field(0.95, gt=0.5, lt=1.0)

    @model_validator(mode="after")
    def _buckets_fit(self) -> EstimatePolicy:
        if self.bucket_seconds > self.window_seconds:
            raise ValueError("bucket_seconds must not exceed window_seconds")
        return self


@dataclass(frozen=True, slots=True)
class Estimate:
    estimate: float
    lower: float
    upper: float
    n: int  # records behind the estimate
    n_eff: float  # effective sample size used for the interval


@dataclass(frozen=True, slots=True)
class SliceEstimate:
    samples: int  # successfully judged records in the window (ragmon_window_samples)
    faithfulness: Estimate | None
    hallucination_rate: Estimate | None


class WeightedSums:
    """Sufficient statistics of a weighted sample of y in [0, 1]: everything the Hájek ratio and
    its linearised variance need, and additive, so buckets can be summed."""

    __slots__ = ("n", "sw", "sw2", "sw2y", "sw2y2", "swy")

    def __init__(self) -> None:
        self.n = 0
        self.sw = 0.0
        self.sw2 = 0.0
        self.swy = 0.0
        self.sw2y = 0.0
        self.sw2y2 = 0.0

    def add(self, w: float, y: float) -> None:
        w2 = w * w
        self.n += 1
        self.sw += w
        self.sw2 += w2
        self.swy += w * y
        self.sw2y += w2 * y
        self.sw2y2 += w2 * y * y

    def merge(self, other: WeightedSums) -> None:
        self.n += other.n
        self.sw += other.sw
        self.sw2 += other.sw2
        self.swy += other.swy
        self.sw2y += other.sw2y
        self.sw2y2 += other.sw2y2

    def mean(self) -> float:
        return min(1.0, max(0.0, self.swy / self.sw))

    def kish_n(self) -> float:
        return self.sw * self.sw / self.sw2

    def variance(self, m: float) -> float:
        """Linearised (with-replacement) variance of the Hájek ratio at m, with the n/(n-1)
        small-sample correction: sum w^2 (y-m)^2 / (sum w)^2."""
        if self.n < 2:
            return 0.0
        ss = self.sw2y2 - 2.0 * m * self.sw2y + m * m * self.sw2
        return max(0.0, ss) / (self.sw * self.sw) * self.n / (self.n - 1)


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson score interval for a proportion p observed on (effective) n trials."""
    if n <= 0:
        return 0.0, 1.0
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = z * math.sqrt(max(0.0, p * (1.0 - p) / n + z2 / (4.0 * n * n))) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def t_quantile(q: float, df: float) -> float:
    """Student's t quantile, standard library only: exact for df 1 and 2, the Cornish–Fisher
    expansion (Abramowitz & Stegun 26.7.5, within 1% for df >= 3) above. Non-integer df is
    rounded down, which only widens the interval."""
    d = max(1, math.floor(df))
    if d == 1:
        return math.tan(math.pi * (q - 0.5))
    if d == 2:
        return (2.0 * q - 1.0) * math.sqrt(2.0 / (4.0 * q * (1.0 - q)))
    z = NormalDist().inv_cdf(q)
    z3, z5, z7, z9 = z**3, z**5, z**7, z**9
    return (
        z
        + (z3 + z) / (4 * d)
        + (5 * z5 + 16 * z3 + 3 * z) / (96 * d**2)
        + (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * d**3)
        + (79 * z9 + 776 * z7 + 1482 * z5 - 1920 * z3 - 945 * z) / (92160 * d**4)
    )


def weighted_rate(s: WeightedSums, confidence: float = 0.95) -> Estimate | None:
    """Hájek share of y=1, Wilson interval on the design-based effective sample size."""
    if s.n == 0 or s.sw <= 0.0:
        return None
    p = s.mean()
    v = s.variance(p)
    kish = s.kish_n()
    # p(1-p)/v is the n at which a simple random sample would be as precise; capped by the
    # record count (weights cannot make a sample more informative than its size).
    n_eff = min(float(s.n), p * (1.0 - p) / v) if v > 0.0 and 0.0 < p < 1.0 else kish
    lo, hi = wilson(p, n_eff, _z(confidence))
    return Estimate(p, min(lo, p), max(hi, p), s.n, n_eff)


def weighted_mean(s: WeightedSums, confidence: float = 0.95) -> Estimate | None:
    """Hájek mean of a [0, 1] score, t interval (widened to Wilson's when samples are few)."""
    if s.n == 0 or s.sw <= 0.0:
        return None
    m = s.mean()
    kish = s.kish_n()
    q = 0.5 + confidence / 2.0
    if s.n >= 2:
        half = t_quantile(q, kish - 1.0) * math.sqrt(s.variance(m))
        lo, hi = m - half, m + half
    else:
        lo, hi = 0.0, 1.0  # one record says nothing about the spread
    if kish < _SMALL_N:
        wlo, whi = wilson(m, kish, _z(confidence))
        lo, hi = min(lo, wlo), max(hi, whi)
    return Estimate(m, max(0.0, min(lo, m)), min(1.0, max(hi, m)), s.n, kish)


class _Cell:
    __slots__ = ("faith", "halluc", "samples")

    def __init__(self) -> None:
        self.faith = WeightedSums()
        self.halluc = WeightedSums()
        self.samples = 0

    def merge(self, other: _Cell) -> None:
        self.faith.merge(other.faith)
        self.halluc.merge(other.halluc)
        self.samples += other.samples


class WindowEstimator:
    """Per query type and overall (`OVERALL`) estimates over the last `window_seconds`."""

    def __init__(self, policy: EstimatePolicy | None = None, query_types: Iterable[str] = ()) -> None:
        self.policy = policy or EstimatePolicy()
        self._width = self.policy.bucket_seconds
        self._span = max(1, math.ceil(self.policy.window_seconds / self._width))
        self._query_types = tuple(query_types)
        self._buckets: dict[int, dict[str, _Cell]] = {}

    def observe(self, judgement: Judgement, now: float | None = None) -> None:
        """Count a judgement; failed ones carry no scores and are left out (never as zeros)."""
        if not judgement.ok:
            return
        self.add(
            judgement.query_type,
            judgement.sampling_weight,
            faithfulness=judgement.faithfulness,
            hallucinated=judgement.hallucinated,
            now=now,
        )

    def add(
        self,
        query_type: str,
        weight: float,
        *,
        faithfulness: float | None,
        hallucinated: bool | None,
        now: float | None = None,
    ) -> None:
        if not usable_weight(weight):
            return
        t = time.time() if now is None else now
        bucket = math.floor(t / self._width)
        cells = self._buckets.get(bucket)
        if cells is None:
            cells = self._buckets[bucket] = {}
            self._expire(bucket)
        cell = cells.get(query_type)
        if cell is None:
            cell = cells[query_type] = _Cell()
        cell.samples += 1
        if faithfulness is not None and math.isfinite(faithfulness):
            cell.faith.add(weight, min(1.0, max(0.0, faithfulness)))
        if hallucinated is not None:
            cell.halluc.add(weight, 1.0 if hallucinated else 0.0)

    def _expire(self, newest: int) -> None:
        oldest = newest - self._span + 1
        for b in [b for b in self._buckets if b < oldest]:
            del self._buckets[b]

    def snapshot(self, now: float | None = None) -> dict[str, SliceEstimate]:
        """Every query type given at construction or seen in the window, plus `OVERALL`."""
        t = time.time() if now is None else now
        newest = math.floor(t / self._width)
        oldest = newest - self._span + 1
        totals: dict[str, _Cell] = {qt: _Cell() for qt in self._query_types}
        overall = _Cell()
        for bucket, cells in self._buckets.items():
            if not oldest <= bucket <= newest:
                continue
            for qt, cell in cells.items():
                total = totals.get(qt)
                if total is None:
                    total = totals[qt] = _Cell()
                total.merge(cell)
                overall.merge(cell)
        totals[OVERALL] = overall
        c = self.policy.confidence
        return {
            qt: SliceEstimate(cell.samples, weighted_mean(cell.faith, c), weighted_rate(cell.halluc, c))
            for qt, cell in totals.items()
        }
