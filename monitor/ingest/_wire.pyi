"""Types of the compiled OTLP span decoder (`_wire.c`); see `monitor.ingest.decode.compiled`."""

from collections.abc import Callable, Sequence
from typing import Any

from monitor.contracts.model import Chunk, Reject, SpanFacts, SpanRole
from monitor.ingest.decode.decoded import Decoded

def init(
    *,
    schema: Sequence[Sequence[tuple[int, int, int]]],
    keys: Sequence[str],
    prefixes: Sequence[str],
    merged_events: Sequence[str],
    span_facts: type[SpanFacts],
    span_facts_layout: Sequence[tuple[str, int, Any]] | None,
    chunk: type[Chunk],
    chunk_layout: Sequence[tuple[str, int, Any]] | None,
    decoded: type[Decoded],
    decoded_layout: Sequence[tuple[str, int, Any]] | None,
    span_role: type[SpanRole],
    bad_attribute: Reject,
    bad_timestamp: Reject,
    apply: Callable[[SpanFacts, dict[str, Any]], None],
    wants_events: Callable[[dict[str, Any]], bool],
    is_inert: Callable[[SpanFacts], bool],
    finish: Callable[[list[SpanFacts], dict[str, int], list[Reject], int], Decoded],
    unknown_service: str,
) -> None: ...
def set_release_keys(keys: Sequence[str], /) -> None: ...
def decode_spans(value: bytes, now_ns: int, lean: bool, /) -> Decoded | None: ...
def counts() -> tuple[int, int]: ...
def feed(
    *,
    messages: list[Any],
    refs: list[Any],
    start: int,
    now_ns: int,
    auto: bool,
    max_bytes: int,
    add_spans: Callable[..., None],
    now: float,
    finished: list[Any],
) -> int: ...

class RawText:
    """UTF-8 text left undecoded where it lies in a message; reads (buffer protocol) and compares
    as bytes: `str(raw, "utf-8")` decodes it."""

    def __buffer__(self, flags: int, /) -> memoryview: ...
