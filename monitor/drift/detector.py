"""Drift detection on judged records, per (query type, metric), against a reference that is
frozen once taken. The drift stage runs `StratifiedDetector` (its docstring: each sampling stratum
against itself, and production's mix with the weights); `Detector`, the one-sided weighted
likelihood-ratio CUSUM described here, is its base and what a slice pinned without per-stratum
references (an older baseline file, a golden pin) keeps.

Why CUSUM: among detectors of a persistent shift it has the shortest worst-case delay for a given
false-alarm rate (Lorden, Moustakides), and its threshold follows from the false-alarm rate
directly: a likelihood-ratio CUSUM with threshold h = ln ARL0 runs at least ARL0 in-control
observations between false alarms on average. A fixed-threshold alert on a window mean has neither
property (a window of 200 at a 0.05 rate flags +0.05 by chance every few thousand records, and
needs the whole window to see a real change); `bench/drift.py` measures both side by side.

Per observation (one judged answer's value y, weight w = 1/p):

- rates (hallucination, refusal, false refusal, undecided): the Bernoulli log-likelihood ratio of
  p1 = p0 + δ against p0: y·ln(p1/p0) + (1−y)·ln((1−p1)/(1−p0));
- means (faithfulness, relevance): the Gaussian one, for a shift of δ in the bad direction:
  (δ/σ²)·(x − δ/2), x the deviation from μ0 in that direction, σ² the reference's variance.

Weights: a judged record stands for w production records, and priority sampling over-represents
suspicious ones, so an unweighted statistic would see drift in the sampling itself. Each increment
is multiplied by w / w̄ (w̄ the reference's mean weight): the statistic then follows the
production mix while its scale stays one judged record per step, so h = ln ARL0 keeps meaning
"ARL0 judged records of the slice" once the threshold is scaled by the reference's design effect
(see `freeze`; checked by simulation, as the weighted walk is not covered by the classic bound).

Reference: a pinned baseline's (`monitor.drift.reference`: from a golden-replay baseline or a window
of production judgements, versioned), else the first `reference_records` judged records of the
slice (docs/contract.md, Alerts); either way frozen — a slow decline cannot drag it along, and only
pinning a new baseline moves it.
Hysteresis: an alarm needs `min_records` judged records since the reference froze and S ≥ h. It
resolves on a test of its own, not on S falling: S measures evidence of a change *from the
reference*, and with a small reference (a slice's first 50 records, none failing) each healthy
record takes as much off it as a failing one adds, so a change still in the stream moved it up and
down through any release level (the demo's 12-second incident paged six times). The resolve test
is the mirror CUSUM: from the alarm on, R = max(0, R + z·ln(f0/f1)) with f0 the reference and f1
the reference moved by the minimum effect (pooled, production-weighted, as the weighted CUSUM
above), and the alarm resolves when R ≥ d·ln(`resolve_arl`) and S is back at `RELEASE` × h. While
the change persists at the minimum effect or more, each record's expected increment is negative,
and by the same Lorden bound a false resolve comes no more often than once in `resolve_arl` judged
records (bench/drift.py --incidents counts them); once the slice is back at its reference the drift
is KL(f0‖f1) a record, so the resolve takes about h_r/KL records (~500 judged records for a 5 %
hallucination rate, never fewer than ~130 all healthy ones at the defaults). A resolved alarm
restarts the detector (Page's rule): a new page needs new evidence.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Literal

from monitor.contracts.metrics import DriftMetrics
from monitor.drift.config import DriftPolicy

Direction = Literal[1, -1]

# Which way is worse, and whether the value is a 0/1 rate or a mean.
BAD_DIRECTION: dict[str, Direction] = {
    "faithfulness": -1,
    "hallucination": 1,
    "refusal": 1,
    "false_refusal": 1,
    "relevance": -1,
    "context_relevance": -1,
    "undecided": 1,  # the share of judged records the judge could not decide (abstentions)
}
RATES = frozenset({"hallucination", "refusal", "false_refusal", "undecided"})
RELEASE = 0.25  # the share of h the detection statistic must be back at for a resolve


@dataclass(slots=True)
class Reference:
    """A slice's in-control value: mean, variance and mean weight of its reference records."""

    records: int = 0
    sum_w: float = 0.0
    sum_w2: float = 0.0
    sum_wy: float = 0.0
    sum_wy2: float = 0.0
    frozen: bool = False

    @classmethod
    def pinned(cls, records: int, sum_w: float, sum_w2: float, sum_wy: float, sum_wy2: float) -> Reference:
        return cls(records, sum_w, sum_w2, sum_wy, sum_wy2, frozen=True)

    def add(self, w: float, y: float) -> None:
        self.records += 1
        self.sum_w += w
        self.sum_w2 += w * w
        self.sum_wy += w * y
        self.sum_wy2 += w * y * y

    @property
    def mean(self) -> float:
        return self.sum_wy / self.sum_w

    @property
    def variance(self) -> float:
        return max(0.0, self.sum_wy2 / self.sum_w - self.mean**2)

    @property
    def mean_weight(self) -> float:
        return self.sum_w / self.records

    @property
    def design_effect(self) -> float:
        """Kish's n·Σw²/(Σw)² ≥ 1: how much uneven weights inflate the walk's variance."""
        return max(1.0, self.records * self.sum_w2 / self.sum_w**2)


@dataclass(slots=True)
class Segment:
    """Weighted sums of the records since the statistic last stood at 0: Page's estimate of where
    the change began, so an alert's "current" value is measured over the changed records only."""

    start: int = 0  # the position (`Detector.position`) of its first record
    records: int = 0
    sum_w: float = 0.0
    sum_wy: float = 0.0
    sum_wy2: float = 0.0
    sum_w2: float = 0.0
    sum_w2y: float = 0.0
    sum_w2y2: float = 0.0

    def add(self, w: float, y: float) -> None:
        w2 = w * w
        self.records += 1
        self.sum_w += w
        self.sum_wy += w * y
        self.sum_wy2 += w * y * y
        self.sum_w2 += w2
        self.sum_w2y += w2 * y
        self.sum_w2y2 += w2 * y * y

    def mean(self) -> tuple[float, float, int]:
        """Weighted mean, its linearised standard error Σw²(y−m)²/(Σw)², and the record count."""
        if not self.sum_w:
            return math.nan, math.nan, 0
        m = self.sum_wy / self.sum_w
        var = (self.sum_w2y2 - 2 * m * self.sum_w2y + m * m * self.sum_w2) / self.sum_w**2
        return m, math.sqrt(max(0.0, var)), self.records

    @property
    def variance(self) -> float:
        """The weighted variance of the values (0 without records)."""
        if not self.sum_w:
            return 0.0
        return max(0.0, self.sum_wy2 / self.sum_w - (self.sum_wy / self.sum_w) ** 2)


@dataclass(slots=True)
class Detector:
    """One-sided weighted CUSUM of one (query type, metric)."""

    metric: str
    policy: DriftPolicy
    reference: Reference = field(default_factory=Reference)
    statistic: float = 0.0
    threshold: float = math.inf  # set when the reference freezes
    segment: Segment = field(default_factory=Segment)
    since_reference: int = 0
    active: bool = False
    alarms: int = 0
    recovery: float = 0.0  # the resolve test's statistic R, while an alarm is raised
    resolve_threshold: float = math.inf  # set when the reference freezes
    _step: tuple[float, float] = (0.0, 0.0)  # pooled (increment if y=1 or slope, offset), on freeze

    def __post_init__(self) -> None:
        if self.reference.frozen:  # a pinned baseline: watching from the first record
            self.freeze()

    def observe(self, w: float, y: float, stratum: str = "") -> bool:
        """Add one judged answer (`stratum`: what the sampler sampled it as; the weighted CUSUM
        does not use it); True when this observation raises an alarm."""
        ref = self.reference
        if not ref.frozen:
            self._collect(w, y, stratum)
            if ref.records >= self.policy.reference_records:
                self.freeze()
            return False
        self.statistic = self._walk(w, y, stratum)
        if self.statistic > 0.0:
            if not self.segment.records:
                self.segment.start = self.since_reference
            self.segment.add(w, y)
        elif self.segment.records:
            self.segment = Segment()
        self.since_reference += 1
        if self.active:
            # the mirror test: evidence for the reference against the reference moved by the effect
            z = w / ref.mean_weight
            h_r = self.resolve_threshold
            self.recovery = min(max(0.0, self.recovery - z * self._back_llr(y)), 2 * h_r)
            if self.recovery >= h_r and self.statistic <= RELEASE * self.threshold:
                self.restart()
            return False
        if self.statistic >= self.threshold and self.since_reference >= self.policy.min_records:
            self.active = True
            self.alarms += 1
            return True
        return False

    def _back_llr(self, y: float) -> float:
        """The step the resolve test mirrors. A score's weighs deviations by the noise of the
        values since the change (the forward statistic's segment) as well as the reference's: a
        reference with no spread (every answer alike) would make each healthy record conclusive,
        and a change that mixes good and bad answers resolve on a run of a few good ones."""
        if self.metric in RATES:
            return self._llr(y)
        delta = self.policy.min_effect[self.metric]
        var = max(self.reference.variance, self.segment.variance, (delta / 2) ** 2)
        x = BAD_DIRECTION[self.metric] * (y - self.reference.mean)
        return delta / var * (x - delta / 2)

    def restart(self) -> None:
        """Back to no evidence: after a resolve (Page's rule), and where the bench puts a change."""
        self.statistic = self.recovery = 0.0
        self.segment = Segment()
        self.active = False

    def _collect(self, w: float, y: float, stratum: str) -> None:
        self.reference.add(w, y)

    def _walk(self, w: float, y: float, stratum: str) -> float:
        """The statistic after this record."""
        z = w / self.reference.mean_weight
        # Capped at 2h: past the alarm the evidence only decides how long recovery takes to show,
        # and an uncapped statistic after a long incident would hold the alarm for hours.
        return min(max(0.0, self.statistic + z * self._llr(y)), 2 * self.threshold)

    def freeze(self) -> None:
        """Take the reference as it stands (at least one record) and start watching."""
        ref = self.reference
        ref.frozen = True
        # Weighted increments keep their mean but their variance grows by the design effect d,
        # and a drift-to-variance ratio d times smaller shortens the in-control run from e^h to
        # about e^(h/d): h = d·ln(ARL0) keeps ARL0 (bench/drift.py checks it).
        self.threshold = ref.design_effect * self.policy.threshold
        self._pooled_step()

    def _pooled_step(self) -> None:
        """The log-likelihood ratio of the reference moved by the minimum effect against the
        reference, on the pooled, production-weighted reference: the weighted CUSUM's step and,
        mirrored, every detector's resolve test (whose threshold is set here too)."""
        ref = self.reference
        self.resolve_threshold = ref.design_effect * math.log(self.policy.resolve_arl)
        delta = self.policy.min_effect[self.metric]
        sign = BAD_DIRECTION[self.metric]
        if self.metric in RATES:
            # Continuity: a reference with no events must not make ln(p1/p0) infinite.
            floor = 0.5 / ref.records
            p0 = min(max(ref.mean, floor), 1.0 - floor)
            p1 = min(max(p0 + sign * delta, floor), 1.0 - floor)
            self._step = (math.log(p1 / p0), math.log((1.0 - p1) / (1.0 - p0)))
        else:
            # A near-constant reference (every answer faithful) must not make σ² ~ 0.
            var = max(ref.variance, (delta / 2) ** 2)
            self._step = (delta / var, delta / 2)

    def _llr(self, y: float) -> float:
        a, b = self._step
        if self.metric in RATES:
            return a if y >= 0.5 else b
        x = BAD_DIRECTION[self.metric] * (y - self.reference.mean)
        return a * (x - b)

    @property
    def position(self) -> int:
        """The position of the last record observed since the reference froze (0 for the first);
        -1 before any."""
        return self.since_reference - 1

    @property
    def change_point(self) -> int | None:
        """Page's estimate of where the change began: the position of the first record since the
        statistic last stood at 0, or None while it stands at 0 (nothing has changed)."""
        return self.segment.start if self.segment.records else None

    def failing(self, y: float) -> bool:
        """Whether a value is on the bad side of the reference (a rate's event; a mean's value
        worse than the reference's): what an alert's example records show."""
        if self.metric in RATES:
            return y >= 0.5
        return BAD_DIRECTION[self.metric] * (y - self.reference.mean) > 0

    def current(self) -> tuple[float, float, int]:
        """What an alert reports next to the reference: the weighted mean of the records since the
        estimated change, its standard error and their count."""
        return self.segment.mean()


# The stratified detector's settings, chosen on `bench/drift.py`'s streams (bench/RESULTS.md):
# the post-change shifts its GLR tries, in multiples of the minimum effect (a rate's one value:
# each more costs threshold), and h1 - ln(ARL0) per kind of metric, calibrated by simulation at the
# default reference size (`python bench/drift.py` prints the false alarms at each h1 of a grid).
GLR_SHIFTS: dict[str, tuple[float, ...]] = {"rate": (1.25,), "score": (1.0, 2.0)}
H1_OFFSET: dict[str, float] = {"rate": -1.46, "score": -0.71}
# A score's best value: a stratum's shortfall from it is what a change multiplies.
SCORE_BEST: dict[str, float] = {"faithfulness": 1.0, "relevance": 3.0, "context_relevance": 3.0}
VAR_PRIOR = 10  # records' worth of the pooled within-strata variance in each stratum's
POOLED = ""  # the stratum of a record whose line names none (written before strata)


@dataclass(slots=True)
class StratumSums:
    """One stratum's reference records: weighted sums (production's composition) and unweighted
    ones (the stratum's own values: within a stratum the weight says nothing about the value)."""

    records: int = 0
    sum_w: float = 0.0
    sum_w2: float = 0.0
    sum_wy: float = 0.0
    sum_wy2: float = 0.0
    sum_y: float = 0.0
    sum_y2: float = 0.0
    sum_y3: float = 0.0

    def add(self, w: float, y: float) -> None:
        self.records += 1
        self.sum_w += w
        self.sum_w2 += w * w
        self.sum_wy += w * y
        self.sum_wy2 += w * y * y
        self.sum_y += y
        self.sum_y2 += y * y
        self.sum_y3 += y * y * y

    @property
    def mean(self) -> float:
        return self.sum_y / self.records

    @property
    def variance(self) -> float:
        return max(0.0, self.sum_y2 / self.records - self.mean**2)

    @property
    def third_moment(self) -> float:
        """E[(y − mean)³]: a score's skew, which a Gaussian step does not see."""
        m, n = self.mean, self.records
        return self.sum_y3 / n - 3 * m * self.sum_y2 / n + 2 * m**3


@dataclass(slots=True)
class StratifiedReference(Reference):
    """A `Reference` (its pooled, weighted sums) that also keeps each stratum's sums."""

    strata: dict[str, StratumSums] = field(default_factory=dict)

    @classmethod
    def of_strata(cls, strata: dict[str, StratumSums], frozen: bool = True) -> StratifiedReference:
        ref = cls(strata=strata, frozen=frozen)
        for s in strata.values():
            ref.records += s.records
            ref.sum_w += s.sum_w
            ref.sum_w2 += s.sum_w2
            ref.sum_wy += s.sum_wy
            ref.sum_wy2 += s.sum_wy2
        return ref

    def add(self, w: float, y: float, stratum: str = POOLED) -> None:
        Reference.add(self, w, y)
        s = self.strata.get(stratum)
        if s is None:
            s = self.strata[stratum] = StratumSums()
        s.add(w, y)


@dataclass(slots=True)
class _Stratum:
    value: float  # the stratum's reference value, shrunk towards the pooled one
    steps: tuple[tuple[float, float], ...]  # per shift: (a, b), rate y=1 / y=0, score slope / offset


@dataclass(slots=True)
class StratifiedDetector(Detector):
    """Stratified GLR of one (query type, metric): the weights' design effect is paid only where
    production's composition is tested, and a change in what the sampler oversamples is no change.

    Strata are what the sampler sampled a record as (`monitor.contracts.model.Stratum`: the priority signal
    that raised its p, or the plain rate), carried on the samples and results lines. Two
    statistics, an alarm when either crosses its threshold:

    - *within strata*, unweighted (the sampling draw is a hash, independent of the value within a
      stratum, so a stratum's sample is a fair one of it whatever its p): a generalised likelihood
      ratio for a common multiplicative shift θ of every stratum's failures (a rate p_j → θ·p_j,
      a score's shortfall likewise), maximised over the change point (Page's recursion, one CUSUM
      per θ) and over θ = 1 + g·δ/P0 for g in `GLR_SHIFTS` (P0: production's reference value).
      Each stratum's reference value is shrunk towards the pooled one (empirical Bayes,
      DerSimonian-Laird), so a stratum of ~100 records does not keep a low value by chance; a
      score's Gaussian step is tilted to a likelihood ratio of the stratum's own skewed scores
      (`_tilt`), so that every stratum's walk has the same false-alarm rate and a change in the
      sample's mix does not change the detector's. Threshold h1 = ln ARL0 + `H1_OFFSET` (no
      closed form: the references' own noise adds false alarms; calibrated by simulation);
    - *composition*: the weighted CUSUM of each record's stratum reference value, threshold
      d·ln ARL0 (d the reference's design effect): it moves when production's mix moves (more
      queries of a failing kind), not when the sample's does.

    `statistic` is max(within, composition·h1/h2) against `threshold` h1: either crossing is an
    alarm, and the gauges keep their meaning. A record of a stratum the reference never saw counts
    in the composition test only, at the reference's value; a reference with no strata (lines
    written before strata) pools every record in one.
    """

    reference: Reference = field(default_factory=StratifiedReference)
    within: float = 0.0  # the largest of the within-strata CUSUMs
    composition: float = 0.0
    composition_threshold: float = math.inf
    _cusums: list[float] = field(default_factory=list)
    _strata: dict[str, _Stratum] = field(default_factory=dict)
    _pooled: bool = False
    _vmean: float = 0.0
    _slope: float = 0.0  # the composition walk's a2 = δ / var
    _wbar: float = 1.0

    def _collect(self, w: float, y: float, stratum: str) -> None:
        ref = self.reference
        if isinstance(ref, StratifiedReference):
            ref.add(w, y, stratum)

    def restart(self) -> None:
        Detector.restart(self)
        self._cusums = [0.0] * len(self._cusums)
        self.within = self.composition = 0.0

    def freeze(self) -> None:
        ref = self.reference
        ref.frozen = True
        if not isinstance(ref, StratifiedReference):
            raise TypeError("a stratified detector needs a StratifiedReference")  # DriftMonitor's choice
        strata = ref.strata
        self._pooled = set(strata) == {POOLED}
        metric = self.metric
        delta = self.policy.min_effect[metric]
        sign = BAD_DIRECTION[metric]
        rate = metric in RATES
        kind = "rate" if rate else "score"
        h1 = max(1.0, self.policy.threshold + H1_OFFSET[kind])
        self.threshold = h1
        self.composition_threshold = ref.design_effect * self.policy.threshold
        self._pooled_step()
        n = sum(s.records for s in strata.values())
        shrunk, variances = _strata_values(strata, n, rate)
        best = 1.0 if rate else SCORE_BEST.get(metric, 1.0)
        prod = ref.mean
        short0 = max(prod if sign > 0 else best - prod, 1e-3)  # production's failures
        thetas = [1 + g * delta / short0 for g in GLR_SHIFTS[kind]]
        self._strata = {
            k: _Stratum(shrunk[k], _glr_steps(s, shrunk[k], variances[k], thetas, rate, sign, best))
            for k, s in strata.items()
        }
        self._cusums = [0.0] * len(GLR_SHIFTS[kind])
        sw = ref.sum_w
        self._wbar = sw / n
        vmean = sum(s.sum_w * self._strata[k].value for k, s in strata.items()) / sw
        spread = sum(s.sum_w * (self._strata[k].value - vmean) ** 2 for k, s in strata.items()) / sw
        self._vmean = vmean
        self._slope = delta / max(spread, (delta / 2) ** 2)

    def _walk(self, w: float, y: float, stratum: str) -> float:
        metric = self.metric
        sign = BAD_DIRECTION[metric]
        h1 = self.threshold
        st = self._strata.get(POOLED if self._pooled else stratum)
        v = self._vmean
        if st is not None:
            v = st.value
            s = self._cusums
            cap = 2 * h1
            if metric in RATES:
                for g, (a, b) in enumerate(st.steps):
                    s[g] = min(max(0.0, s[g] + (a if y >= 0.5 else b)), cap)
            else:
                x = sign * (y - v)
                for g, (a, b) in enumerate(st.steps):
                    s[g] = min(max(0.0, s[g] + a * x + b), cap)
            self.within = max(s)
        h2 = self.composition_threshold
        delta = self.policy.min_effect[metric]
        step = self._slope * (sign * (v - self._vmean) - delta / 2)
        self.composition = min(max(0.0, self.composition + w / self._wbar * step), 2 * h2)
        return max(self.within, self.composition * h1 / h2)


def _strata_values(
    strata: dict[str, StratumSums], n: int, rate: bool
) -> tuple[dict[str, float], dict[str, float]]:
    """Each stratum's reference value shrunk towards the pooled one, and its variance: a stratum
    of a few records keeps neither a low value nor a low spread by chance."""
    pooled = sum(s.sum_y for s in strata.values()) / n
    means = {k: s.mean for k, s in strata.items()}
    if rate:
        noise = {k: pooled * (1 - pooled) / s.records for k, s in strata.items()}
        variances = {k: s.variance for k, s in strata.items()}
    else:
        within = sum(s.sum_y2 - s.records * means[k] ** 2 for k, s in strata.items())
        within = max(0.0, within) / max(1, n - len(strata))
        noise = {k: within / s.records for k, s in strata.items()}
        # A stratum's variance from a handful of records (one, in a 50-record reference) is
        # noise, often 0: shrunk towards the pooled within-strata one, as its mean is.
        variances = {
            k: (s.records * s.variance + VAR_PRIOR * within) / (s.records + VAR_PRIOR)
            for k, s in strata.items()
        }
    return _shrink(means, noise, pooled), variances


def _glr_steps(
    s: StratumSums, m: float, variance: float, thetas: list[float], rate: bool, sign: int, best: float
) -> tuple[tuple[float, float], ...]:
    """A stratum's CUSUM steps, one for each shift θ of its reference value `m`: a Bernoulli
    likelihood ratio for a rate, a Gaussian one tilted to the stratum's skew for a score."""
    sd = math.sqrt(variance)
    steps = []
    for theta in thetas:
        if rate:
            floor = 0.5 / s.records  # continuity: no event in the reference stays finite
            q0 = min(max(m, floor), 1 - floor)
            q1 = min(q0 * theta, 1 - floor)
            steps.append((math.log(q1 / q0), math.log((1 - q1) / (1 - q0))))
        else:
            d = (theta - 1) * max(best - m if sign < 0 else m, 1e-3)
            var = max(sd * sd, (d / 2) ** 2)
            a, b = d / var, -d * d / var / 2
            gamma = _tilt(a, b, sd * sd, sign * s.third_moment)
            steps.append((gamma * a, gamma * b))
    return tuple(steps)


def _tilt(a: float, b: float, var: float, skew: float) -> float:
    """The factor γ ≤ 1 that makes the step a·x + b a likelihood ratio of the stratum's own scores
    (E[exp(γ(a·x + b))] = 1 under the reference, from its cumulants to the third): a Gaussian step
    on a skewed score (most answers near 1, a long tail of bad ones) has E[exp(step)] > 1, so its
    walk crosses a threshold sooner than ln ARL0 says, and more often the more the sample holds
    of that stratum — which a change in the sampling alone would then raise."""
    c1, c2 = a * a * var / 2, a**3 * skew / 6
    if c2 > 1e-12:
        gamma = (-c1 + math.sqrt(c1 * c1 - 4 * c2 * b)) / (2 * c2)
    elif c1 > 0:
        gamma = -b / c1
    else:
        return 1.0
    return min(1.0, max(0.1, gamma))


def _shrink(means: dict[str, float], noise: dict[str, float], pooled: float) -> dict[str, float]:
    """Each stratum's mean moved towards the pooled one by its noise's share of its variance
    around the pooled value (the between-strata variance by DerSimonian-Laird)."""
    prec = {k: 1 / max(v, 1e-12) for k, v in noise.items()}
    total = sum(prec.values())
    centre = sum(prec[k] * means[k] for k in means) / total
    q = sum(prec[k] * (means[k] - centre) ** 2 for k in means)
    c = total - sum(p * p for p in prec.values()) / total
    tau2 = max(0.0, (q - (len(means) - 1)) / c) if c > 0 else 0.0
    # no noise and no spread (every value alike): nothing to shrink, the means are the pooled one
    share = {k: noise[k] / (noise[k] + tau2) if noise[k] + tau2 > 0 else 1.0 for k in means}
    return {k: means[k] + share[k] * (pooled - means[k]) for k in means}


class DriftMonitor:
    """A detector per (query type, metric); `ragmon_drift_*` series show each statistic against its
    threshold. Query types come bounded (the allow-list), metrics from a closed set, so the
    detectors and series are bounded too. Which judgements it sees is the drift stage's business
    (`monitor.drift.stage`): every judgement of a slice, once, in the results topic's order."""

    def __init__(
        self,
        policy: DriftPolicy,
        metrics: DriftMetrics,
        pinned: dict[tuple[str, str], Reference] | None = None,
    ) -> None:
        self.policy = policy
        self._metrics = metrics
        self._pinned = pinned or {}
        self.detectors: dict[tuple[str, str], Detector] = {}

    def observe(
        self,
        query_type: str,
        weight: float,
        values: list[tuple[str, float]],
        *,
        live: bool = True,
        stratum: str = POOLED,
    ) -> list[tuple[Detector, str, bool]]:
        """Feed one judgement's values (`stratum`: what the sampler sampled it as, "" when its
        line does not say); (detector, query type, raised) for each slice whose alarm it raised
        (True) or cleared (False). Replayed judgements (`live=False`, already seen by a previous
        owner) move the state but count no alarm and report no change."""
        changed = []
        m = self._metrics
        for metric, y in values:
            key = (query_type, metric)
            detector = self.detectors.get(key)
            if detector is None:
                detector = self.detectors[key] = self._detector(key)
            was = detector.active
            raised = detector.observe(weight, y, stratum)
            if not live:
                continue
            if raised:
                m.alarms.labels(query_type=query_type, metric=metric).inc()
            if detector.active != was:
                changed.append((detector, query_type, detector.active))
            if detector.reference.frozen:
                self._export(query_type, detector)
        return changed

    def _detector(self, key: tuple[str, str]) -> Detector:
        """The stratified detector; the weighted CUSUM for a pinned reference without strata (a
        baseline file written before them, or pinned from a golden replay)."""
        pinned = self._pinned.get(key)
        if pinned is None:
            return StratifiedDetector(key[1], self.policy)
        # frozen: never added to, so detectors of a slice can share it
        kind = StratifiedDetector if isinstance(pinned, StratifiedReference) else Detector
        return kind(key[1], self.policy, reference=pinned)

    def _export(self, query_type: str, detector: Detector) -> None:
        labels = {"query_type": query_type, "metric": detector.metric}
        m = self._metrics
        m.statistic.labels(**labels).set(detector.statistic)
        m.threshold.labels(**labels).set(detector.threshold)
        m.active.labels(**labels).set(1 if detector.active else 0)

    def went_live(self, query_types: set[str]) -> list[tuple[Detector, str]]:
        """After a replay of these slices: export their state, and the alarms it holds (which the
        previous owner raised, and a restart must not silently drop)."""
        active = []
        for (qt, _), detector in self.detectors.items():
            if qt in query_types and detector.reference.frozen:
                self._export(qt, detector)
                if detector.active:
                    active.append((detector, qt))
        return active

    def forget(self, query_types: set[str]) -> None:
        """Slices now owned elsewhere: their detectors and series go (the new owner rebuilds)."""
        m = self._metrics
        for key in [k for k in self.detectors if k[0] in query_types]:
            del self.detectors[key]
            for gauge in (m.statistic, m.threshold, m.active):
                with contextlib.suppress(KeyError):
                    gauge.remove(*key)
