"""The ingest stage's per-record accounting: what one finished record changes, held in one object.

Each record the ingest stage finishes is counted into its (service, query_type) series, its
(service, query_type, release) RED series (the service's own durations, errors, tokens and USD,
priced by the `PriceBook`), the lag tally, the retrieval-drift observer and the sampler, whose
decision says whether it is produced. `RecordAccounting` holds that hot state: the label cache
(raw labels to bounded ones and their series), the price book, the sampler, the retrieval observer
and the lag tally. Its `count` is the reference.

`_accounting.c` defines its compiled twin, `_accounting.RecordAccounting`: the same constructor,
attributes and methods, chosen at start-up (`ACCOUNTING`, as `monitor.plumbing.compiled.choose`
chooses the decoder and assembler; `RAGMON_PURE_PYTHON=1` keeps this one). The twin's `account`
counts in one call the run of records on `count`'s common path — labels cached and allowed, a
drift slice that neither completes its reference nor is due a check, a sampling window that does
not roll and leaves the record unsampled — and stops at the first it leaves to the stage; the
reference's counts none. The twin writes only what `count` would write, through the attributes the
owning classes declare public as their C seam (each says so in its docstring), found by name when
`init` is called (a name missing or not a slot: ValueError): `RecordSeries`, `ServiceSeries` and
`HistogramTally` (monitor.contracts.metrics), `PriceBook.cache` (here), `Sampler.slices`,
`SliceState` and `FrozenWindow` (read only) (monitor.ingest.sampler), and the public fields of
`RagRecord`, `Chunk`, `Finished` and `MessageRef`. Retrieval drift owns its per-record state: the
twin reaches it only through the retrieval observer's `windows`, the drift stage's `RecordWindow`s,
whose `push` it does for a record after which the slice need not act, on the fields that class's
`C_SEAM` names (learnt from the first window met, by those names: the ingest stage does not import
the drift stage; a class that does not declare them is left to Python). It never touches the drift
slice itself (`SliceDrift`: its policy, features, reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any, Protocol, cast

from monitor.contracts.metrics import HistogramTally, RecordSeries, ServiceSeries
from monitor.contracts.model import Chunk, RagRecord
from monitor.ingest.assemble import Finished
from monitor.ingest.sampler import FrozenWindow, Sampler, SliceState, looks_like_refusal
from monitor.kafka.offsets import MessageRef, RefMaker, new_refs
from monitor.llm.usage import Price, price_for
from monitor.plumbing.compiled import choose

# A raw (service, query_type, release)'s bounded labels: service, query type, whether the raw
# query type was outside the allow-list, the series of the bounded pair and the RED series of the
# bounded triple.
Labels = tuple[str, str, bool, RecordSeries, ServiceSeries]

_MAX_MODELS = 1024  # model names remembered with their price; spans may say anything


class PriceBook:
    """USD per token, (input, output), of each generator model the spans name, from a price table
    in USD per million tokens (`monitor.llm.usage.price_for`: exact, else the longest prefix);
    None for a model the table lacks (its tokens are counted, not priced). `cache` (model to
    answer) is the C seam: the compiled accounting reads it, and leaves a model not in it to
    `price`."""

    __slots__ = ("cache", "table")

    def __init__(self, table: Mapping[str, Price]) -> None:
        self.table = table
        self.cache: dict[str | None, tuple[float, float] | None] = {}

    def price(self, model: str | None) -> tuple[float, float] | None:
        cache = self.cache
        if model in cache:
            return cache[model]
        p = price_for(model, self.table) if model else None
        answer = None if p is None else (p.input / 1e6, p.output / 1e6)
        if len(cache) >= _MAX_MODELS:
            cache.clear()
        cache[model] = answer
        return answer


class RetrievalObserver(Protocol):
    """Where every record's retrieval goes (chunk count, top score): the drift stage's
    `RetrievalDriftMonitor`, built and handed over by the wiring. `windows` (by bounded query
    type: the drift stage's `RecordWindow`s) is the compiled twin's seam: it does a window's
    `push` where the slice need not act after it (see the module docstring)."""

    @property
    def windows(self) -> Mapping[str, Any]: ...

    def observe(self, query_type: str, chunk_count: int, top_score: float | None) -> None: ...


class RecordAccounting:
    """The ingest stage's per-record state and the counting of one record into it (the module
    docstring). `retrieval` None: no retrieval drift is watched."""

    __slots__ = ("labels", "lag", "prices", "retrieval", "sampler")

    def __init__(
        self, sampler: Sampler, retrieval: RetrievalObserver | None, lag: HistogramTally, prices: PriceBook
    ) -> None:
        # raw (service, query_type, release) -> bounded labels, filled by the stage, which bounds them
        self.labels: dict[tuple[str, str, str], Labels] = {}
        self.sampler = sampler
        self.retrieval = retrieval
        self.lag = lag
        self.prices = prices

    def count(self, record: RagRecord, series: RecordSeries, red: ServiceSeries, now: float) -> float | None:
        """One record whose `query_type` is already the bounded one: counted into `series`, its
        RED series `red`, the retrieval observer and the lag tally, then the sampler's inclusion
        probability (None: not sampled). `now` is wall-clock seconds."""
        chunks = record.chunks
        n_chunks = len(chunks)
        top = chunks[0].score if n_chunks else None
        series.observe(n_chunks, top)
        red.observe(record, self.prices)
        if self.retrieval is not None:
            self.retrieval.observe(record.query_type, n_chunks, top)
        if record.end_ns:
            self.lag.observe(max(0.0, now - record.end_ns / 1e9))
        return self.sampler.decide(record, now)

    def account(self, finished: list[Finished], start: int, now: float) -> int:
        """From `start`, each finished trace on `count`'s common path counted and its messages
        released, up to the first that is not (returned: the stage finishes that one). Here none
        is: the stage finishes every record, and `count` counts it."""
        return start


def _compiled() -> ModuleType | None:
    """`_accounting`, told the record classes whose public fields it reads, the sampler's state
    classes and its refusal check; None where it was not built."""
    try:
        from monitor.ingest import _accounting
    except ImportError:
        return None
    _accounting.init(
        record=RagRecord,
        chunk=Chunk,
        finished=Finished,
        message_ref=MessageRef,
        record_series=RecordSeries,
        service_series=ServiceSeries,
        price_book=PriceBook,
        histogram_tally=HistogramTally,
        slice_state=SliceState,
        frozen_window=FrozenWindow,
        looks_like_refusal=looks_like_refusal,
    )
    return _accounting


_COMPILED, ACCOUNTING = choose("record accounting", "monitor.ingest._accounting", _compiled)
# The class the ingest stage counts records with: the compiled twin where it was built.
Accounting: type[RecordAccounting] = (
    RecordAccounting if _COMPILED is None else cast("type[RecordAccounting]", _COMPILED.RecordAccounting)
)
# `offsets.new_refs` (the offset tracker's hold on each message), compiled beside it.
NEW_REFS: RefMaker = new_refs if _COMPILED is None else _COMPILED.new_refs
