"""Types of the compiled trace assembler (`_assembly.c`); see `monitor.ingest.assemble`."""

from collections.abc import Callable, Mapping, Sequence

from monitor.contracts.model import Chunk, RagRecord, Reject, SpanFacts, SpanRole
from monitor.ingest.assemble import Finished
from monitor.ingest.config import AssemblyConfig
from monitor.kafka.offsets import MessageRef

def setup(
    span_facts: type[SpanFacts],
    chunk: type[Chunk],
    message_ref: type[MessageRef],
    rag_record: type[RagRecord],
    rag_record_fields: Sequence[str] | None,
    finished: type[Finished],
    finished_fields: Sequence[str] | None,
    roles: tuple[SpanRole, SpanRole, SpanRole, SpanRole, SpanRole],
    rejects: tuple[Reject, Reject, Reject, Reject, Reject, Reject],
    costs: tuple[int, int],
    sort_by_end: Callable[[list[SpanFacts]], list[SpanFacts]],
    sort_by_start: Callable[[list[SpanFacts]], list[SpanFacts]],
    max_by_end: Callable[[list[SpanFacts]], SpanFacts],
    stage_facts: Callable[
        [list[SpanFacts], list[SpanFacts], list[SpanFacts]], tuple[int, int, int | None, int | None]
    ],
    build_record: Callable[[str, list[SpanFacts]], tuple[RagRecord | None, Reject | None]],
    /,
) -> None: ...

class _OpenTrace:
    @property
    def spans(self) -> list[SpanFacts]: ...
    @property
    def refs(self) -> list[MessageRef]: ...
    @property
    def first_seen(self) -> float: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def root_seen(self) -> bool: ...

class Assembler:
    def __init__(self, config: AssemblyConfig) -> None: ...
    @property
    def open_traces(self) -> int: ...
    @property
    def open_bytes(self) -> int: ...
    @property
    def _open(self) -> dict[str, _OpenTrace]: ...
    def add(self, span: SpanFacts, ref: MessageRef, size: int, now: float) -> list[Finished]: ...
    def add_spans(
        self,
        spans: Sequence[SpanFacts],
        ref: MessageRef,
        size: int,
        now: float,
        out: list[Finished],
        others: Mapping[str, int] | None = None,
    ) -> None: ...
    def poll(self, now: float) -> list[Finished]: ...
    def next_due(self) -> float | None: ...
    def flush(self, *, complete_only: bool) -> list[Finished]: ...
    def drop_partitions(self, partitions: set[object]) -> list[MessageRef]: ...
