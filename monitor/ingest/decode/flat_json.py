"""Flat JSON: one RAG record a message, as hand-written producers send it (no spans to assemble)."""

from __future__ import annotations

import hashlib
from typing import Any

from monitor.contracts.model import Chunk, RagRecord, Reject
from monitor.ingest import dialects
from monitor.ingest.decode.decoded import HEX, UNKNOWN_SERVICE, Decoded, bad_times, summary


def from_flat(obj: dict[str, Any], raw: bytes, now: int) -> Decoded:
    problems: list[Reject] = []
    query = _flat_text(obj.get("query"), problems)
    if query is None or not query.strip():
        return Decoded(
            error=Reject.MISSING_QUERY, detail="flat record has no usable query", problems=problems
        )
    answer = _flat_text(obj.get("answer"), problems)
    if answer is None:
        return Decoded(
            error=Reject.MISSING_ANSWER, detail="flat record has no usable answer", problems=problems
        )

    # In this order: `problems` lists each field's problem where the producer's object has it.
    trace_id = _flat_id(obj.get("trace_id"), 16, raw, problems)
    span_id = _flat_id(obj.get("span_id"), 8, trace_id.encode(), problems)
    service = _flat_str(obj.get("service"), problems, empty=False)
    qt = obj.get("query_type")
    query_type = _flat_text(qt, problems) if qt is not None else None
    model = _flat_str(obj.get("model"), problems)
    chunks = _flat_chunks(obj.get("chunks"), problems)
    rp = obj.get("replay")
    replay = dialects.parse_bool(rp, problems) if rp is not None else False
    release = _flat_str(obj.get("release"), problems)
    start, end = _flat_times(obj.get("start"), obj.get("end"), now, problems)

    record = RagRecord(
        trace_id=trace_id,
        span_id=span_id,
        service=service or UNKNOWN_SERVICE,
        query=query,
        query_type=query_type or "",
        chunks=chunks,
        answer=answer,
        model=model,
        start_ns=start,
        end_ns=end,
        replay=replay,
        release=release or "",
    )
    return Decoded(records=[record], problems=problems, detail=summary(problems))


def _flat_str(value: Any, problems: list[Reject], *, empty: bool = True) -> str | None:
    """An optional string field: anything else (or "" where not `empty`) is a bad attribute."""
    if value is None or (isinstance(value, str) and (empty or value)):
        return value
    problems.append(Reject.BAD_ATTRIBUTE)
    return None


def _flat_chunks(value: Any, problems: list[Reject]) -> list[Chunk]:
    if isinstance(value, list):
        return dialects.chunks_from_items(value, problems)
    if value is not None:
        problems.append(Reject.BAD_ATTRIBUTE)
    return []


def _flat_times(start_s: Any, end_s: Any, now: int, problems: list[Reject]) -> tuple[int, int]:
    """Start and end in ns, either alone allowed; both zeroed (and counted) when implausible."""
    start = _seconds_to_ns(start_s)
    end = _seconds_to_ns(end_s)
    if not (start or end):
        return start, end
    if start < 0 or end < 0:
        bad = True
    elif start and end:
        bad = bad_times(start, end, now)
    else:
        bad = bad_times(start or end, start or end, now)
    if bad:
        problems.append(Reject.BAD_TIMESTAMP)
        return 0, 0
    return start, end


def _flat_text(value: Any, problems: list[Reject]) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    problems.append(Reject.BAD_ATTRIBUTE)
    return None


def _flat_id(value: Any, nbytes: int, seed: bytes, problems: list[Reject]) -> str:
    """The producer's id if it is hex (UUID dashes allowed), else a stable hash of it or of `seed`.

    Hashing keeps redelivered messages (same bytes) and reused producer ids on one trace id.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and value.strip():
        v = value.strip().lower().replace("-", "")
        if len(v) == 2 * nbytes and HEX.issuperset(v):
            return v
        seed = value.encode("utf-8", "surrogatepass")
    elif value is not None and value != "":
        problems.append(Reject.BAD_ATTRIBUTE)
    return hashlib.blake2b(seed, digest_size=nbytes).hexdigest()


def _seconds_to_ns(value: Any) -> int:
    """Epoch seconds → ns; 0 when absent, -1 when present but not a usable number."""
    if value is None:
        return 0
    if isinstance(value, int | float) and not isinstance(value, bool):
        f = float(value)
    elif isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            return -1
    else:
        return -1
    if not 0 < f < 1e12:  # also NaN; an epoch in seconds past year 33000 is not a time
        return -1
    return int(f * 1e9)
