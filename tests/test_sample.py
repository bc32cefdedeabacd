"""The sampler: deterministic by trace id, subset-consistent, priority signals, the per-slice floor,
and the inclusion probability it returns is the one actually used."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.ingest.sample import Sampler, SamplingPolicy, looks_like_refusal, trace_fraction
from monitor.model import Chunk, RagRecord

ROOT = Path(__file__).resolve().parent.parent
NOW = 1_700_000_000.0
TYPES = ("lookup", "comparison", "multi_hop")


def rec(
    trace_id: str,
    *,
    query_type: str = "lookup",
    chunks: list[Chunk] | None = None,
    answer: str = "The Rhine discharges 2,330 cubic metres per second at the border.",
) -> RagRecord:
    return RagRecord(
        trace_id=trace_id,
        span_id="0" * 16,
        service="svc",
        query="q",
        query_type=query_type,
        chunks=[Chunk("c1", "x", 0.8)] if chunks is None else chunks,
        answer=answer,
    )


def ids(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


def low_draw_id(below: float, seed: int = 0) -> str:
    """A trace id whose draw is under `below`: sampled whatever the signals say, so its p shows."""
    return next(t for t in ids(100_000, seed) if trace_fraction(t) < below)


def no_signal_policy(rate: float, **kw: float) -> SamplingPolicy:
    base: dict[str, float] = {
        "no_chunks_multiplier": 1.0,
        "refusal_multiplier": 1.0,
        "unusual_length_multiplier": 1.0,
        "min_per_window": 0,
    }
    base.update(kw)
    return SamplingPolicy(rate=rate, **base)


# -- determinism ---------------------------------------------------------------------------------


_CHILD = """
import json, sys
from monitor.model import Chunk, RagRecord
from monitor.ingest.sample import Sampler, SamplingPolicy, trace_fraction
ids = json.loads(sys.stdin.read())
s = Sampler(SamplingPolicy(rate=0.1, min_per_window=0))
out = []
for i, t in enumerate(ids):
    chunks = [] if i % 3 == 0 else [Chunk("c", "x", 0.9)]
    r = RagRecord(t, "0" * 16, "svc", "q", "lookup", chunks, "a" * (20 + i % 7))
    out.append([trace_fraction(t), s.decide(r, 1_700_000_000.0 + i)])
print(json.dumps(out))
"""


def test_decisions_are_the_same_in_another_process() -> None:
    """Every replica must reach the same decision: no per-process hash salt, no random state."""
    trace_ids = ids(2000, seed=11)
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps(trace_ids),
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    theirs = json.loads(child.stdout)
    s = Sampler(SamplingPolicy(rate=0.1, min_per_window=0))
    ours = []
    for i, t in enumerate(trace_ids):
        r = rec(t, chunks=[] if i % 3 == 0 else [Chunk("c", "x", 0.9)], answer="a" * (20 + i % 7))
        ours.append([trace_fraction(t), s.decide(r, NOW + i)])
    assert theirs == ours
    assert sum(p is not None for _, p in ours) > 100  # the comparison covered real decisions


def test_trace_fraction_is_uniform_enough() -> None:
    xs = [trace_fraction(t) for t in ids(20_000, seed=3)]
    assert all(0.0 <= x < 1.0 for x in xs)
    for k in range(10):  # each decile within 10% of its expected 2000
        assert 1800 <= sum(k / 10 <= x < (k + 1) / 10 for x in xs) <= 2200
    # Structured ids (sequential, shared prefix) hash to uniform draws too.
    seq = [trace_fraction(f"{i:032x}") for i in range(10_000)]
    assert 0.47 < sum(seq) / len(seq) < 0.53


# -- subset and exactness ------------------------------------------------------------------------


record_shapes = st.tuples(
    st.sampled_from(TYPES),
    st.booleans(),  # no chunks
    st.floats(0.0, 1.0),  # top score
    st.booleans(),  # refusal
    st.integers(1, 2000),  # answer length
)


def build(shapes: list[tuple[str, bool, float, bool, int]], seed: int) -> list[RagRecord]:
    out = []
    for t, (qt, empty, score, refusal, length) in zip(ids(len(shapes), seed), shapes, strict=True):
        answer = "I couldn't find that in the documents. " if refusal else ""
        answer = (answer + "x" * length)[: max(length, len(answer))]
        out.append(rec(t, query_type=qt, chunks=[] if empty else [Chunk("c", "x", score)], answer=answer))
    return out


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(record_shapes, min_size=1, max_size=200),
    r1=st.floats(0.0, 1.0),
    r2=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_a_lower_rate_samples_a_subset(
    shapes: list[tuple[str, bool, float, bool, int]], r1: float, r2: float, seed: int
) -> None:
    """With the same signals and no floor, the sample at a lower rate is a subset of the one at a
    higher rate (the floor adapts to what was sampled, so it is per-process state by design)."""
    lo, hi = sorted((r1, r2))
    records = build(shapes, seed)
    a = Sampler(SamplingPolicy(rate=lo, min_per_window=0, low_score_threshold=0.3))
    b = Sampler(SamplingPolicy(rate=hi, min_per_window=0, low_score_threshold=0.3))
    for i, r in enumerate(records):
        pa, pb = a.decide(r, NOW + i), b.decide(r, NOW + i)
        if pa is not None:
            assert pb is not None and pb >= pa


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(record_shapes, min_size=1, max_size=200),
    rate=st.floats(0.0, 1.0),
    mults=st.tuples(*(st.floats(1.0, 30.0) for _ in range(4))),
    seed=st.integers(0, 2**16),
)
def test_returned_probability_is_the_one_used(
    shapes: list[tuple[str, bool, float, bool, int]],
    rate: float,
    mults: tuple[float, float, float, float],
    seed: int,
) -> None:
    """Against a reference that evaluates every signal: the shortcuts change nothing, a record is
    in iff its draw is below p, and p is rate x the largest applicable multiplier, capped at 1."""
    no_chunks, low, refusal, length = mults
    policy = SamplingPolicy(
        rate=rate,
        min_per_window=0,
        no_chunks_multiplier=no_chunks,
        low_score_threshold=0.3,
        low_score_multiplier=low,
        refusal_multiplier=refusal,
        unusual_length_multiplier=length,
    )
    s = Sampler(policy)
    median: dict[str, float] = {}
    for i, r in enumerate(build(shapes, seed)):
        n = len(r.answer)
        m = median.get(r.query_type, 0.0)
        median[r.query_type] = (m * 1.02 if n > m else m * 0.98) if m else float(max(n, 1))
        m = m or float(max(n, 1))
        mult = 1.0
        if not r.chunks:
            mult = max(mult, no_chunks)
        elif (r.chunks[0].score or 0.0) < 0.3:
            mult = max(mult, low)
        if looks_like_refusal(r.answer):
            mult = max(mult, refusal)
        if n > m * 3 or n * 3 < m:
            mult = max(mult, length)
        expected = min(1.0, rate * mult)
        got = s.decide(r, NOW + i)
        if rate > 0 and trace_fraction(r.trace_id) < expected:
            assert got == pytest.approx(expected)
        else:
            assert got is None


def test_plain_sampler_is_the_trace_hash_against_one_rate() -> None:
    """Signals and floors do not move a plain sampler: p is the rate, included iff hash < rate."""
    for rate in (0.0, 0.05, 0.5, 1.0):
        plain = Sampler.plain(rate)
        for i, t in enumerate(ids(3000, seed=5)):
            r = rec(t, chunks=[] if i % 2 else None, answer="I don't know." if i % 5 == 0 else "a")
            expected = rate if rate >= 1.0 or (rate > 0 and trace_fraction(t) < rate) else None
            assert plain.decide(r, NOW + i) == expected


# -- priority signals ----------------------------------------------------------------------------


def test_each_signal_raises_the_probability_by_its_multiplier() -> None:
    policy = SamplingPolicy(
        rate=0.01,
        min_per_window=0,
        no_chunks_multiplier=5.0,
        low_score_threshold=0.3,
        low_score_multiplier=4.0,
        refusal_multiplier=3.0,
        unusual_length_multiplier=2.0,
    )
    tid = low_draw_id(0.005)
    s = Sampler(policy)
    assert s.decide(rec(tid), NOW) == pytest.approx(0.01)
    assert s.decide(rec(tid, chunks=[]), NOW) == pytest.approx(0.05)
    assert s.decide(rec(tid, chunks=[Chunk("c", None, 0.1)]), NOW) == pytest.approx(0.04)
    assert s.decide(rec(tid, answer="I'm afraid the documents do not mention it."), NOW) == pytest.approx(
        0.03
    )
    for _ in range(200):  # settle the running median near 70 characters
        s.decide(rec(ids(1)[0]), NOW)
    assert s.decide(rec(tid, answer="word " * 200), NOW) == pytest.approx(0.02)
    # Signals do not compound: the largest multiplier applies, and p is capped at 1.
    assert s.decide(rec(tid, chunks=[], answer="I don't know."), NOW) == pytest.approx(0.05)
    big = Sampler(SamplingPolicy(rate=0.5, min_per_window=0, no_chunks_multiplier=10.0))
    assert big.decide(rec(tid, chunks=[]), NOW) == 1.0


def test_priority_sampling_oversamples_flagged_records() -> None:
    s = Sampler(SamplingPolicy(rate=0.05, min_per_window=0, no_chunks_multiplier=6.0))
    flagged = plain = 0
    for i, t in enumerate(ids(40_000, seed=9)):
        empty = i % 10 == 0
        if s.decide(rec(t, chunks=[] if empty else None), NOW + i) is not None:
            flagged += empty
            plain += not empty
    assert 0.25 < flagged / 4000 < 0.35  # ~0.30
    assert 0.04 < plain / 36000 < 0.06


@pytest.mark.parametrize(
    "answer",
    [
        "I don't know.",
        "I couldn't find that in the provided documents.",
        "The context does not contain information about the 2019 results.",
        "There is no information about this in the sources.",
        "I’m afraid I am unable to answer that.",
    ],
)
def test_refusals_look_like_refusals(answer: str) -> None:
    assert looks_like_refusal(answer)


def test_ordinary_answers_do_not() -> None:
    assert not looks_like_refusal("The Rhine discharges 2,330 cubic metres per second at the Dutch border.")


# -- the stratified floor --------------------------------------------------------------------------


def run_window(
    s: Sampler, start: float, seconds: float, per_type: dict[str, int], seed: int
) -> dict[str, list[float]]:
    """Records of each type spread evenly over the window; the p of every sampled one."""
    rng = random.Random(seed)
    events = [(start + rng.random() * seconds, qt) for qt, n in per_type.items() for _ in range(n)]
    events.sort()
    out: dict[str, list[float]] = {qt: [] for qt in per_type}
    for t, qt in events:
        p = s.decide(rec(f"{rng.getrandbits(128):032x}", query_type=qt), t)
        if p is not None:
            out[qt].append(p)
    return out


def test_small_slices_get_their_floor_and_honest_weights() -> None:
    policy = SamplingPolicy(rate=0.01, min_per_window=20, window_seconds=3600.0)
    counts = {"lookup": 20_000, "multi_hop": 60, "out_of_corpus": 25}
    totals: dict[str, list[float]] = {qt: [] for qt in counts}
    s = Sampler(policy)
    start = 3600.0 * 500_000
    for w in range(12):
        got = run_window(s, start + w * 3600.0, 3600.0, counts, seed=w)
        for qt, ps in got.items():
            # the floor is met for every slice that has the traffic for it
            assert len(ps) >= min(20, counts[qt]) - (2 if w == 0 else 1), (w, qt, len(ps))
            totals[qt].append(sum(1.0 / p for p in ps))
        # lookup is not inflated: it meets the floor at its own rate (~200 a window)
        assert len(got["lookup"]) < 300
    for qt, n in counts.items():
        # Horvitz–Thompson count of the slice: unbiased, so the mean over windows is near the truth
        mean = sum(totals[qt]) / len(totals[qt])
        assert abs(mean - n) / n < 0.15, (qt, mean, n)


def test_rate_zero_switches_a_type_off_even_with_a_floor() -> None:
    s = Sampler(SamplingPolicy(rate=0.5, rates={"other": 0.0}, min_per_window=50))
    assert all(s.decide(rec(t, query_type="other"), NOW) is None for t in ids(500))


@settings(max_examples=100, deadline=None)
@given(
    rate=st.floats(0.0, 1.0),
    floor=st.integers(0, 50),
    gaps=st.lists(st.floats(0.0, 5000.0), min_size=1, max_size=100),
)
def test_probability_is_always_in_range(rate: float, floor: int, gaps: list[float]) -> None:
    s = Sampler(SamplingPolicy(rate=rate, min_per_window=floor, window_seconds=600.0))
    t = NOW
    for i, (tid, gap) in enumerate(zip(ids(len(gaps)), gaps, strict=True)):
        t += gap
        p = s.decide(rec(tid, query_type=TYPES[i % 3], chunks=[] if i % 4 == 0 else None), t)
        if p is not None:
            assert 0.0 < p <= 1.0
            assert trace_fraction(tid) < p


def test_policy_rejects_bad_rates() -> None:
    with pytest.raises(ValueError):
        SamplingPolicy(rates={"lookup": 1.5})


def test_replicas_share_the_floor_instead_of_each_judging_all_of_it() -> None:
    """Four replicas, each owning a quarter of the partitions (traffic split by trace id): the
    group judges about the floor of the small slice once, not four times over."""
    policy = SamplingPolicy(rate=0.0001, min_per_window=40, window_seconds=3600.0)
    start = 3600.0 * 500_001
    rng = random.Random(11)
    events = sorted((start + rng.random() * 3600.0, f"{rng.getrandbits(128):032x}") for _ in range(2000))

    def judged(shared: bool) -> int:
        group = [Sampler(policy) for _ in range(4)]
        if shared:
            for s in group:
                s.set_share(0.25)
        n = 0
        for t, trace_id in events:
            member = group[int(trace_id[:8], 16) % 4]  # the partition of the trace, as a producer keys it
            n += member.decide(rec(trace_id, query_type="multi_hop"), t) is not None
        return n

    assert 40 <= judged(shared=True) <= 60
    assert judged(shared=False) >= 4 * 40  # what a per-replica floor costs
