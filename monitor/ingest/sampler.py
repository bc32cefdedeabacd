"""Which records get judged, and with what inclusion probability.

The decision is `trace_fraction(trace_id) < p`: hashing the trace id (rather than drawing a random
number) gives every replica and every redelivery of a trace the same uniform draw, so for equal `p`
the decision is the same, and a 5% sample is a subset of a 10% one.

`p` itself is chosen per record by `Sampler` — a per-query-type rate, raised for records that are
more likely to show a problem (priority signals) and for slices that would otherwise get too few
judgements in a window (the stratified floor). Whatever raised it, `decide` returns the `p` actually
used, and estimates weight the record by 1/p: oversampling then costs judge calls but never biases
a number. Because `p` only ever depends on the record and on *earlier* decisions, never on this
record's own draw, 1/p weighting stays unbiased (Horvitz–Thompson) even though `p` adapts.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from monitor.contracts.model import RagRecord, Stratum
from monitor.contracts.samples import blake2b_fraction
from monitor.ingest.config import SamplingPolicy
from monitor.plumbing.compiled import choose

__all__ = [
    "FrozenWindow",
    "Sampler",
    "SliceState",
    "looks_like_refusal",
    "refusal_reference",
    "trace_fraction",
]

# Slices are bounded by the caller (query types come from an allow-list); this only guards memory.
_MAX_SLICES = 256
_OVERFLOW = "\x00overflow"
# A refusal says so early; scanning the whole of a long answer would cost more than the decision.
_REFUSAL_SCAN_CHARS = 400
# Substrings, not the lexical judge's regex: `in` is ~4x cheaper than that alternation, and a
# priority signal may err (a false positive only costs a judgement, never biases an estimate).
_REFUSAL_MARKS = (
    "n't know",
    "not know",
    "not sure",
    "unable to",
    "cannot find",
    "cannot answer",
    "cannot determine",
    "can't find",
    "can't answer",
    "could not find",
    "couldn't find",
    "not able to",
    "not mentioned",
    "not stated",
    "not specified",
    "not provided",
    "not found in",
    "not available in",
    "no information",
    "no relevant",
    "enough information",
    "insufficient",
    "not contain",
    "n't contain",
    "not mention",
    "n't mention",
    "i'm afraid",
    "i am afraid",
)


# Every mark contains one of these; a mark is only looked for when its gate is in the text, which
# makes an ordinary answer cost 8 substring scans instead of one per mark.
_REFUSAL_GATES = ("n't", "not ", "no ", "unable", "cannot", "insufficient", "afraid", "enough")
_REFUSAL_INDEX = tuple((g, tuple(m for m in _REFUSAL_MARKS if g in m)) for g in _REFUSAL_GATES)
assert all(any(g in m for g in _REFUSAL_GATES) for m in _REFUSAL_MARKS), "a refusal mark has no gate"


def refusal_reference(answer: str) -> bool:
    """A cheap guess that the answer declines to answer (see `_REFUSAL_MARKS`); the reference
    `looks_like_refusal` is compiled from."""
    text = answer[:_REFUSAL_SCAN_CHARS].lower()
    if "\u2019" in text:
        text = text.replace("\u2019", "'")
    for gate, marks in _REFUSAL_INDEX:
        if gate in text:
            for mark in marks:
                if mark in text:
                    return True
    return False


def _compiled_refusal() -> Callable[[str], bool] | None:
    try:
        from monitor.ingest._accounting import looks_like_refusal as compiled
        from monitor.ingest._accounting import refusal_marks
    except ImportError:
        return None
    refusal_marks(_REFUSAL_INDEX, _REFUSAL_SCAN_CHARS)
    return compiled


# The same check computed in `_accounting.c` where it was built: lower() and the substring scans
# were ~12,000 instructions a call, made for every record drawn under rate x the refusal multiplier.
_compiled_refuses, _ = choose("refusal check", "monitor.ingest._accounting", _compiled_refusal)
looks_like_refusal: Callable[[str], bool] = _compiled_refuses or refusal_reference


def _compiled_fraction() -> Callable[[str], float] | None:
    try:
        from monitor.ingest._accounting import trace_fraction as compiled
    except ImportError:
        return None
    return compiled


# The same function computed in `_accounting.c` where it was built: hashlib's object round trip was a
# fifth of a record's accounting in the ingest stage.
_compiled, _ = choose("trace hash", "monitor.ingest._accounting", _compiled_fraction)
trace_fraction: Callable[[str], float] = _compiled or blake2b_fraction


# The priority signals, as indices into `FrozenWindow.mults` and `SliceState.extra`.
_NO_CHUNKS, _LOW_SCORE, _REFUSAL, _LENGTH = range(4)
# Judgements of a slice in a window below which its signals' shares say too little to cap them on.
_CAP_MIN_SAMPLES = 20


class FrozenWindow:
    """What a slice's decisions in one window rest on, fixed when the window opens.

    The C seam: `bound`, `floor_p` and `median` are read (never written) by the ingest stage's
    compiled accounting (`monitor.ingest.accounting`), which decides a record `decide` would leave
    unsampled without rolling a window."""

    __slots__ = ("bound", "floor_p", "median", "mults")

    def __init__(self, floor_p: float, median: float, max_p: float, mults: tuple[float, ...]) -> None:
        self.floor_p = floor_p
        self.median = median  # 0 = unknown: the unusual-length signal is off
        # Each signal's multiplier in this window: the configured one, or less where the signal
        # took more than `signal_max_share` of the slice's judgements in the window before.
        self.mults = mults
        # No draw at or above it can be sampled: from the configured multipliers, which the
        # capped ones never exceed (the compiled accounting leaves draws under it to `decide`).
        self.bound = max(max_p, floor_p)


class SliceState:
    """Per-query-type state: this window's count and running median (for the next window), and the
    frozen state of this window and the one before (a late or redelivered record of the previous
    window is decided on that window's state).

    The C seam: the ingest stage's compiled accounting (`monitor.ingest.accounting`) reads
    `window_end`, `cur`, `prev`, `unknown` and `rate`, and for a record `decide` leaves unsampled
    without rolling the window updates `seen` and `median` as `decide` does; the rest (rolling,
    the signals' caps, `sampled`, `extra`) stays `Sampler`'s."""

    __slots__ = (
        "count_from",
        "cur",
        "extra",
        "max_p",
        "median",
        "prev",
        "rate",
        "sampled",
        "seen",
        "unknown",
        "window",
        "window_end",
    )

    def __init__(self, rate: float, max_p: float, mults: tuple[float, ...]) -> None:
        self.rate = rate
        self.max_p = max_p  # the highest p the signals can give: above it, no need to look
        self.window = -1
        self.window_end = -1.0  # empty: the first record rolls the window in
        self.seen = 0
        self.count_from = 0.0  # when counting began in this window (its start, or the first record)
        self.median = 0.0  # running answer-length median; 0 = no answer seen yet
        # This window's judgements, and per signal those it added (drawn above the rate and the
        # floor, under the raised p): what the next window caps the signals on.
        self.sampled = 0
        self.extra = [0, 0, 0, 0]
        self.unknown = FrozenWindow(0.0, 0.0, max_p, mults)
        self.cur = self.prev = self.unknown


class Sampler:
    """Per-record inclusion probabilities: rate x priority signal, floored per query type.

    Signals do not compound: the largest applicable multiplier is used, so one record's `p` is at
    most `rate x max multiplier` (unless the floor raises it), and the common path — a draw above
    that bound — returns after one hash without looking at the record's content.

    Deterministic: within a window (epoch-aligned, chosen by the record's own start time, so a
    redelivery lands in the same one), `p` is a function of the configuration, the record and the
    slice's state frozen when the window opened — the floor's `p` from the previous window's volume,
    the answer-length median — never of arrival order or of what was sampled so far. A redelivery
    decides as the first delivery did, and since the frozen state does not depend on the rate, a
    lower configured rate samples a subset. The frozen values are rounded to a grid of half-powers
    of two, so replicas that see the same traffic through different partitions mostly land on the
    same values. A window whose predecessor this process did not see (it just started) has no
    floor and no length signal: it decides on the rate and the other signals alone.

    The C seam: `slices` (by query type) and `policy` are public for the ingest stage's compiled
    accounting (`monitor.ingest.accounting`), which reads the policy once and each slice's state
    through `SliceState`'s and `FrozenWindow`'s seams.
    """

    def __init__(self, policy: SamplingPolicy | None = None) -> None:
        self.policy = p = policy or SamplingPolicy()
        self._floor: float = p.min_per_window
        self.share = 1.0  # of the group's traffic this replica sees (see `set_share`)
        self._window = p.window_seconds
        self._no_chunks = p.no_chunks_multiplier
        self._low_score = p.low_score_threshold
        self._low_score_mult = p.low_score_multiplier
        self._refusal = p.refusal_multiplier
        self._len_factor = p.unusual_length_factor
        self._len_mult = p.unusual_length_multiplier
        mults = [p.no_chunks_multiplier, p.refusal_multiplier, p.unusual_length_multiplier]
        if p.low_score_threshold is not None:
            mults.append(p.low_score_multiplier)
        self._max_mult = max(mults)
        self._mults = (
            p.no_chunks_multiplier,
            p.low_score_multiplier,
            p.refusal_multiplier,
            p.unusual_length_multiplier,
        )
        self.slices: dict[str, SliceState] = {}
        self.stratum: Stratum = "rate"  # what `decide` last sampled a record as (`_stratum`)
        self._since = -1.0  # the first record's time: windows before it were not seen

    @classmethod
    def plain(cls, rate: float) -> Sampler:
        """A single fixed rate, no signals, no floor: the trace-id hash against `rate`."""
        return cls(
            SamplingPolicy(
                rate=rate,
                min_per_window=0,
                no_chunks_multiplier=1.0,
                refusal_multiplier=1.0,
                unusual_length_multiplier=1.0,
            )
        )

    def set_share(self, share: float) -> None:
        """This replica sees `share` of the group's traffic (its partitions' share), so it owes that
        share of each slice's floor: N replicas together judge the floor once, not N times."""
        self.share = min(1.0, max(0.0, share))
        self._floor = self.policy.min_per_window * self.share

    def rate_of(self, query_type: str) -> float:
        return self.policy.rates.get(query_type, self.policy.rate)

    def decide(self, record: RagRecord, now: float) -> float | None:
        """The inclusion probability used when `record` is sampled (weight = 1/p), None when not.

        `now` is wall-clock seconds (`time.time()`), used when the record carries no start time.
        """
        t = record.start_ns / 1e9 if record.start_ns else now
        if t > now:
            t = now  # a clock ahead of ours must not open a window early
        s = self.slices.get(record.query_type)
        if s is None:
            s = self._slice(record.query_type)
        if t < s.window_end:
            frozen = s.cur
            if t < s.window_end - self._window:
                # Late: the previous window's state if it is that one's, else nothing is known.
                frozen = s.prev if t >= s.window_end - 2 * self._window else s.unknown
        else:
            frozen = self._roll(s, t)
        s.seen += 1
        # Running median of the answer length (stochastic approximation in log space): O(1),
        # no buffer; frozen at each window's start for the decisions of that window.
        n = len(record.answer)
        m = s.median
        s.median = (m * 1.02 if n > m else m * 0.98) if m else float(max(n, 1))
        u = trace_fraction(record.trace_id)
        if u >= frozen.bound:
            return None  # the common path: neither a signal nor the floor could raise p this far
        rate = s.rate
        mults = frozen.mults
        mult = 1.0
        signal = -1
        chunks = record.chunks
        if not chunks:
            mult, signal = mults[_NO_CHUNKS], _NO_CHUNKS
        elif self._low_score is not None:
            top = chunks[0].score
            if top is not None and top < self._low_score:
                mult, signal = mults[_LOW_SCORE], _LOW_SCORE
        # The refusal check is the one costly signal: skip it when it cannot change the outcome
        # (the draw is above what it would give), which keeps the returned p exact.
        refusal = mults[_REFUSAL]
        if refusal > mult and u < rate * refusal and looks_like_refusal(record.answer):
            mult, signal = refusal, _REFUSAL
        m = frozen.median
        if mults[_LENGTH] > mult and m and (n > m * self._len_factor or n * self._len_factor < m):
            mult, signal = mults[_LENGTH], _LENGTH
        p = rate * mult
        if p > 1.0:
            p = 1.0
        if frozen.floor_p > p:
            p = frozen.floor_p
        if u >= p:
            return None
        s.sampled += 1
        if signal >= 0 and u >= rate and u >= frozen.floor_p:
            s.extra[signal] += 1
        self.stratum = self._stratum(record, frozen.median, n)
        return p

    def _stratum(self, record: RagRecord, median: float, n: int) -> Stratum:
        """What a sampled record was sampled as: of the signals that apply to it, the one with the
        largest configured multiplier (a signal set to 1 is none), else the plain rate. From the
        record and its window's median alone — not from its draw, the floor or this window's caps,
        which `decide` may have skipped a signal for — so that it names the record's kind: the
        drift detectors compare each kind with itself (monitor/drift/detector.py)."""
        best: Stratum = "rate"
        mult = 1.0
        chunks = record.chunks
        if not chunks:
            if self._no_chunks > mult:
                best, mult = "no_chunks", self._no_chunks
        elif self._low_score is not None:
            top = chunks[0].score
            if top is not None and top < self._low_score and self._low_score_mult > mult:
                best, mult = "low_score", self._low_score_mult
        if self._refusal > mult and looks_like_refusal(record.answer):
            best, mult = "refusal", self._refusal
        f = self._len_factor
        if self._len_mult > mult and median and (n > median * f or n * f < median):
            best = "length"
        return best

    def _slice(self, qt: str) -> SliceState:
        if len(self.slices) >= _MAX_SLICES:
            s = self.slices.get(_OVERFLOW)
            if s is None:
                s = self.slices[_OVERFLOW] = self._new_slice(self.policy.rate)
            return s
        s = self.slices[qt] = self._new_slice(self.rate_of(qt))
        return s

    def _new_slice(self, rate: float) -> SliceState:
        return SliceState(rate, min(1.0, rate * self._max_mult), self._mults)

    def _capped(self, s: SliceState) -> tuple[float, ...]:
        """The signals' multipliers for the window after `s`'s current one: a signal whose added
        judgements took more than `signal_max_share` of the slice's is cut to where it would have
        taken that share (the others unchanged); one under it gets its configured multiplier.

        A signal that added e judgements at multiplier m flagged x = e / (m - 1) records that the
        rate alone samples; at m' it adds x (m' - 1), which is at most share / (1 - share) of the
        slice's other judgements when m' - 1 <= share / (1 - share) * others / x. So a flood of
        chunkless records settles at 1 + share / (1 - share) times the rate (2 at the default
        0.5), whereas a few of them keep the configured 4. With too few judgements to tell, the
        current multipliers carry over."""
        used = s.cur.mults
        if s.sampled < _CAP_MIN_SAMPLES:
            return used
        share = self.policy.signal_max_share
        out = []
        for k, configured in enumerate(self._mults):
            added = s.extra[k]
            if added == 0 or used[k] <= 1.0:
                out.append(configured)
                continue
            flagged = added / (used[k] - 1.0)
            room = share / (1.0 - share) * (s.sampled - added) / flagged
            out.append(1.0 + min(configured - 1.0, room))
        return tuple(out)

    def _roll(self, s: SliceState, t: float) -> FrozenWindow:
        """Open the window holding `t`, its state frozen from the window before it."""
        w = self._window
        window = int(t // w)
        start = window * w
        if self._since < 0.0:
            self._since = t
        if window == s.window + 1:
            prev = s.cur
            observed = s.window_end - s.count_from
            seen = s.seen
            mults = self._capped(s)
        else:  # the slice was silent for the whole previous window, or is new
            prev = s.unknown
            observed = start - max(self._since, start - w)
            seen = 0
            mults = self._mults
        floor_p = 0.0
        if self._floor and s.rate > 0.0 and observed >= w / 10.0:
            # 1.25 x the floor over the previous window's volume (scaled up when this process saw
            # only part of it); after a silent window, p = 1 until the slice shows its volume.
            floor_p = 1.0 if seen == 0 else _grid(min(1.0, 1.25 * self._floor * observed / (seen * w)))
        s.prev = prev
        s.cur = FrozenWindow(floor_p, _grid(s.median, up=False) if s.median else 0.0, s.max_p, mults)
        s.window = window
        s.window_end = start + w
        s.count_from = max(start, self._since)
        s.seen = 0
        s.sampled = 0
        s.extra = [0, 0, 0, 0]
        return s.cur


def _grid(x: float, *, up: bool = True) -> float:
    """`x` on a grid of half-powers of two (rounded up, or to the nearest): estimates that differ a
    little, as replicas' do, give the same value."""
    k = 2.0 * math.log2(x)
    return float(2.0 ** ((math.ceil(k - 1e-9) if up else round(k)) / 2.0))
