"""Drift detection on judged records: a one-sided, weighted likelihood-ratio CUSUM per
(query type, metric), against a reference that is frozen once taken.

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
Hysteresis: an alarm needs `min_records` judged records since the reference froze and S ≥ h;
it clears when S falls to `release` × h (S is capped at 2h, so how long a recovery takes to show
does not grow with the incident: 1.75h over the walk's drift back down, ~1,000 judged records for
a 5 % hallucination rate back at its reference, ~0.017 nats a record), so it neither flaps nor
fires on a handful of records.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Literal

from monitor.drift.config import DriftPolicy
from monitor.metrics import DriftMetrics

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
    sum_w2: float = 0.0
    sum_w2y: float = 0.0
    sum_w2y2: float = 0.0

    def add(self, w: float, y: float) -> None:
        w2 = w * w
        self.records += 1
        self.sum_w += w
        self.sum_wy += w * y
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
    _step: tuple[float, float] = (0.0, 0.0)  # (increment if y=1 or slope, offset), set on freeze

    def __post_init__(self) -> None:
        if self.reference.frozen:  # a pinned baseline: watching from the first record
            self.freeze()

    def observe(self, w: float, y: float) -> bool:
        """Add one judged answer; True when this observation raises an alarm."""
        ref = self.reference
        if not ref.frozen:
            ref.add(w, y)
            if ref.records >= self.policy.reference_records:
                self.freeze()
            return False
        z = w / ref.mean_weight
        # Capped at 2h: past the alarm the evidence only decides how long recovery takes to show,
        # and an uncapped statistic after a long incident would hold the alarm for hours.
        self.statistic = min(max(0.0, self.statistic + z * self._llr(y)), 2 * self.threshold)
        if self.statistic > 0.0:
            if not self.segment.records:
                self.segment.start = self.since_reference
            self.segment.add(w, y)
        elif self.segment.records:
            self.segment = Segment()
        self.since_reference += 1
        h = self.threshold
        if not self.active and self.statistic >= h and self.since_reference >= self.policy.min_records:
            self.active = True
            self.alarms += 1
            return True
        if self.active and self.statistic <= self.policy.release * h:
            self.active = False
        return False

    def freeze(self) -> None:
        """Take the reference as it stands (at least one record) and start watching."""
        ref = self.reference
        ref.frozen = True
        # Weighted increments keep their mean but their variance grows by the design effect d,
        # and a drift-to-variance ratio d times smaller shortens the in-control run from e^h to
        # about e^(h/d): h = d·ln(ARL0) keeps ARL0 (bench/drift.py checks it).
        self.threshold = ref.design_effect * self.policy.threshold
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
        self, query_type: str, weight: float, values: list[tuple[str, float]], *, live: bool = True
    ) -> list[tuple[Detector, str, bool]]:
        """Feed one judgement's values; (detector, query type, raised) for each slice whose alarm
        it raised (True) or cleared (False). Replayed judgements (`live=False`, already seen by a
        previous owner) move the state but count no alarm and report no change."""
        changed = []
        m = self._metrics
        for metric, y in values:
            key = (query_type, metric)
            detector = self.detectors.get(key)
            if detector is None:
                detector = self.detectors[key] = self._detector(key)
            was = detector.active
            raised = detector.observe(weight, y)
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
        pinned = self._pinned.get(key)
        if pinned is None:
            return Detector(key[1], self.policy)
        return Detector(
            key[1],
            self.policy,
            reference=pinned,  # frozen: never added to, so detectors of a slice can share it
        )

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
