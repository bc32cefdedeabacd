"""The sampler: deterministic by trace id, subset-consistent, priority signals, the per-slice floor,
and the inclusion probability it returns is the one actually used."""

from __future__ import annotations

import math
import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import python_child

from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.samples import blake2b_fraction
from monitor.ingest.config import SamplingPolicy
from monitor.ingest.sampler import Sampler, looks_like_refusal, refusal_reference, trace_fraction

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
from monitor.contracts.model import Chunk, RagRecord
from monitor.ingest.config import SamplingPolicy
from monitor.ingest.sampler import Sampler, trace_fraction
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
    """Every replica must reach the same decision: no per-process hash salt, no random state, and
    the same draws whether or not the hash was compiled (the other process uses the reference)."""
    trace_ids = ids(2000, seed=11)
    theirs = python_child(_CHILD, trace_ids, PYTHONHASHSEED="12345", RAGMON_PURE_PYTHON="1")
    s = Sampler(SamplingPolicy(rate=0.1, min_per_window=0))
    ours = []
    for i, t in enumerate(trace_ids):
        r = rec(t, chunks=[] if i % 3 == 0 else [Chunk("c", "x", 0.9)], answer="a" * (20 + i % 7))
        ours.append([trace_fraction(t), s.decide(r, NOW + i)])
    assert theirs == ours
    assert sum(p is not None for _, p in ours) > 100  # the comparison covered real decisions


@settings(max_examples=300)
@given(st.text(max_size=300) | st.text("0123456789abcdef", min_size=32, max_size=32))
def test_the_compiled_draw_is_the_blake2b_reference(trace_id: str) -> None:
    """Ids of every length around BLAKE2b's 128-byte blocks, and non-ASCII ones, give the same
    draw in `_accounting.c` as in hashlib."""
    if os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0") and not os.environ.get(
        "RAGMON_PURE_PYTHON"
    ):
        assert trace_fraction is not blake2b_fraction, "the compiled trace hash was not built"
    assert trace_fraction(trace_id) == blake2b_fraction(trace_id)


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
    floor=st.integers(0, 30),
    seed=st.integers(0, 2**16),
)
def test_a_lower_rate_samples_a_subset(
    shapes: list[tuple[str, bool, float, bool, int]], r1: float, r2: float, floor: int, seed: int
) -> None:
    """With signals and floors on, over several windows, the sample at a lower rate is a subset
    of the one at a higher rate: nothing but the rate differs between the two decisions."""
    lo, hi = sorted((r1, r2))
    records = build(shapes, seed)
    kw = {"min_per_window": floor, "window_seconds": 40.0, "low_score_threshold": 0.3}
    a = Sampler(SamplingPolicy(rate=lo, **kw))
    b = Sampler(SamplingPolicy(rate=hi, **kw))
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
        window_seconds=30.0,
        no_chunks_multiplier=no_chunks,
        low_score_threshold=0.3,
        low_score_multiplier=low,
        refusal_multiplier=refusal,
        unusual_length_multiplier=length,
    )
    s = Sampler(policy)
    running: dict[str, float] = {}
    frozen: dict[str, tuple[int, float]] = {}  # the median each slice's window decides on
    for i, r in enumerate(build(shapes, seed)):
        n = len(r.answer)
        window = int((NOW + i) // policy.window_seconds)
        m = running.get(r.query_type, 0.0)
        if frozen.get(r.query_type, (-1, 0.0))[0] != window:
            frozen[r.query_type] = (window, 2.0 ** (round(2 * math.log2(m)) / 2) if m else 0.0)
        running[r.query_type] = (m * 1.02 if n > m else m * 0.98) if m else float(max(n, 1))
        m = frozen[r.query_type][1]
        mult = 1.0
        if not r.chunks:
            mult = max(mult, no_chunks)
        elif (r.chunks[0].score or 0.0) < 0.3:
            mult = max(mult, low)
        if looks_like_refusal(r.answer):
            mult = max(mult, refusal)
        if m and (n > m * 3 or n * 3 < m):  # the length signal waits for a window's median
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
    # frozen when the next window opens: the length signal uses it from then on
    later = NOW + policy.window_seconds
    assert s.decide(rec(tid, answer="word " * 200), NOW) == pytest.approx(0.01)
    assert s.decide(rec(tid, answer="word " * 200), later) == pytest.approx(0.02)
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


def test_a_flood_of_one_signal_takes_at_most_its_share_of_the_judgements() -> None:
    """A producer sending nothing but chunkless records (x4) gets x4 in the first window it is
    seen; from the next, that signal adds at most `signal_max_share` (0.5) of the slice's
    judgements: x2, half the spend. A few such records keep their x4. The weights stay 1/p, so
    the estimated volume is still right."""
    policy = SamplingPolicy(rate=0.05, min_per_window=0, window_seconds=60.0)
    base = 60.0 * 28_333_334  # a window start
    tids = iter(ids(30_000, seed=17))

    def window(s: Sampler, k: int, chunkless: float) -> list[float]:
        """The p of every sampled chunkless record of window k (2000 records, `chunkless` of them
        without chunks); asserts the weighted count of those records."""
        got: list[float] = []
        flagged = 0
        for i in range(2000):
            empty = i < 2000 * chunkless
            flagged += empty
            p = s.decide(rec(next(tids), chunks=[] if empty else None), base + 60.0 * k + i * 0.02)
            if p is not None and empty:
                got.append(p)
        assert sum(1 / p for p in got) == pytest.approx(flagged, rel=0.2)
        return got

    flood = Sampler(policy)
    assert set(window(flood, 0, 1.0)) == {0.2}  # x4: no window before it to go by
    for k in (1, 2, 3):
        ps = window(flood, k, 1.0)
        assert 0.085 < ps[0] < 0.115 and len(set(ps)) == 1, (k, ps[0])  # ~x2
        assert 140 < len(ps) < 260  # judgements halved: ~200 of 2000, not ~400
    few = Sampler(policy)
    for k in range(3):
        assert set(window(few, k, 0.1)) == {0.2}


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


def _compiled_refusal_required() -> None:
    if os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0") and not os.environ.get(
        "RAGMON_PURE_PYTHON"
    ):
        assert looks_like_refusal is not refusal_reference, "the compiled refusal check was not built"


def test_the_compiled_refusal_check_lowers_every_character_as_python_does() -> None:
    """Each character that lower() changes (KELVIN SIGN to "k"; U+0130 to "i" and a combining
    dot, so it does not make "insufficient"), the right quote, and everything below U+0800, in
    the places where it could complete or break a mark."""
    _compiled_refusal_required()
    chars = [c for c in map(chr, range(0x110000)) if c.lower() != c or ord(c) < 0x800 or c == "\u2019"]
    for c in chars:
        for text in (f"not {c}now", f"{c}nsufficient", f"don{c}t know", f"I'M {c}FRAID", c * 3):
            assert looks_like_refusal(text) == refusal_reference(text), (hex(ord(c)), text)


@settings(max_examples=500)
@given(
    st.lists(
        st.sampled_from(
            ["not", "know", "n't", "\u2019", "İ", "K", " ", "found in", "I", "unable to", "é", "x" * 97]
        )
        | st.text(max_size=8),
        max_size=30,
    )
)
def test_the_compiled_refusal_check_is_the_reference(parts: list[str]) -> None:
    """Texts built from marks' pieces, wide characters and filler, past the 400 characters
    scanned too: a mark cut at the edge is not found by either."""
    answer = "".join(parts)
    assert looks_like_refusal(answer) == refusal_reference(answer)
    edge = "x" * 396 + answer
    assert looks_like_refusal(edge) == refusal_reference(edge)


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
            if w == 0:  # the first window this process sees has no volume to set its floor from
                assert all(p == pytest.approx(0.01) for p in ps)
            else:  # the floor is met for every slice that has the traffic for it
                assert len(ps) >= min(20, counts[qt]) - 1, (w, qt, len(ps))
            totals[qt].append(sum(1.0 / p for p in ps))
        # lookup is not inflated: it meets the floor at its own rate (~200 a window)
        assert len(got["lookup"]) < 300
    for qt, n in counts.items():
        # Horvitz–Thompson count of the slice: unbiased, so the mean over windows is near the truth
        mean = sum(totals[qt][1:]) / len(totals[qt][1:])
        assert abs(mean - n) / n < 0.15, (qt, mean, n)


def test_a_process_started_mid_window_scales_what_it_saw() -> None:
    """Started 3/4 through a window, a process saw a quarter of it: its volume is scaled up, so the
    next window's floor p is what a process that saw the whole window would use."""
    policy = SamplingPolicy(rate=0.0, rates={"multi_hop": 0.001}, min_per_window=20, window_seconds=3600.0)
    start = 3600.0 * 500_002
    whole, late = Sampler(policy), Sampler(policy)
    rng = random.Random(4)
    events = sorted((start + rng.random() * 3600.0, f"{rng.getrandbits(128):032x}") for _ in range(400))
    for t, trace_id in events:
        whole.decide(rec(trace_id, query_type="multi_hop"), t)
        if t >= start + 2700.0:
            late.decide(rec(trace_id, query_type="multi_hop"), t)
    tid = low_draw_id(0.001, seed=2)
    p_whole = whole.decide(rec(tid, query_type="multi_hop"), start + 3600.0 + 1)
    # 1.25 x 20 / 400 = 0.0625, on the grid: 2^-4
    assert p_whole == pytest.approx(0.0625)
    assert late.decide(rec(tid, query_type="multi_hop"), start + 3600.0 + 1) == p_whole


def test_rate_zero_switches_a_type_off_even_with_a_floor() -> None:
    s = Sampler(SamplingPolicy(rate=0.5, rates={"other": 0.0}, min_per_window=50, window_seconds=60.0))
    assert all(s.decide(rec(t, query_type="other"), NOW + i) is None for i, t in enumerate(ids(500)))


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


def timed_traffic(windows: int, per_window: dict[str, int], seed: int) -> list[tuple[float, RagRecord]]:
    """Records with start times, spread over `windows` hour-long windows, in arrival order."""
    rng = random.Random(seed)
    start = 3600.0 * 500_010
    out = []
    for w in range(windows):
        for qt, n in per_window.items():
            for _ in range(n):
                t = start + (w + rng.random()) * 3600.0
                empty = rng.random() < 0.05
                answer = "I don't know." if rng.random() < 0.05 else "x" * rng.choice((60, 70, 80, 400))
                r = rec(
                    f"{rng.getrandbits(128):032x}", query_type=qt, chunks=[] if empty else None, answer=answer
                )
                r.start_ns = int(t * 1e9)
                out.append((t, r))
    out.sort(key=lambda e: e[0])
    return out


def test_floors_and_signals_on_a_lower_rate_is_a_subset() -> None:
    """The reviewer's check: 5,000 traces, floors and every signal on, rates 0.05 and 0.1. The
    0.05 sample is inside the 0.1 one, and repeated runs pick the same traces."""
    traffic = timed_traffic(4, {"lookup": 1000, "comparison": 200, "out_of_corpus": 50}, seed=21)

    def picked(rate: float) -> set[str]:
        s = Sampler(
            SamplingPolicy(rate=rate, min_per_window=20, window_seconds=3600.0, low_score_threshold=0.5)
        )
        return {r.trace_id for t, r in traffic if s.decide(r, t + 0.5) is not None}

    low, high = picked(0.05), picked(0.1)
    assert len(low) > 200 and len(high) > len(low)
    assert low <= high
    assert picked(0.1) == high


def test_redelivery_decides_as_the_first_delivery_did() -> None:
    """A redelivery arrives later (a rebalance, a restarted fetch), possibly after its window has
    closed: decided on the window the record belongs to, it gets the same p as the first time."""
    traffic = timed_traffic(3, {"lookup": 800, "multi_hop": 40}, seed=22)
    s = Sampler(SamplingPolicy(rate=0.05, min_per_window=20, window_seconds=3600.0))
    rng = random.Random(5)
    first: dict[str, float | None] = {}
    again: list[tuple[float, RagRecord]] = []
    for t, r in traffic:
        first[r.trace_id] = s.decide(r, t + 0.5)
        if rng.random() < 0.2:
            again.append((t, r))
        while again and again[0][0] < t - 600.0:  # redelivered ten minutes later
            _, r0 = again.pop(0)
            assert s.decide(r0, t) == first[r0.trace_id], r0.trace_id
    assert sum(p is not None for p in first.values()) > 100


def test_replicas_mostly_agree_with_one_process() -> None:
    """Two members, each with half the partitions, decide the next window as one process seeing
    everything would: their volumes and medians land on the same grid values."""
    traffic = timed_traffic(2, {"lookup": 2000, "multi_hop": 120}, seed=23)
    policy = SamplingPolicy(rate=0.02, min_per_window=30, window_seconds=3600.0)
    whole = Sampler(policy)
    members = [Sampler(policy), Sampler(policy)]
    for m in members:
        m.set_share(0.5)
    second = traffic[0][0] // 3600.0 + 1
    same = n = 0
    for t, r in traffic:
        mine = members[int(r.trace_id[:8], 16) % 2].decide(r, t + 0.5)
        theirs = whole.decide(r, t + 0.5)
        if t // 3600.0 == second:
            n += 1
            same += mine == theirs
    assert same / n > 0.99, same / n


def test_replicas_share_the_floor_instead_of_each_judging_all_of_it() -> None:
    """Four replicas, each owning a quarter of the partitions (traffic split by trace id): the
    group judges about the floor of the small slice once, not four times over."""
    policy = SamplingPolicy(rate=0.0001, min_per_window=40, window_seconds=3600.0)
    start = 3600.0 * 500_001
    rng = random.Random(11)
    events = sorted((start + rng.random() * 7200.0, f"{rng.getrandbits(128):032x}") for _ in range(4000))

    def judged(shared: bool) -> int:
        """Judged in the second window (the first has no volume to set a floor from)."""
        group = [Sampler(policy) for _ in range(4)]
        if shared:
            for s in group:
                s.set_share(0.25)
        n = 0
        for t, trace_id in events:
            member = group[int(trace_id[:8], 16) % 4]  # the partition of the trace, as a producer keys it
            judged = member.decide(rec(trace_id, query_type="multi_hop"), t) is not None
            n += judged and t >= start + 3600.0
        return n

    assert 40 <= judged(shared=True) <= 80
    assert judged(shared=False) >= 4 * 40  # what a per-replica floor costs


def test_a_sampled_record_s_stratum_is_its_kind_not_its_draw() -> None:
    """The stratum names the signal with the largest configured multiplier that applies to the
    record, whatever raised its p: a refusal-looking answer sampled by the floor, where `decide`
    had no need to look at the answer, is still a refusal."""
    policy = SamplingPolicy(
        rate=0.01,
        min_per_window=0,
        no_chunks_multiplier=5.0,
        low_score_threshold=0.3,
        low_score_multiplier=4.0,
        refusal_multiplier=3.0,
    )
    tid = low_draw_id(0.005)
    s = Sampler(policy)
    refusal = "I'm afraid the documents do not mention it."
    for record, stratum in (
        (rec(tid), "rate"),
        (rec(tid, chunks=[]), "no_chunks"),
        (rec(tid, chunks=[Chunk("c", None, 0.1)]), "low_score"),
        (rec(tid, answer=refusal), "refusal"),
        (rec(tid, chunks=[], answer=refusal), "no_chunks"),  # the larger multiplier
        (rec(tid, chunks=[Chunk("c", None, 0.1)], answer=refusal), "low_score"),
    ):
        assert s.decide(record, NOW) is not None
        assert s.stratum == stratum, record
    # A draw above what the refusal signal gives (0.03), sampled by the floor alone: the same kind.
    floored = Sampler(SamplingPolicy(rate=0.01, min_per_window=10**6, refusal_multiplier=3.0))
    high = next(t for t in ids(100_000, 3) if 0.2 < trace_fraction(t) < 0.3)
    floored.decide(rec(ids(1, 4)[0]), NOW)  # the first window: seen, so the next one has a floor
    assert floored.decide(rec(high, answer=refusal), NOW + floored.policy.window_seconds) == 1.0
    assert floored.stratum == "refusal"
