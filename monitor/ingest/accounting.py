"""The ingest stage's per-record accounting: what one finished record changes, held in one object.

Each record the ingest stage finishes is counted into its (service, query_type) series, the lag
tally, the retrieval-drift observer and the sampler, whose decision says whether it is produced.
`RecordAccounting` holds that hot state: the label cache (raw labels to bounded ones and their
series), the sampler, the retrieval observer and the lag tally. Its `count` is the reference.

`_accounting.c` defines its compiled twin, `_accounting.RecordAccounting`: the same constructor,
attributes and methods, chosen at start-up (`ACCOUNTING`, as `monitor.ingest.compiled.choose`
chooses the decoder and assembler; `RAGMON_PURE_PYTHON=1` keeps this one). The twin's `account`
counts in one call the run of records on `count`'s common path — labels cached and allowed, a
drift slice that neither completes its reference nor is due a check, a sampling window that does
not roll and leaves the record unsampled — and stops at the first it leaves to the stage; the
reference's counts none. The twin writes only what `count` would write, through the attributes the
owning classes declare public as their C seam (each says so in its docstring): `RecordSeries` and
`HistogramTally` (monitor.metrics), `Sampler.slices`, `SliceState` and `FrozenWindow` (read only)
(monitor.ingest.sampler), the retrieval observer's `slices` and their class's fields (the drift
stage's `SliceDrift`, learnt from the first slice met: the ingest stage does not import the drift
stage), and the public fields of `RagRecord`, `Chunk`, `Finished` and `MessageRef`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any, Protocol, cast

from monitor.ingest.assemble import Finished
from monitor.ingest.compiled import choose
from monitor.ingest.sampler import FrozenWindow, Sampler, SliceState, looks_like_refusal
from monitor.kafka.offsets import MessageRef, RefMaker, new_refs
from monitor.metrics import HistogramTally, RecordSeries
from monitor.model import Chunk, RagRecord

# A raw (service, query_type)'s bounded labels: service, query type, whether the raw query type
# was outside the allow-list, and the series of the bounded pair.
Labels = tuple[str, str, bool, RecordSeries]


class RetrievalObserver(Protocol):
    """Where every record's retrieval goes (chunk count, top score): the drift stage's
    `RetrievalDriftMonitor`, built and handed over by the wiring. `slices` (by bounded query type)
    is the compiled twin's seam: it updates a slice as `observe` would, where that is only window
    arithmetic (see the module docstring)."""

    @property
    def slices(self) -> Mapping[str, Any]: ...

    def observe(self, query_type: str, chunk_count: int, top_score: float | None) -> None: ...


class RecordAccounting:
    """The ingest stage's per-record state and the counting of one record into it (the module
    docstring). `retrieval` None: no retrieval drift is watched."""

    __slots__ = ("labels", "lag", "retrieval", "sampler")

    def __init__(self, sampler: Sampler, retrieval: RetrievalObserver | None, lag: HistogramTally) -> None:
        self.labels: dict[tuple[str, str], Labels] = {}  # filled by the stage, which bounds the labels
        self.sampler = sampler
        self.retrieval = retrieval
        self.lag = lag

    def count(self, record: RagRecord, series: RecordSeries, now: float) -> float | None:
        """One record whose `query_type` is already the bounded one: counted into `series`, the
        retrieval observer and the lag tally, then the sampler's inclusion probability (None: not
        sampled). `now` is wall-clock seconds."""
        chunks = record.chunks
        n_chunks = len(chunks)
        top = chunks[0].score if n_chunks else None
        series.observe(n_chunks, top)
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
        RagRecord,
        Chunk,
        Finished,
        MessageRef,
        RecordSeries,
        HistogramTally,
        SliceState,
        FrozenWindow,
        looks_like_refusal,
    )
    return _accounting


_COMPILED, ACCOUNTING = choose("record accounting", "monitor.ingest._accounting", _compiled)
# The class the ingest stage counts records with: the compiled twin where it was built.
Accounting: type[RecordAccounting] = (
    RecordAccounting if _COMPILED is None else cast("type[RecordAccounting]", _COMPILED.RecordAccounting)
)
# `offsets.new_refs` (the offset tracker's hold on each message), compiled beside it.
NEW_REFS: RefMaker = new_refs if _COMPILED is None else _COMPILED.new_refs
