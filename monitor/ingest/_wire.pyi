"""Types of the compiled OTLP span decoder (`_wire.c`); see `monitor.ingest.decode`."""

from collections.abc import Callable, Sequence
from typing import Any

from monitor.model import Reject, SpanFacts, SpanRole

def init(
    schema: Sequence[Sequence[tuple[int, int, int]]],
    keys: Sequence[str],
    prefixes: Sequence[str],
    merged_events: Sequence[str],
    span_facts: type[SpanFacts],
    root: SpanRole,
    bad_attribute: Reject,
    bad_timestamp: Reject,
    apply: Callable[[SpanFacts, dict[str, Any]], None],
    wants_events: Callable[[dict[str, Any]], bool],
    unknown_service: str,
    /,
) -> None: ...
def decode_spans(value: bytes, now_ns: int, /) -> tuple[list[SpanFacts], list[Reject], int] | None: ...
