"""Types of the compiled record accounting (`_accounting.c`); see `monitor.ingest.accounting`."""

from collections.abc import Callable
from typing import Any

from monitor.contracts.metrics import HistogramTally, RecordSeries, ServiceSeries
from monitor.contracts.model import RagRecord
from monitor.ingest.accounting import Labels, PriceBook, RetrievalObserver
from monitor.ingest.assemble import Finished
from monitor.ingest.sampler import Sampler

def init(
    *,
    record: type,
    chunk: type,
    finished: type,
    message_ref: type,
    record_series: type,
    service_series: type,
    price_book: type,
    histogram_tally: type,
    slice_state: type,
    frozen_window: type,
    looks_like_refusal: Callable[[str], bool],
) -> None: ...

class RecordAccounting:
    """`accounting.RecordAccounting`'s compiled twin."""

    @property
    def labels(self) -> dict[tuple[str, str, str], Labels]: ...
    @property
    def sampler(self) -> Sampler: ...
    @property
    def retrieval(self) -> RetrievalObserver | None: ...
    @property
    def lag(self) -> HistogramTally: ...
    @property
    def prices(self) -> PriceBook: ...
    def __init__(
        self, sampler: Sampler, retrieval: RetrievalObserver | None, lag: HistogramTally, prices: PriceBook
    ) -> None: ...
    def count(
        self, record: RagRecord, series: RecordSeries, red: ServiceSeries, now: float, /
    ) -> float | None: ...
    def account(self, finished: list[Finished], start: int, now: float, /) -> int: ...

def new_refs(partition: Any, messages: list[Any], last: int | None, /) -> list[Any]: ...
def trace_fraction(trace_id: str, /) -> float: ...
def refusal_marks(index: tuple[tuple[str, tuple[str, ...]], ...], scan_chars: int, /) -> None: ...
def looks_like_refusal(answer: str, /) -> bool: ...
