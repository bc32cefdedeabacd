"""Types of the compiled record accounting (`_accounting.c`); see `IngestStage._finish_all`."""

from collections.abc import Callable
from typing import Any

def init(
    record: type,
    chunk: type,
    finished: type,
    message_ref: type,
    record_series: type,
    histogram_tally: type,
    slice_drift: type,
    sampler_slice: type,
    sampler_frozen: type,
    looks_like_refusal: Callable[[str], bool],
    /,
) -> None: ...
def account(
    finished: list[Any],
    start: int,
    now: float,
    labels: dict[tuple[str, str], Any],
    sampler: Any,
    drift: Any,
    lag: Any,
    /,
) -> int: ...
def new_refs(partition: Any, messages: list[Any], last: int | None, /) -> list[Any]: ...
def trace_fraction(trace_id: str, /) -> float: ...
