"""What a decoder hands back, and how each finishes it alike: the compiled decoder calls `finish`
too, so the two paths count problems and set spans aside the same way."""

from __future__ import annotations

from dataclasses import dataclass, field

from monitor.contracts.model import RagRecord, Reject, SpanFacts
from monitor.ingest import dialects


@dataclass(slots=True)
class Decoded:
    """What one message yielded.

    Count `error` (if set) once for the message, plus every entry of `problems` (a dropped field,
    zeroed times, a dropped span); no loss is in both. A flat record whose query is a list has
    `bad_attribute` in `problems` and `missing_query` as its error, as a span's would at assembly.
    """

    spans: list[SpanFacts] = field(default_factory=list)
    # With `for_assembly`: spans not in `spans` because they cannot shape a record (and are not
    # their trace's first in the message), counted per trace id; every such trace is in `spans`.
    others: dict[str, int] = field(default_factory=dict)
    # Flat-JSON records; `query_type` is raw ("" when the producer gave none), not yet bounded.
    records: list[RagRecord] = field(default_factory=list)
    error: Reject | None = None
    detail: str = ""
    problems: list[Reject] = field(default_factory=list)


UNKNOWN_SERVICE = "unknown_service"
PAST_NS = 30 * 86400 * 10**9  # spans older than this are clock garbage, not late data
FUTURE_NS = 3600 * 10**9  # tolerated producer clock skew
HEX = frozenset("0123456789abcdef")


def bad_times(start: int, end: int, now: int) -> bool:
    return end < start or start < now - PAST_NS or end > now + FUTURE_NS


def finish(spans: list[SpanFacts], others: dict[str, int], problems: list[Reject], dropped: int) -> Decoded:
    if not spans:
        if dropped:
            return Decoded(error=Reject.DECODE_ERROR, detail=f"all {dropped} span(s) malformed (ids/shape)")
        return Decoded(error=Reject.EMPTY, detail="no spans")
    if dropped:
        problems.extend([Reject.DECODE_ERROR] * dropped)
    if not problems:
        return Decoded(spans=spans, others=others)
    n_spans = len(spans) + sum(others.values()) + dropped
    return Decoded(spans=spans, others=others, problems=problems, detail=summary(problems, n_spans))


def set_aside(spans: list[SpanFacts], lean: bool) -> tuple[list[SpanFacts], dict[str, int]]:
    """With `lean` (`decode`'s `for_assembly`): the spans to assemble, and the inert ones after
    their trace's first span counted per trace instead."""
    others: dict[str, int] = {}
    if not lean:
        return spans, others
    kept: list[SpanFacts] = []
    seen: set[str] = set()
    for s in spans:
        tid = s.trace_id
        if tid in seen and dialects.is_inert(s):
            others[tid] = others.get(tid, 0) + 1
        else:
            seen.add(tid)
            kept.append(s)
    return kept, others


def summary(problems: list[Reject], n_spans: int = 0) -> str:
    """For the log line that counts each problem: which reasons, how many, out of how many spans."""
    if not problems:
        return ""
    counts: dict[str, int] = {}
    for p in problems:
        counts[p.value] = counts.get(p.value, 0) + 1
    text = ", ".join(f"{k} x{n}" for k, n in counts.items())
    return f"{text} in {n_spans} span(s)" if n_spans else text
