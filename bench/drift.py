"""Drift detection benchmark: false alarms and detection delay of the stratified detector and the
weighted CUSUM (`monitor/drift/detector.py`) beside the detectors users already have — the
fixed-threshold window alert, and river's ADWIN and Page-Hinkley — on the same simulated streams
of judged records, with uneven sampling weights.

Every judged record belongs to a kind of traffic with a production share, an inclusion probability
p (weight w = 1/p) and its own values: hallucination 0/1 at a rate, faithfulness a per-answer score
Beta(μk, (1−μ)k), k = 4 (sd ~0.15 at μ = 0.92). The judged sample holds each kind in proportion to
share × p. Two families of streams:

- independent: weights 2/5/20 in sample shares 0.3/0.4/0.3, every kind alike (hallucination
  0.05, faithfulness 0.92): the weights say nothing about the values;
- tied: the oversampled kinds fail more, as in production (no chunks, refusal-looking, unusual
  length): A 5 % of traffic, p 0.5, hallucination 0.30, faithfulness 0.75; B 20 %, p 0.2, 0.06,
  0.90; C 75 %, p 0.05, 0.03, 0.95 — production rates 0.0495 and 0.93, the judged sample's 0.108
  and 0.88 (sample shares 0.24/0.39/0.37).

Changes, each at record 500 + 1,000 (the reference is the first 500):

- independent: hallucination 0.05 → 0.10, faithfulness 0.92 → 0.87, in every kind;
- (a) tied: every kind's hallucination rate doubles, its faithfulness shortfall (1 − μ) grows by
  10/7: production 0.0495 → 0.099, 0.93 → 0.90, failures still concentrated in A;
- (b) traffic: A's share of production grows 5 % → 24 % (B, C scaled down), each kind unchanged:
  production 0.0495 → 0.0996 and 0.93 → 0.894 — a real change, to be detected;
- (c) sample: A's inclusion probability 0.5 → 1.0 (a floor or signal change samples every record of
  the failing kind; its weight 2 → 1), production unchanged — the judged sample's rates move
  (0.108 → 0.145, 0.88 → 0.855) but nothing happened to users: an alarm here is a false alarm.

Detectors: the CUSUM at the configured ARL0 (weighted); the window alert — the weighted mean of
the last 200 judged records beyond the reference + the minimum effect (0.05 / 0.03), checked
every record; ADWIN and Page-Hinkley from river as a new user wraps them: unweighted values, an
alarm counted only when the recent mean moved the bad way (ADWIN: the window it keeps after a cut
is worse than the window before; Page-Hinkley: one-sided, `mode` up for a rate, down for a score).
The two peers are calibrated per family and metric on the stable streams: the most sensitive
parameter of a grid (ADWIN's δ, Page-Hinkley's threshold λ) whose false alarms stay within
`--target` per 10,000 judged records (the CUSUM's own measured rate, ~0.25, by default); the
calibration is printed. Alarms during the 500 reference records are not counted for anyone.

Figures: false alarms per 10,000 stable judged records (`--runs` runs of `--stable` records);
detection delay — judged records after the change until the first alarm (the CUSUM's statistic is
reset at the change, as are the window alert's; alarms before it are false alarms), median and p90,
and runs missed within 5,000 records; for (c), alarms per 10,000 records over `--stable` records
after the shift, and the runs with any alarm.

The stratified detector (`StratifiedDetector`, the product's: imported, not copied) is fed each
record's kind as its stratum, as the sampler tells it what it sampled a record as. Beside its own
threshold, the bench counts the alarms its statistics would raise at each h1 of a grid
(`stratified_h1` in the calibration line), which is how `H1_OFFSET` was chosen; `--h1-offset`
tries another. `--reference N` gives every detector a reference of N records (the product's
default by default; the change stays 1,000 records after it).

    python bench/drift.py                   # 40 runs each (needs the bench extra: river)
    python bench/drift.py --seed 1011       # fresh streams, calibration included
    python bench/drift.py --runs 10 --stable 20000 --scenarios independent,sample
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from monitor.drift import BAD_DIRECTION, Detector, DriftPolicy
from monitor.drift.detector import H1_OFFSET, RELEASE, StratifiedDetector

WINDOW = 200
REFERENCE = 500
CHANGE = REFERENCE + 1000
POST = 5000
METRICS = ("hallucination", "faithfulness")
ADWIN_DELTAS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
PH_THRESHOLDS = (5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0)


@dataclass(frozen=True)
class Kind:
    """A kind of traffic: its share of the judged sample, its weight and its values."""

    sample_share: float
    weight: float
    rate: float  # hallucination
    mean: float  # faithfulness


def kinds(production: list[tuple[float, float, float, float]]) -> tuple[Kind, ...]:
    """Kinds from (production share, inclusion probability, rate, mean): the sample holds each in
    proportion to share × p."""
    total = sum(s * p for s, p, _, _ in production)
    return tuple(Kind(s * p / total, 1.0 / p, r, m) for s, p, r, m in production)


INDEPENDENT = tuple(Kind(q, w, 0.05, 0.92) for q, w in ((0.3, 2.0), (0.4, 5.0), (0.3, 20.0)))
TIED_KINDS = [(0.05, 0.5, 0.30, 0.75), (0.20, 0.2, 0.06, 0.90), (0.75, 0.05, 0.03, 0.95)]
TIED = kinds(TIED_KINDS)

# scenario: (family, before, after)
SCENARIOS: dict[str, tuple[str, tuple[Kind, ...], tuple[Kind, ...]]] = {
    "independent": ("independent", INDEPENDENT, tuple(replace(k, rate=0.10, mean=0.87) for k in INDEPENDENT)),
    "tied": (
        "tied",
        TIED,
        kinds([(s, p, 2 * r, 1 - (1 - m) * 10 / 7) for s, p, r, m in TIED_KINDS]),
    ),
    "traffic": (
        "tied",
        TIED,
        kinds([(0.24, 0.5, 0.30, 0.75), (0.16, 0.2, 0.06, 0.90), (0.60, 0.05, 0.03, 0.95)]),
    ),
    "sample": (
        "tied",
        TIED,
        kinds([(0.05, 1.0, 0.30, 0.75), (0.20, 0.2, 0.06, 0.90), (0.75, 0.05, 0.03, 0.95)]),
    ),
}
STRATA = ("no_chunks", "refusal", "rate")  # the kinds' names as the sampler's strata
FAMILIES = {"independent": INDEPENDENT, "tied": TIED}


def stream(
    rng: random.Random, metric: str, before: tuple[Kind, ...], after: tuple[Kind, ...], change_at: int | None
) -> Iterator[tuple[float, float, str]]:
    """(weight, value, stratum) of each judged record: the stratum is its kind, as the sampler
    tells the production detector what it sampled a record as."""
    shares = [[k.sample_share for k in before], [k.sample_share for k in after]]
    idx = range(len(before))
    i = 0
    while True:
        mix = after if change_at is not None and i >= change_at else before
        j = rng.choices(idx, shares[mix is after])[0]
        kind = mix[j]
        if metric == "hallucination":
            y = 1.0 if rng.random() < kind.rate else 0.0
        else:
            k = 4.0
            y = rng.betavariate(kind.mean * k, (1 - kind.mean) * k)
        yield kind.weight, y, STRATA[j]
        i += 1


class Observer(Protocol):
    def observe(self, w: float, y: float, stratum: str) -> bool: ...


class WindowAlert:
    """The fixed-threshold alert: the last `WINDOW` records' weighted mean past reference ± effect."""

    def __init__(self, metric: str, effect: float) -> None:
        self.metric = metric
        self.effect = effect
        self.ref: list[tuple[float, float]] = []
        self.base = 0.0
        self.window: deque[tuple[float, float]] = deque(maxlen=WINDOW)
        self.sum_w = self.sum_wy = 0.0
        self.active = False

    def observe(self, w: float, y: float, stratum: str) -> bool:
        if len(self.ref) < REFERENCE:
            self.ref.append((w, y))
            if len(self.ref) == REFERENCE:
                self.base = sum(a * b for a, b in self.ref) / sum(a for a, _ in self.ref)
            return False
        if len(self.window) == WINDOW:  # running sums: O(1) a record
            a, b = self.window[0]
            self.sum_w -= a
            self.sum_wy -= a * b
        self.window.append((w, y))
        self.sum_w += w
        self.sum_wy += w * y
        if len(self.window) < WINDOW:
            return False
        mean = self.sum_wy / self.sum_w
        worse = mean - self.base if self.metric == "hallucination" else self.base - mean
        bad = worse > self.effect
        raised = bad and not self.active
        self.active = bad
        return raised


class Adwin:
    """river's ADWIN on the unweighted values; a cut counts when the window kept is worse."""

    def __init__(self, drift: Any, metric: str, delta: float) -> None:
        self.d = drift.ADWIN(delta=delta)
        self.sign = BAD_DIRECTION[metric]

    def observe(self, w: float, y: float, stratum: str) -> bool:
        before = self.d.estimation
        self.d.update(y)
        return bool(self.d.drift_detected and self.sign * (self.d.estimation - before) > 0)


class PageHinkley:
    """river's Page-Hinkley on the unweighted values, one-sided in the bad direction."""

    def __init__(self, drift: Any, metric: str, threshold: float) -> None:
        mode = "up" if BAD_DIRECTION[metric] > 0 else "down"
        self.d = drift.PageHinkley(threshold=threshold, mode=mode)

    def observe(self, w: float, y: float, stratum: str) -> bool:
        self.d.update(y)
        return bool(self.d.drift_detected)


class Traced:
    """The production `StratifiedDetector`, and beside it the alarms its two statistics would raise
    at each within-strata threshold of a grid (the composition keeps its own), with its hysteresis:
    one pass over the stable streams calibrates h1 as ADWIN's δ is (`H1_GRID`). The production
    threshold (ln ARL0 + `H1_OFFSET`) is the one `observe` alarms on."""

    def __init__(self, metric: str, policy: DriftPolicy) -> None:
        self.d = StratifiedDetector(metric, policy)
        self.active = [False] * len(H1_GRID)
        self.alarms = [0] * len(H1_GRID)

    def observe(self, w: float, y: float, stratum: str) -> bool:
        d = self.d
        raised = d.observe(w, y, stratum)
        if not d.reference.frozen or d.since_reference == 0:
            return raised
        s1, s2, h2, release = d.within, d.composition, d.composition_threshold, RELEASE
        for i, h in enumerate(H1_GRID):
            if not self.active[i]:
                if (s1 >= h or s2 >= h2) and d.since_reference >= d.policy.min_records:
                    self.active[i] = True
                    self.alarms[i] += 1
            elif s1 <= release * h and s2 <= release * h2:
                self.active[i] = False
        return raised


# The grid's alarms clear as the product's did before its resolve test (S at `RELEASE` of h): the
# grid calibrates first crossings, which the way an alarm clears barely moves.
H1_GRID = (5.0, 5.5, 6.0, 6.5, 7.0, 7.25, 7.5, 7.75, 8.0, 8.25, 8.5, 8.75, 9.0, 9.25, 9.5, 9.75, 10.0, 10.5)


Factory = Callable[[str], Observer]


def reset(d: Observer) -> None:
    """Forget false alarms before the change: the CUSUM's statistic and the window's state."""
    if isinstance(d, StratifiedDetector):
        d.restart()
    elif isinstance(d, Detector):
        d.statistic, d.active = 0.0, False
    elif isinstance(d, WindowAlert):
        d.active = False


def false_alarms(
    makers: dict[str, Factory], mix: tuple[Kind, ...], metric: str, runs: int, n: int, seed: int
) -> dict[str, float]:
    """False alarms per 10,000 stable records of each detector, all fed the same streams."""
    alarms = dict.fromkeys(makers, 0)
    for r in range(runs):
        rng = random.Random(seed + r)
        dets = [(name, make(metric)) for name, make in makers.items()]
        s = stream(rng, metric, mix, mix, None)
        for _ in range(REFERENCE):
            w, y, st = next(s)
            for _, d in dets:
                d.observe(w, y, st)
        for _ in range(n):
            w, y, st = next(s)
            for name, d in dets:
                if d.observe(w, y, st):
                    alarms[name] += 1
    return {name: a / (runs * n) * 10_000 for name, a in alarms.items()}


def after_change(
    makers: dict[str, Factory],
    before: tuple[Kind, ...],
    after: tuple[Kind, ...],
    metric: str,
    runs: int,
    post: int,
    seed: int,
) -> dict[str, tuple[list[int], int, int, int]]:
    """Per detector: delays to the first alarm after the change, runs without one within `POST`
    records, alarms over `post` records after the change, runs with any alarm."""
    out: dict[str, tuple[list[int], int, int, int]] = {n: ([], 0, 0, 0) for n in makers}
    for r in range(runs):
        rng = random.Random(seed + 10_000 + r)
        dets = [(name, make(metric)) for name, make in makers.items()]
        s = stream(rng, metric, before, after, CHANGE)
        for _ in range(CHANGE):
            w, y, st = next(s)
            for _, d in dets:
                d.observe(w, y, st)
        for _, d in dets:
            reset(d)
        first: dict[str, int] = {}
        count = dict.fromkeys(makers, 0)
        for k in range(1, max(post, POST) + 1):
            w, y, st = next(s)
            for name, d in dets:
                if d.observe(w, y, st) and k <= post:
                    count[name] += 1
                    first.setdefault(name, k)
        for name in makers:
            found, missed, alarms, alarmed = out[name]
            if name in first and first[name] <= POST:
                found.append(first[name])
            else:
                missed += 1
            out[name] = (found, missed, alarms + count[name], alarmed + (count[name] > 0))
    return out


def calibrate(
    grid: tuple[float, ...], rates: dict[float, float], target: float, sensitive_high: bool
) -> float:
    """The most sensitive grid value whose false-alarm rate is within the target (else the least
    sensitive one)."""
    order = sorted(grid, reverse=sensitive_high)  # most sensitive first
    for v in order:
        if rates[v] <= target:
            return v
    return order[-1]


def p90(xs: list[int]) -> int | None:
    return sorted(xs)[int(0.9 * (len(xs) - 1))] if xs else None


# Incidents (`--incidents`): a reference, STABLE records, INCIDENT records of the change, then
# RECOVERY records back as before; per run, what reaches the pager.
STABLE, INCIDENT, RECOVERY = 1000, 1000, 3000
INCIDENT_REFERENCES = (50, 200, 1500)
# A quiet slice: one kind, few failures (0-1 in a 50-record reference), a change that adds a few
# failing records a minute at ~20 judged records a minute.
SPARSE = (Kind(1.0, 20.0, 0.01, 0.95),)
INCIDENT_SCENARIOS: dict[str, tuple[tuple[Kind, ...], tuple[Kind, ...]]] = {
    **{k: (before, after) for k, (_, before, after) in SCENARIOS.items() if k != "sample"},
    "sparse": (SPARSE, (replace(SPARSE[0], rate=0.15, mean=0.85),)),
}


class ShareOfH:
    """The rule before the resolve test, for comparison: the alarm clears when the statistic falls
    to a quarter of its threshold. Its detector never resolves by the test, so its walk is the
    one the old rule saw."""

    def __init__(self, metric: str, policy: DriftPolicy) -> None:
        self.d = StratifiedDetector(metric, policy.model_copy(update={"resolve_arl": 1e300}))
        self.active = False

    def observe(self, w: float, y: float, stratum: str) -> int:
        d = self.d
        d.observe(w, y, stratum)
        if not d.reference.frozen:
            return 0
        if not self.active and d.statistic >= d.threshold and d.since_reference >= d.policy.min_records:
            self.active = True
            return 1
        if self.active and d.statistic <= RELEASE * d.threshold:
            self.active = False
            return -1
        return 0


class Product:
    """The product's `StratifiedDetector`, reporting raises (1) and resolves (-1)."""

    def __init__(self, metric: str, policy: DriftPolicy) -> None:
        self.d = StratifiedDetector(metric, policy)

    @property
    def active(self) -> bool:
        return self.d.active

    def observe(self, w: float, y: float, stratum: str) -> int:
        was = self.d.active
        raised = self.d.observe(w, y, stratum)
        return 1 if raised else -1 if was and not self.d.active else 0


def incidents(args: argparse.Namespace) -> dict[str, Any]:
    """Per reference size, scenario, metric and rule, over `--runs` runs: what reaches the pager
    for one incident. Firings during the incident (the goal: one a run), resolves during it (early:
    the goal 0), runs still firing at the end, detection and resolve delays (judged records after
    the incident's start and the recovery's), and, apart, firings before the incident and after a
    resolve in the recovery: false alarms, at the detector's rate, not the incident's."""
    rules: dict[str, Callable[[str, DriftPolicy], ShareOfH | Product]] = {
        "share_of_h": ShareOfH,
        "resolve_test": Product,
    }
    out: dict[str, Any] = {}
    for ref in INCIDENT_REFERENCES:
        policy = DriftPolicy(reference_records=ref)
        for scenario, (before, after) in INCIDENT_SCENARIOS.items():
            for metric in args.metrics.split(","):
                tally = {name: Tally() for name in rules}
                for r in range(args.runs):
                    rng = random.Random(args.seed + 20_000 + r)
                    dets = {name: make(metric, policy) for name, make in rules.items()}
                    calm, bad = (
                        stream(rng, metric, before, before, None),
                        stream(rng, metric, after, after, 0),
                    )
                    phases = (
                        (calm, ref + STABLE, "stable"),
                        (bad, INCIDENT, "incident"),
                        (calm, RECOVERY, "recovery"),
                    )
                    runs = {name: Run() for name in rules}
                    for source, n, phase in phases:
                        for k in range(1, n + 1):
                            w, y, st = next(source)
                            for name, d in dets.items():
                                event = d.observe(w, y, st)
                                if event:
                                    runs[name].note(phase, k, event)
                    for name, d in dets.items():
                        tally[name].add(runs[name], d.active)
                for name, t in tally.items():
                    row = t.row(args.runs, STABLE, RECOVERY)
                    out[f"{ref}/{scenario}/{metric}/{name}"] = row
                    print(ref, scenario, metric, name, json.dumps(row), flush=True)
    return out


@dataclass
class Run:
    """One run's notifications, by phase."""

    before: int = 0  # firings before the incident
    firings: int = 0  # during the incident
    early: int = 0  # resolves during the incident
    detected_at: int | None = None
    resolved_at: int | None = None  # the first resolve in the recovery
    refires: int = 0  # firings in the recovery after a resolve

    def note(self, phase: str, k: int, event: int) -> None:
        if phase == "stable":
            self.before += event > 0
        elif phase == "incident":
            if event > 0:
                self.firings += 1
                self.detected_at = self.detected_at or k
            else:
                self.early += 1
        elif event < 0:
            self.resolved_at = self.resolved_at or k
        else:
            self.refires += 1


@dataclass
class Tally:
    runs: list[Run] = field(default_factory=list)
    still_firing: int = 0

    def add(self, run: Run, active: bool) -> None:
        self.runs.append(run)
        self.still_firing += active

    def row(self, n: int, stable: int, recovery: int) -> dict[str, Any]:
        rs = self.runs
        detect = [r.detected_at for r in rs if r.detected_at]
        resolve = [r.resolved_at for r in rs if r.resolved_at]
        return {
            "firings_per_incident": round(statistics.mean(r.firings for r in rs), 2),
            "firings_max": max(r.firings for r in rs),
            "early_resolves": sum(r.early for r in rs),
            "missed": sum(not r.firings for r in rs),
            "resolved": len(resolve),
            "still_firing_at_end": self.still_firing,
            "detection_delay_median": statistics.median(detect) if detect else None,
            "resolve_delay_median": statistics.median(resolve) if resolve else None,
            "false_firings_per_10k_before": round(sum(r.before for r in rs) / (n * stable) * 10_000, 2),
            "refires_per_10k_after_resolve": round(sum(r.refires for r in rs) / (n * recovery) * 10_000, 2),
            "runs": n,
        }


def main() -> None:
    global REFERENCE, CHANGE  # --reference: the bench's one knob for the reference's size
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--stable", type=int, default=25_000, help="stable judged records a run")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument(
        "--target", type=float, default=0.25, help="false alarms per 10,000 the peers are calibrated to"
    )
    p.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS)
    )
    p.add_argument("--metrics", default=",".join(METRICS))
    p.add_argument(
        "--h1-offset",
        action="append",
        default=[],
        metavar="KIND=X",
        help="what-if: the stratified detector's h1 - ln(ARL0) for rate or score (else the product's)",
    )
    p.add_argument(
        "--reference",
        type=int,
        default=DriftPolicy().reference_records,
        help="records in every detector's reference (default: the product's)",
    )
    p.add_argument(
        "--incidents",
        action="store_true",
        help="only the incident lifecycle: notifications per incident and early resolves (above)",
    )
    args = p.parse_args()
    if args.incidents:
        print(json.dumps(incidents(args), indent=2))
        return
    REFERENCE, CHANGE = args.reference, args.reference + CHANGE - REFERENCE
    try:
        from river import drift  # the bench extra: pip install -e '.[bench]'
    except ImportError:
        p.error("river is not installed: pip install -e '.[bench]'")
    scenarios = args.scenarios.split(",")
    metrics = args.metrics.split(",")
    policy = DriftPolicy(reference_records=REFERENCE)
    base: dict[str, Factory] = {
        "cusum": lambda m: Detector(m, policy),
        "window": lambda m: WindowAlert(m, policy.min_effect[m]),
    }
    for given in args.h1_offset:
        kind, _, value = given.partition("=")
        H1_OFFSET[kind] = float(value)  # read when a detector's reference freezes
    out: dict[str, Any] = {
        "reference": REFERENCE,
        "arl0": policy.arl0,
        "threshold": round(policy.threshold, 3),
        "target": args.target,
        "h1_offset": dict(H1_OFFSET),
    }
    families = {SCENARIOS[s][0] for s in scenarios}
    for metric in metrics:
        for family in sorted(families):
            mix = FAMILIES[family]
            grid: dict[str, Factory] = dict(base)
            for delta in ADWIN_DELTAS:
                grid[f"adwin@{delta}"] = lambda m, d=delta: Adwin(drift, m, d)
            for lam in PH_THRESHOLDS:
                grid[f"ph@{lam}"] = lambda m, t=lam: PageHinkley(drift, m, t)
            traced: list[Traced] = []  # the product, and its alarms at each h1 of a grid

            def traced_at(m: str, into: list[Traced] = traced) -> Observer:
                into.append(Traced(m, policy))
                return into[-1]

            grid["stratified"] = traced_at
            fa = false_alarms(grid, mix, metric, args.runs, args.stable, args.seed)
            delta = calibrate(ADWIN_DELTAS, {d: fa[f"adwin@{d}"] for d in ADWIN_DELTAS}, args.target, True)
            lam = calibrate(PH_THRESHOLDS, {t: fa[f"ph@{t}"] for t in PH_THRESHOLDS}, args.target, False)
            chosen: dict[str, float] = {"adwin_delta": delta, "ph_threshold": lam}
            cal: dict[str, Any] = {
                "adwin_delta": {d: round(fa[f"adwin@{d}"], 3) for d in ADWIN_DELTAS},
                "ph_threshold": {t: round(fa[f"ph@{t}"], 3) for t in PH_THRESHOLDS},
                "chosen": chosen,
            }
            h1_fa = {
                h: sum(d.alarms[i] for d in traced) / (args.runs * args.stable) * 10_000
                for i, h in enumerate(H1_GRID)
            }
            cal["stratified_h1"] = {h: round(v, 3) for h, v in h1_fa.items()}
            chosen["stratified_h1_within_target"] = calibrate(H1_GRID, h1_fa, args.target, False)
            chosen["stratified_h1"] = round(traced[0].d.threshold, 3)  # the product's
            cal["stratified_h2_mean"] = round(statistics.mean(d.d.composition_threshold for d in traced), 3)
            print("calibration", family, metric, json.dumps(cal), flush=True)
            out[f"calibration/{family}/{metric}"] = cal
            makers: dict[str, Factory] = dict(base)
            makers["stratified"] = lambda m: StratifiedDetector(m, policy)
            makers["adwin"] = lambda m, d=delta: Adwin(drift, m, d)
            makers["page_hinkley"] = lambda m, t=lam: PageHinkley(drift, m, t)
            stable = {
                "cusum": fa["cusum"],
                "window": fa["window"],
                "stratified": fa["stratified"],
                "adwin": fa[f"adwin@{delta}"],
                "page_hinkley": fa[f"ph@{lam}"],
            }
            for scenario in scenarios:
                fam, before, after = SCENARIOS[scenario]
                if fam != family:
                    continue
                real = scenario != "sample"
                post = POST if real else args.stable
                res = after_change(makers, before, after, metric, args.runs, post, args.seed)
                for name, (found, missed, alarms, alarmed) in res.items():
                    row: dict[str, Any] = {"false_alarms_per_10k": round(stable[name], 3)}
                    if real:
                        row |= {
                            "delay_median": statistics.median(found) if found else None,
                            "delay_p90": p90(found),
                            "missed_within_5000": missed,
                        }
                    else:
                        row |= {
                            "alarms_per_10k_after_shift": round(alarms / (args.runs * post) * 10_000, 3),
                            "runs_with_an_alarm": alarmed,
                        }
                    row["runs"] = args.runs
                    out[f"{scenario}/{metric}/{name}"] = row
                    print(scenario, metric, name, row, flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
