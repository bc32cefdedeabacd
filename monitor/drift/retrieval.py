"""Label-free retrieval drift on every record: per query type, the distribution of the
retrieved-chunk count and of the top retrieval score in a sliding window of recent records,
against a frozen reference, by the population stability index (PSI).

It needs no judge and no sample: the ingest stage feeds it every record, so it sees a retriever
that starts returning nothing, or weaker matches, within a few hundred records of the slice — long
before enough judged records move a quality metric.

Why PSI and not Kolmogorov–Smirnov:

- the chunk count is discrete (a handful of values): KS critical values assume a continuous
  distribution and are conservative by an unknown amount on ties, so its false-alarm rate could
  not be stated; and a missing score has no place on KS's number line (it would need a second
  test), while PSI gives it a bin of its own;
- cost: KS on a sliding window needs the window sorted at every check; PSI with bins fixed when
  the reference freezes needs O(1) per record (a ring buffer of bin indices and bin counts) and
  O(bins) per check;
- a known null distribution: with fixed bins, PSI (the symmetric Kullback–Leibler divergence of
  the two histograms) of two samples of one distribution, of sizes n (reference) and m (window),
  is about (1/n + 1/m)·χ²(B − 1) for B bins. At the defaults (2,000 / 1,000, at most 11 score bins
  and 22 count bins) its mean is 0.015–0.03, and the chance that a check crosses 0.25 (the
  industry's "major shift") by chance is below 1e-23 by that approximation. The approximation is
  weakest in the far tail, so `bench/retrieval_drift.py` measures it: no false alarm in 2,000,000
  stable records, PSI at most 0.062 (mean 0.014).

Features (what a record contributes):

- `chunk_count`: one bin per count 0…k, k the reference's largest count (at most 20), then "more";
- `top_score`: the top-ranked chunk's score, binned at the reference's deciles (ties merged), plus
  a "no score" bin for records without one (no chunks, or a retriever that reports no scores):
  counted apart, never as 0.

Empty bins get ε = 1e-4 in place of 0 (ln 0 would make any new value infinite drift).

Reference: a pinned one (the `retrieval` section of the drift baseline file, `rag-monitor
baseline pin`: weighted shares from a window of results lines), else the first
`reference_records` records of the slice seen by this process; either way frozen, as the CUSUM's
(`monitor.drift.detector`): a slow decline cannot drag it along. A pinned slice watches from its
first record, and a restart watches against the same reference — a retriever already broken at
the restart is compared with the pinned state, not taken as normal. Without a pin a restart takes
a new reference from whatever it sees first. A pinned reference of n_eff = (Σw)²/Σw² effective
records takes n_eff's place in the noise figure below. Window: the last `window_records`
records after the reference. PSI is computed every `check_every` records of the slice, not per
record. Hysteresis: an alarm needs at least `min_records` records in the window and PSI ≥
`threshold`; it clears when PSI falls to `release` (0.1, the convention's "no significant change").

Several ingest replicas: the input topic is partitioned by trace id, so each replica's records
are a random share of each slice, its reference and window comparable with one process's. Each
replica needs as many of its own records as one process would: R replicas raise an alarm R times
later (in time, or in records of the whole slice), at the same false-alarm rate per record.
"""

from __future__ import annotations

import logging
import math
import statistics
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from prometheus_client import Counter, Gauge

from monitor.contracts.metrics import RetrievalDriftMetrics
from monitor.drift.config import RetrievalDriftPolicy


class PinnedBaseline(Protocol):
    """What the retrieval monitor takes from a pinned baseline file (`reference.DriftBaseline`,
    which imports this module's references: a protocol keeps the two modules out of a circle)."""

    @property
    def version(self) -> str: ...

    def retrieval_references(self) -> dict[str, RetrievalReference]: ...


log = logging.getLogger(__name__)

Feature = Literal["chunk_count", "top_score"]
MAX_COUNT_BIN = 20  # counts above the reference's largest (capped here) share the "more" bin
EPSILON = 1e-4


@dataclass(slots=True)
class FeatureState:
    """One feature's window histogram against its reference, and its alarm."""

    name: Feature
    log_ref: list[float]  # ln q_i
    ref: list[float]  # q_i (with ε)
    counts: list[int]  # window counts per bin; the last slot counts empty ring cells
    psi: float = math.nan
    active: bool = False
    alarms: int = 0
    raised: bool = False  # an alarm since the last export

    def check(self, policy: RetrievalDriftPolicy) -> None:
        """Recompute PSI from the window's bin counts, O(bins), and move the alarm."""
        counts = self.counts
        n = sum(counts) - counts[-1]  # the last slot counts ring cells not filled yet
        if n < policy.min_records:
            return
        psi = 0.0
        for c, q, lq in zip(counts, self.ref, self.log_ref, strict=False):  # stops before that slot
            p = max(c / n, EPSILON)
            psi += (p - q) * (math.log(p) - lq)
        self.psi = psi
        if not self.active and psi >= policy.threshold:
            self.active = True
            self.alarms += 1
            self.raised = True
        elif self.active and psi <= policy.release:
            self.active = False


def _reference(shares: Sequence[float]) -> tuple[list[float], list[float]]:
    """Bin shares of the reference with ε for empty bins, and their logs."""
    ref = [max(q, EPSILON) for q in shares]
    return ref, [math.log(q) for q in ref]


def score_edges(scores: list[float]) -> list[float]:
    """The reference's deciles, ties merged (a discrete score has fewer distinct edges)."""
    if len(scores) < 2:
        return []
    return sorted(set(statistics.quantiles(scores, n=10, method="inclusive")))


def weighted_score_edges(scores: Sequence[float], weights: Sequence[float]) -> list[float]:
    """Deciles of a weighted sample, ties merged: `score_edges` with each score standing for its
    weight. The i-th smallest of n sits at (C_i + w_i/2 − w_1/2) / (W − w_1/2 − w_n/2) (C_i the
    weight below it, W the total), interpolated linearly between: 0 and 1 at the ends, and
    i/(n − 1) — `statistics.quantiles`' inclusive method — when the weights are equal."""
    n = len(scores)
    if n < 2:
        return []
    if len(set(weights)) == 1:
        return score_edges(list(scores))
    pairs = sorted(zip(scores, weights, strict=True))
    xs = [x for x, _ in pairs]
    first, last = pairs[0][1] / 2, pairs[-1][1] / 2
    span = sum(w for _, w in pairs) - first - last
    pos: list[float] = []
    below = 0.0
    for _, w in pairs:
        pos.append((below + w / 2 - first) / span)
        below += w
    edges: list[float] = []
    j = 0
    for i in range(1, 10):
        q = i / 10
        while j < n - 2 and pos[j + 1] < q:
            j += 1
        t = min(max((q - pos[j]) / (pos[j + 1] - pos[j]), 0.0), 1.0)
        edges.append(xs[j] + t * (xs[j + 1] - xs[j]))
    return sorted(set(edges))


@dataclass(frozen=True, slots=True)
class RetrievalReference:
    """What a slice freezes to: the chunk-count shares (per count 0…k, then "more"), the top-score
    decile edges and shares ("no score" first, then one per bin: len(edges) + 2), and the records
    they came from (`effective_records` = (Σw)²/Σw², all of them when unweighted). Made from the
    slice's first records, or pinned (`monitor.drift.reference`) from a weighted sample."""

    count_shares: tuple[float, ...]
    edges: tuple[float, ...]
    score_shares: tuple[float, ...]
    records: int
    effective_records: float

    @classmethod
    def of(
        cls,
        counts: Sequence[int],
        scores: Sequence[float | None],
        weights: Sequence[float] | None = None,
    ) -> RetrievalReference:
        """From at least one record; `weights` (default 1 each): how many records each stands for."""
        w = [1.0] * len(counts) if weights is None else list(weights)
        k = min(max(counts), MAX_COUNT_BIN)
        present = [(s, wi) for s, wi in zip(scores, w, strict=True) if s is not None]
        edges = weighted_score_edges([s for s, _ in present], [wi for _, wi in present])
        by_count = [0.0] * (k + 2)
        by_score = [0.0] * (len(edges) + 2)
        for c, s, wi in zip(counts, scores, w, strict=True):
            by_count[c if c <= k else k + 1] += wi
            by_score[0 if s is None else bisect_right(edges, s) + 1] += wi
        total = sum(w)
        return cls(
            count_shares=tuple(x / total for x in by_count),
            edges=tuple(edges),
            score_shares=tuple(x / total for x in by_score),
            records=len(counts),
            effective_records=total * total / sum(x * x for x in w),
        )

    def expected_psi(self, window_records: int) -> float:
        """PSI's mean on unchanged traffic against a full window, the larger feature's:
        (bins − 1)·(1/n_eff + 1/window) (module docstring)."""
        bins = max(len(self.count_shares), len(self.score_shares))
        return (bins - 1) * (1 / self.effective_records + 1 / window_records)


class RecordWindow:
    """Where a slice's records go, O(1) each: the reference being collected (`counts_seen`,
    `scores_seen`, until `need` records), then, once frozen, the window — a ring of bin indices
    per feature (`count_ring`, `score_ring`, the next cell `pos`), the bin counts they add up to
    (`count_bins`, `score_bins`: the features' own lists) and the records to the next check
    (`until_check`). `push` is the whole per-record work; the slice acts when it says so.

    The C seam: the drift stage owns this object, and the ingest stage's compiled accounting
    (`monitor.ingest.accounting`, handed the monitor's `windows`) does `push`'s work on it, in C,
    for a record after which the slice need not act. It reads and writes only the fields named in
    `C_SEAM`, all slots, found by name when it meets the first window (a name missing, or not a
    slot, leaves the windows to Python). Changing `push` or a field named there changes that seam:
    `_accounting.c`'s `window_push` is its twin (tests/ingest/test_stage_accounting.py holds them
    to each other)."""

    C_SEAM = (
        "frozen",
        "need",
        "counts_seen",
        "scores_seen",
        "max_count",
        "edges",
        "count_ring",
        "score_ring",
        "count_bins",
        "score_bins",
        "pos",
        "until_check",
    )
    __slots__ = C_SEAM

    def __init__(self, need: int) -> None:
        self.frozen = False
        self.need = need  # records the reference takes
        self.counts_seen: list[int] = []  # the reference's raw values until frozen
        self.scores_seen: list[float | None] = []
        self.max_count = 0  # set on freeze (`watch`): the bins and rings
        self.edges: list[float] = []
        self.count_ring: list[int] = []
        self.score_ring: list[int] = []
        self.count_bins: list[int] = []
        self.score_bins: list[int] = []
        self.pos = 0
        self.until_check = 0

    def push(self, chunk_count: int, top_score: float | None) -> bool:
        """Add one record; True when the slice must act: the reference is complete (not frozen
        yet: freeze it), or a check is due (`until_check` at 0: reset it and check)."""
        if not self.frozen:
            self.counts_seen.append(chunk_count)
            self.scores_seen.append(top_score)
            return len(self.counts_seen) >= self.need
        i = self.pos
        k = self.max_count
        c = chunk_count if chunk_count <= k else k + 1
        s = 0 if top_score is None else bisect_right(self.edges, top_score) + 1
        cb, sb = self.count_bins, self.score_bins
        cr, sr = self.count_ring, self.score_ring
        cb[cr[i]] -= 1
        cb[c] += 1
        cr[i] = c
        sb[sr[i]] -= 1
        sb[s] += 1
        sr[i] = s
        i += 1
        self.pos = 0 if i == len(cr) else i
        self.until_check -= 1
        return not self.until_check

    def watch(
        self, max_count: int, edges: list[float], count_bins: list[int], score_bins: list[int], m: int
    ) -> None:
        """Frozen: the window of `m` records over these bins (their last slot counts ring cells
        not filled yet, so `push` needs no branch), the reference's records dropped."""
        self.counts_seen, self.scores_seen = [], []
        self.max_count, self.edges = max_count, edges
        self.count_bins, self.score_bins = count_bins, score_bins
        self.count_ring = [max_count + 2] * m
        self.score_ring = [len(edges) + 2] * m
        self.pos = 0
        self.frozen = True


@dataclass(slots=True)
class SliceDrift:
    """Both features of one query type: collect the reference (or `start` from a pinned one),
    freeze the bins, then slide the window, O(1) a record. Its records go to its `window` (a
    `RecordWindow`, the compiled accounting's seam: nothing here is)."""

    policy: RetrievalDriftPolicy
    window: RecordWindow = field(init=False)
    # Set on freeze; not read by the hot path, kept for inspection (which reference, pinned or not).
    reference: RetrievalReference | None = None
    pinned: bool = False
    features: tuple[FeatureState, ...] = ()

    def __post_init__(self) -> None:
        self.window = RecordWindow(self.policy.reference_records)

    @property
    def frozen(self) -> bool:
        return self.window.frozen

    @property
    def counts_seen(self) -> list[int]:
        return self.window.counts_seen

    @property
    def scores_seen(self) -> list[float | None]:
        return self.window.scores_seen

    def observe(self, chunk_count: int, top_score: float | None) -> bool:
        """Add one record; True when it froze the reference or ran a check (the caller exports)."""
        w = self.window
        if not w.push(chunk_count, top_score):
            return False
        if not w.frozen:
            self.freeze()
            return True
        w.until_check = self.policy.check_every
        for feature in self.features:
            feature.check(self.policy)
        return True

    def freeze(self) -> None:
        """Fix the bins from the reference as it stands (at least one record) and start watching."""
        self.start(RetrievalReference.of(self.window.counts_seen, self.window.scores_seen))

    def start(self, reference: RetrievalReference, *, pinned: bool = False) -> None:
        """Freeze to `reference` and watch from the next record (a pinned one: from the first)."""
        k = len(reference.count_shares) - 2
        edges = list(reference.edges)
        m = self.policy.window_records
        # One extra last slot counts ring cells not filled yet, so the hot path needs no branch.
        ref, log_ref = _reference(reference.count_shares)
        by_count = FeatureState("chunk_count", log_ref, ref, [0] * (k + 2) + [m])
        ref, log_ref = _reference(reference.score_shares)
        by_score = FeatureState("top_score", log_ref, ref, [0] * (len(edges) + 2) + [m])
        self.features = (by_count, by_score)
        self.window.watch(k, edges, by_count.counts, by_score.counts, m)
        self.window.until_check = self.policy.check_every
        self.reference, self.pinned = reference, pinned

    @property
    def window_size(self) -> int:
        """Records in the window now (at most `window_records`)."""
        w = self.window
        return len(w.count_ring) - w.count_bins[-1] if w.frozen else 0


class RetrievalDriftMonitor:
    """A `SliceDrift` per query type, and the `ragmon_retrieval_drift_*` series. Query types come
    bounded (the allow-list), features from a closed pair, so the state and series are too."""

    def __init__(
        self,
        policy: RetrievalDriftPolicy,
        metrics: RetrievalDriftMetrics,
        pinned: Mapping[str, RetrievalReference] | None = None,
    ) -> None:
        """`pinned`: references per query type (a drift baseline's `retrieval` section); those
        slices watch from their first record, the others collect `reference_records` first."""
        self.policy = policy
        self._metrics = metrics
        self.pinned: dict[str, RetrievalReference] = dict(pinned or {})
        self.slices: dict[str, SliceDrift] = {}
        # each slice's `RecordWindow`, by query type: the compiled accounting's seam (RecordWindow)
        self.windows: dict[str, RecordWindow] = {}
        self._children: dict[tuple[str, str], tuple[Gauge, Counter]] = {}

    @classmethod
    def from_baseline(
        cls, policy: RetrievalDriftPolicy, metrics: RetrievalDriftMetrics, baseline: PinnedBaseline | None
    ) -> RetrievalDriftMonitor:
        """The ingest stage's monitor, its slices pinned to the `retrieval` section of `baseline`
        (the loaded `alerts.drift.baseline_file`, None without one); says what it pins, and warns
        of a pinned reference too small for the threshold."""
        pinned = baseline.retrieval_references() if baseline is not None else {}
        if baseline is not None and pinned:
            log.info("retrieval drift: baseline %s pins %s", baseline.version, ", ".join(sorted(pinned)))
            for qt, ref in sorted(pinned.items()):
                noise = ref.expected_psi(policy.window_records)
                if noise > policy.threshold / 3:
                    log.warning(
                        "retrieval drift: %s's pinned reference has %.0f effective records: PSI on "
                        "unchanged traffic is about %.3f, near the threshold %.2f (pin a longer window)",
                        qt,
                        ref.effective_records,
                        noise,
                        policy.threshold,
                    )
        else:
            log.info(
                "retrieval drift: no pinned references; each slice's reference is its first %d records "
                "in this process (pin one: rag-monitor baseline pin)",
                policy.reference_records,
            )
        return cls(policy, metrics, pinned)

    def observe(self, query_type: str, chunk_count: int, top_score: float | None) -> None:
        """One record of the slice: the hot path (a dict lookup and a few list updates)."""
        drift = self.slices.get(query_type)
        if drift is None:
            drift = self._new_slice(query_type)
        if drift.observe(chunk_count, top_score):
            self._export(query_type, drift)

    def _new_slice(self, query_type: str) -> SliceDrift:
        drift = self.slices[query_type] = SliceDrift(self.policy)
        self.windows[query_type] = drift.window
        reference = self.pinned.get(query_type)
        if reference is not None:
            drift.start(reference, pinned=True)
            self._export(query_type, drift)  # threshold and active series from the first record
        return drift

    def _export(self, query_type: str, drift: SliceDrift) -> None:
        m = self._metrics
        for feature in drift.features:
            key = (query_type, feature.name)
            children = self._children.get(key)
            if children is None:
                labels = {"query_type": query_type, "feature": feature.name}
                m.threshold.labels(**labels).set(self.policy.threshold)
                children = self._children[key] = (m.active.labels(**labels), m.alarms.labels(**labels))
            active, alarms = children
            if not math.isnan(feature.psi):  # no PSI series before the window's minimum fill
                m.psi.labels(query_type=query_type, feature=feature.name).set(feature.psi)
            active.set(1 if feature.active else 0)
            if feature.raised:
                alarms.inc()
                feature.raised = False
