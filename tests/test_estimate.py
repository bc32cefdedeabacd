"""Windowed, weighted estimates: simulations with known ground truth (the sampler deciding, the
estimator estimating), interval arithmetic, the window, and no NaN whatever comes in."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.contracts.estimate import (
    OVERALL,
    EstimatePolicy,
    WeightedSums,
    WindowEstimator,
    t_quantile,
    weighted_mean,
    weighted_rate,
    wilson,
)
from monitor.contracts.model import Chunk, Judgement, RagRecord
from monitor.ingest.config import SamplingPolicy
from monitor.ingest.sampler import Sampler
from monitor.llm.outcome import JudgeOutcome

Z95 = 1.959963984540054


@dataclass
class Coverage:
    weighted: float  # share of windows whose interval covers the truth
    kish: float  # the same with Wilson on Kish's effective n
    unweighted: float
    faithfulness: float
    bias: float  # mean(weighted estimate - truth)
    unweighted_bias: float
    mean_n: float


def simulate(
    *,
    windows: int = 500,
    records: int = 600,
    rate: float = 0.05,
    multiplier: float = 8.0,
    flagged_share: float = 0.15,
    halluc: tuple[float, float] = (0.4, 0.03),  # P(hallucinated | flagged), P(... | not flagged)
    seed: int = 1,
) -> Coverage:
    """Windows of synthetic traffic with known truth. Records without chunks (the priority signal)
    are sampled `multiplier` times as often and hallucinate at a different rate, so weights and
    outcomes are correlated — the setting where an unweighted average is wrong."""
    rng = random.Random(seed)
    policy = SamplingPolicy(
        rate=rate,
        min_per_window=0,
        no_chunks_multiplier=multiplier,
        refusal_multiplier=1.0,
        unusual_length_multiplier=1.0,
    )
    cover = cover_kish = cover_unw = cover_f = 0
    bias = ubias = n_total = 0.0
    chunk = [Chunk("c", "x", 0.9)]
    for w in range(windows):
        sampler = Sampler(policy)
        est = WindowEstimator(EstimatePolicy(window_seconds=3600, bucket_seconds=60))
        unweighted = WeightedSums()
        hallucinated = 0
        faith_total = 0.0
        t0 = 3600.0 * (1000 + w)
        for i in range(records):
            flagged = rng.random() < flagged_share
            h = rng.random() < (halluc[0] if flagged else halluc[1])
            f = rng.betavariate(2, 2) if flagged else rng.betavariate(9, 1)
            hallucinated += h
            faith_total += f
            r = RagRecord(
                f"{rng.getrandbits(128):032x}", "s", "svc", "q", "lookup", [] if flagged else chunk, "a"
            )
            now = t0 + i * 3000.0 / records
            p = sampler.decide(r, now)
            if p is not None:
                est.add("lookup", 1.0 / p, faithfulness=f, hallucinated=h, now=now)
                unweighted.add(1.0, float(h))
        truth, ftruth = hallucinated / records, faith_total / records
        snap = est.snapshot(t0 + 3000.0)["lookup"]
        rate_e, faith_e = snap.hallucination_rate, snap.faithfulness
        assert rate_e is not None and faith_e is not None
        cover += rate_e.lower <= truth <= rate_e.upper
        cover_f += faith_e.lower <= ftruth <= faith_e.upper
        klo, khi = wilson(rate_e.estimate, _kish_of(est), Z95)
        cover_kish += klo <= truth <= khi
        u = weighted_rate(unweighted)
        assert u is not None
        cover_unw += u.lower <= truth <= u.upper
        bias += rate_e.estimate - truth
        ubias += u.estimate - truth
        n_total += rate_e.n
    return Coverage(
        cover / windows,
        cover_kish / windows,
        cover_unw / windows,
        cover_f / windows,
        bias / windows,
        ubias / windows,
        n_total / windows,
    )


def _kish_of(est: WindowEstimator) -> float:
    """Kish's effective n of the window's hallucination sample (for the comparison only)."""
    total = WeightedSums()
    for cells in est._buckets.values():
        for cell in cells.values():
            total.merge(cell.halluc)
    return total.kish_n()


@pytest.fixture(scope="module")
def oversampled_bad() -> Coverage:
    return simulate()


def test_weighted_interval_covers_the_truth_under_priority_sampling(oversampled_bad: Coverage) -> None:
    c = oversampled_bad
    assert c.weighted >= 0.93, c
    assert c.faithfulness >= 0.93, c
    assert abs(c.bias) < 0.005, c  # Hájek: no bias to speak of
    assert 40 < c.mean_n < 120, c  # a realistic judged sample per window, not a census


def test_unweighted_estimate_is_biased_in_the_same_setting(oversampled_bad: Coverage) -> None:
    """Flagged records hallucinate more and are oversampled: the plain share overstates the rate
    roughly threefold and its interval almost never covers the truth."""
    c = oversampled_bad
    assert c.unweighted_bias > 0.1, c
    assert c.unweighted < 0.2, c


def test_design_effective_n_covers_where_kish_does_not() -> None:
    """When the oversampled records are the *good* ones, Kish's effective n (which ignores the
    correlation of weights and outcomes) under-covers; the design-based one used here holds."""
    c = simulate(windows=500, records=600, multiplier=10.0, flagged_share=0.5, halluc=(0.0, 0.3), seed=2)
    assert c.weighted >= 0.93, c
    assert c.kish < c.weighted, c


def test_floor_and_signals_together_stay_honest() -> None:
    """Three slices of very different sizes through the floored sampler; each slice's interval
    covers its true rate, and the overall one covers the overall rate."""
    rng = random.Random(5)
    sizes = {"lookup": 3000, "multi_hop": 80, "out_of_corpus": 40}
    true_rate = {"lookup": 0.05, "multi_hop": 0.2, "out_of_corpus": 0.5}
    windows = 120
    covered = dict.fromkeys([*sizes, OVERALL], 0)
    judged = dict.fromkeys(sizes, 0)
    sampler = Sampler(SamplingPolicy(rate=0.02, min_per_window=20, window_seconds=3600.0))
    for w in range(-1, windows):  # window -1: the sampler learns the volumes its floors start from
        est = WindowEstimator(EstimatePolicy(window_seconds=3600.0, bucket_seconds=60.0))
        t0 = 3600.0 * (2000 + w)
        events = [(t0 + rng.random() * 3599.0, qt) for qt, n in sizes.items() for _ in range(n)]
        events.sort()
        truth = dict.fromkeys(sizes, 0)
        for now, qt in events:
            h = rng.random() < true_rate[qt]
            truth[qt] += h
            r = RagRecord(f"{rng.getrandbits(128):032x}", "s", "svc", "q", qt, [], "a")
            p = sampler.decide(r, now)
            if p is not None:
                est.add(qt, 1.0 / p, faithfulness=None, hallucinated=h, now=now)
        if w < 0:
            continue
        snap = est.snapshot(t0 + 3599.0)
        for qt in sizes:
            e = snap[qt].hallucination_rate
            assert e is not None and e.n >= 15  # the floor is a target met on expectation
            judged[qt] += e.n
            covered[qt] += e.lower <= truth[qt] / sizes[qt] <= e.upper
        overall = snap[OVERALL].hallucination_rate
        assert overall is not None
        covered[OVERALL] += overall.lower <= sum(truth.values()) / sum(sizes.values()) <= overall.upper
    for key, n in covered.items():
        assert n / windows >= 0.9, (key, n / windows)
    assert all(n / windows >= 20 for n in judged.values()), judged


# -- intervals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042), (200, 1.972)],
)
def test_t_quantile(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, rel=0.01)


def test_wilson_known_values() -> None:
    lo, hi = wilson(0.5, 100, Z95)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    lo, hi = wilson(0.0, 10, Z95)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-3)  # zero events still bound the rate
    assert wilson(0.3, 0, Z95) == (0.0, 1.0)


def sums(values: list[tuple[float, float]]) -> WeightedSums:
    s = WeightedSums()
    for w, y in values:
        s.add(w, y)
    return s


def test_few_samples_give_wide_bounds_many_give_narrow() -> None:
    few = weighted_rate(sums([(20.0, 1.0), (20.0, 0.0), (20.0, 0.0)]))
    many = weighted_rate(sums([(20.0, float(i % 3 == 0)) for i in range(300)]))
    assert few is not None and many is not None
    assert few.upper - few.lower > 0.5
    assert many.upper - many.lower < 0.12
    assert few.n == 3 and many.n == 300


def test_identical_scores_do_not_claim_certainty() -> None:
    """Five perfect scores have zero sample variance; the interval must still be wide."""
    e = weighted_mean(sums([(10.0, 1.0)] * 5))
    assert e is not None and e.estimate == 1.0
    assert e.lower < 0.7 and e.upper == 1.0
    one = weighted_mean(sums([(1.0, 0.8)]))
    assert one is not None and (one.lower, one.upper) == (0.0, 1.0)


def test_hajek_weights_matter() -> None:
    # one record at p=0.5 (weight 2) says 1, three at p=0.05 (weight 20) say 0
    e = weighted_rate(sums([(2.0, 1.0), (20.0, 0.0), (20.0, 0.0), (20.0, 0.0)]))
    assert e is not None and e.estimate == pytest.approx(2 / 62)


# -- the window --------------------------------------------------------------------------------------


def judgement(qt: str, *, weight: float, faith: float | None, halluc: bool) -> Judgement:
    return Judgement(
        trace_id="t",
        query_type=qt,
        service="svc",
        backend="lexical",
        model="m",
        sampling_weight=weight,
        faithfulness=faith,
        hallucinated=halluc,
        answerable_from_context=not halluc,
        answer_admits_uncertainty=False,
    )


def test_window_slides_and_empty_slices_have_no_estimate() -> None:
    est = WindowEstimator(EstimatePolicy(window_seconds=600, bucket_seconds=60), ["lookup", "comparison"])
    t0 = 1_700_000_000.0
    est.observe(judgement("lookup", weight=20, faith=0.5, halluc=True), t0)
    est.observe(judgement("lookup", weight=20, faith=1.0, halluc=False), t0 + 400)
    failed = Judgement.failed(
        JudgeOutcome.TIMEOUT,
        "timeout",
        trace_id="t",
        query_type="lookup",
        service="s",
        backend="b",
        model="m",
    )
    est.observe(failed, t0 + 400)  # no scores: never averaged in as a zero
    snap = est.snapshot(t0 + 500)
    assert snap["lookup"].samples == 2
    assert snap["lookup"].faithfulness is not None and snap["lookup"].faithfulness.estimate == 0.75
    assert snap["comparison"].samples == 0
    assert snap["comparison"].faithfulness is None and snap["comparison"].hallucination_rate is None
    later = est.snapshot(t0 + 700)  # the first judgement has left the 10-minute window
    h = later["lookup"].hallucination_rate
    assert later["lookup"].samples == 1 and h is not None and h.estimate == 0.0
    assert est.snapshot(t0 + 1200)[OVERALL].samples == 0
    # a refusal (no faithfulness) counts for the rate, not for faithfulness
    est.observe(judgement("comparison", weight=1, faith=None, halluc=False), t0 + 1200)
    s = est.snapshot(t0 + 1200)["comparison"]
    assert s.faithfulness is None and s.hallucination_rate is not None


values = st.floats(allow_nan=True, allow_infinity=True)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["lookup", "comparison"]),
            values,  # weight: garbage is ignored
            st.one_of(st.none(), values),
            st.one_of(st.none(), st.booleans()),
            st.floats(0, 10_000),
        ),
        max_size=60,
    ),
    st.floats(0.55, 0.999),
)
def test_no_nan_ever_and_bounds_are_ordered(
    obs: list[tuple[str, float, float | None, bool | None, float]], confidence: float
) -> None:
    est = WindowEstimator(EstimatePolicy(window_seconds=3600, bucket_seconds=60, confidence=confidence))
    for qt, w, f, h, t in obs:
        est.add(qt, w, faithfulness=f, hallucinated=h, now=t)
    for snap in est.snapshot(10_000.0).values():
        for e in (snap.faithfulness, snap.hallucination_rate):
            if e is None:
                continue
            for x in (e.estimate, e.lower, e.upper, e.n_eff):
                assert math.isfinite(x)
            assert 0.0 <= e.lower <= e.estimate <= e.upper <= 1.0
            assert e.n >= 1


def test_policy_checks_buckets_fit_the_window() -> None:
    with pytest.raises(ValueError):
        EstimatePolicy(window_seconds=60, bucket_seconds=120)
