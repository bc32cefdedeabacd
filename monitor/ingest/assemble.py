"""Trace assembly: spans that arrive in any order, across Kafka messages, become RAG records.

A trace is emitted `grace_seconds` after its root span arrives (children of a distributed trace may
trail the root), or after `timeout_seconds` if the root never comes and enough is present. Open
traces are bounded by count and by the bytes they hold: the messages their spans came from (each
charged once, whole) and the Python objects of the traces and spans kept (`TRACE_COST`,
`SPAN_COST`); the oldest goes first, even when it is the only one. A trace takes at most `max_spans_per_trace`
spans.

`Assembler` has two implementations with identical results. The compiled one (`_assembly.c`,
built by `pip install` where a C compiler exists, `build_record` included) is used when it was
built; `PyAssembler` below is the reference (tests/ingest/test_assemble_compiled.py compares them).
`RAGMON_PURE_PYTHON=1` forces the reference. `ASSEMBLER` says which one `Assembler` is.
"""

from __future__ import annotations

import functools
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from monitor.contracts.model import Chunk, RagRecord, Reject, SpanFacts, SpanRole
from monitor.ingest.config import AssemblyConfig
from monitor.ingest.dialects import is_inert
from monitor.kafka.offsets import MessageRef
from monitor.plumbing.compiled import choose, slots_layout

__all__ = ["ASSEMBLER", "SPAN_COST", "TRACE_COST", "Assembler", "Finished", "PyAssembler", "build_record"]

# What an open trace and each span it keeps hold besides their messages, charged to the byte
# bound: the span's `SpanFacts` with its ids as hex strings, its chunk objects and their text
# views or copies, its slot in the trace's list; the trace object, its two lists and its entry in
# the table of open traces. Measured as RSS growth (the allocator's rounding included; tracemalloc
# counts ~15 % less) with 100,000 one-span and 10,000 ten-span open traces of the memory bench's
# retrieval spans (`python bench/memory.py --measure-costs`): 403 B a trace and 794 B a span on
# the compiled path; 366 B and 1,107 B on the pure-Python one, of which ~130 B is the chunk text
# copied out of the message (covered by the message's charge: the message itself is not kept).
# One pair for both paths, the larger of each: the text a span carries (query, chunk text) is
# within its message's bytes, charged whole already. Uncharged, the memory bench's ~257,000 open
# one-span traces held ~290 MiB that the bound did not count.
TRACE_COST = 400
SPAN_COST = 980
_NEW_TRACE_COST = TRACE_COST + SPAN_COST


class _OpenTrace:
    """A trace waiting for its spans: the ones that can shape its record, and the messages it holds."""

    __slots__ = ("count", "first_seen", "nbytes", "refs", "root_seen", "spans")

    def __init__(self, first_seen: float, span: SpanFacts, ref: MessageRef) -> None:
        self.first_seen = first_seen
        self.spans = [span]
        self.refs = [ref]
        self.nbytes = 0  # the bytes of the messages it holds (shared ones in full), not the costs
        self.count = 0  # spans taken, kept or not
        self.root_seen = False


@dataclass(slots=True)
class Finished:
    """A trace leaving the assembler: a record, or the reason it was dropped. Either way the
    caller releases `refs` once it has dealt with it."""

    trace_id: str
    record: RagRecord | None
    reason: Reject | None
    refs: list[MessageRef]
    # The spans kept, when the trace was a request that could not be read (missing_query,
    # missing_answer, unreadable): what the stage names in its log. None otherwise.
    spans: list[SpanFacts] | None = None


_ROOT = SpanRole.ROOT
_RETRIEVER = SpanRole.RETRIEVER
_RERANKER = SpanRole.RERANKER
_LLM = SpanRole.LLM


class PyAssembler:
    """The reference assembler (the compiled `_assembly.Assembler` does the same, call for call)."""

    def __init__(self, config: AssemblyConfig) -> None:
        self._cfg = config
        self._open: OrderedDict[str, _OpenTrace] = OrderedDict()  # oldest first
        self._root_ready: deque[tuple[float, str]] = deque()  # (emit at, trace id), in time order
        # Emitted ids, to spot late spans: a set and its insertion order (lighter than an
        # OrderedDict of the same 100,000 ids; both are probed once per trace).
        self._recent: set[str] = set()
        self._recent_order: deque[str] = deque()
        self._bytes = 0

    @property
    def open_traces(self) -> int:
        return len(self._open)

    @property
    def open_bytes(self) -> int:
        return self._bytes

    def add(self, span: SpanFacts, ref: MessageRef, size: int, now: float) -> list[Finished]:
        """Take one span; returns traces forced out by capacity (usually none), and a late span
        (its trace already emitted) as a dropped `Finished` of its own."""
        out: list[Finished] = []
        self.add_spans((span,), ref, size, now, out)
        return out

    def add_spans(
        self,
        spans: Sequence[SpanFacts],
        ref: MessageRef,
        size: int,
        now: float,
        out: list[Finished],
        others: Mapping[str, int] | None = None,
    ) -> None:
        """Take the spans of one message of `size` bytes, in order; what `add` returns goes to
        `out`.

        The message is charged to the byte bound once, while any open trace holds spans of it:
        chunk text the compiled decoder leaves where it lies keeps the whole message alive, so a
        share per span would undercount what is held. A new trace is charged `TRACE_COST`, each
        span it keeps `SPAN_COST` (the objects held), until it leaves. A trace takes at most
        `max_spans_per_trace` spans; later ones are dropped (`TOO_MANY_SPANS`, one each).

        A span that cannot shape the record (`dialects.is_inert`: the HTTP, database and cache
        spans around a RAG request) is counted, not kept, unless it is its trace's first (the
        record's anchor when the trace has no root). Its message is held all the same, and
        `build_record` gives what it would have given with every span. `others` are more such
        spans, decoded only as a count per trace (`decode`'s `for_assembly`), each trace already
        among `spans`: they are counted after them.
        """
        open_ = self._open
        cfg = self._cfg
        max_traces = cfg.max_open_traces
        max_bytes = cfg.max_open_bytes
        for span in spans:
            trace = self._take(span, ref, size, now, out)
            if trace is None:
                continue
            trace.count += 1
            # Any parentless span is the root, whatever its role: a trace that is a lone LLM call
            # must not wait for the timeout.
            if not span.parent_span_id and not trace.root_seen:
                trace.root_seen = True
                self._root_ready.append((now + cfg.grace_seconds, span.trace_id))
            # Down to the bound even when the one open trace is over it alone.
            while len(open_) > max_traces or self._bytes > max_bytes:
                out.append(self._finish(next(iter(open_)), evicted=True))
        if others:
            self._add_others(others, ref, size, out)

    def _take(
        self, span: SpanFacts, ref: MessageRef, size: int, now: float, out: list[Finished]
    ) -> _OpenTrace | None:
        """`span`'s trace, opened by it or holding it now (kept unless inert); None when it is
        dropped instead (late, or over `max_spans_per_trace`), its `Finished` in `out`."""
        tid = span.trace_id
        trace = self._open.get(tid)
        if trace is None:
            if tid in self._recent:
                out.append(Finished(tid, None, Reject.LATE_SPAN, []))
                return None
            ref.acquire()
            trace = self._open[tid] = _OpenTrace(now, span, ref)
            self._bytes += _NEW_TRACE_COST
            self._charge(trace, ref, size)
            return trace
        if trace.count >= self._cfg.max_spans_per_trace:
            out.append(Finished(tid, None, Reject.TOO_MANY_SPANS, []))
            return None
        if not is_inert(span):
            trace.spans.append(span)
            self._bytes += SPAN_COST
        if trace.refs[-1] is not ref:
            ref.acquire()
            trace.refs.append(ref)
            self._charge(trace, ref, size)
        return trace

    def _charge(self, trace: _OpenTrace, ref: MessageRef, size: int) -> None:
        """`trace` now holds `ref`'s message (`size` bytes): charged once, by its first holder."""
        trace.nbytes += size
        if ref.traces == 0:
            ref.size = size
            self._bytes += size
        ref.traces += 1

    def _uncharge(self, trace: _OpenTrace) -> None:
        """`trace` leaves: its costs, and each message it held when no open trace holds it."""
        self._bytes -= TRACE_COST + SPAN_COST * len(trace.spans)
        for ref in trace.refs:
            ref.traces -= 1
            if ref.traces == 0:
                self._bytes -= ref.size

    def _add_others(self, others: Mapping[str, int], ref: MessageRef, size: int, out: list[Finished]) -> None:
        """`add_spans`' counted spans: the message's hold, and the cap, as each span would."""
        open_ = self._open
        max_bytes = self._cfg.max_open_bytes
        max_spans = self._cfg.max_spans_per_trace
        for tid, n in others.items():
            trace = open_.get(tid)
            if trace is None:  # emitted by capacity while this message was assembled: late
                if tid in self._recent:
                    out.extend(Finished(tid, None, Reject.LATE_SPAN, []) for _ in range(n))
                continue
            taken = min(n, max_spans - trace.count)
            out.extend(Finished(tid, None, Reject.TOO_MANY_SPANS, []) for _ in range(n - taken))
            if taken <= 0:
                continue
            trace.count += taken
            if trace.refs[-1] is not ref:
                ref.acquire()
                trace.refs.append(ref)
                self._charge(trace, ref, size)
            while self._bytes > max_bytes:
                out.append(self._finish(next(iter(open_)), evicted=True))

    def poll(self, now: float) -> list[Finished]:
        """Traces whose grace period or timeout has passed."""
        out: list[Finished] = []
        ready = self._root_ready
        open_ = self._open
        while ready and ready[0][0] <= now:
            _, tid = ready.popleft()
            if tid in open_:
                out.append(self._finish(tid))
        deadline = now - self._cfg.timeout_seconds
        while open_:
            tid, trace = next(iter(open_.items()))
            if trace.first_seen > deadline:
                break
            out.append(self._finish(tid))
        return out

    def next_due(self) -> float | None:
        """When `poll` may next have a trace to emit (on the clock of its `now`); None while
        none is open. The stage wakes then, so a record leaves on time on a quiet topic."""
        open_ = self._open
        if not open_:
            return None
        due = next(iter(open_.values())).first_seen + self._cfg.timeout_seconds
        ready = self._root_ready
        return min(due, ready[0][0]) if ready else due

    def flush(self, *, complete_only: bool) -> list[Finished]:
        """On shutdown: emit what is complete; the rest is left uncommitted for the next owner
        unless `complete_only` is False."""
        out = []
        for tid in list(self._open):
            if self._open[tid].root_seen or not complete_only:
                out.append(self._finish(tid))
        return out

    def drop_partitions(self, partitions: set[object]) -> list[MessageRef]:
        """Forget traces fed by revoked partitions: the new owner re-reads those messages."""
        dropped: list[MessageRef] = []
        for tid in [t for t, tr in self._open.items() if any(r.partition in partitions for r in tr.refs)]:
            trace = self._open.pop(tid)
            self._uncharge(trace)
            dropped.extend(trace.refs)
        return dropped

    def _finish(self, tid: str, *, evicted: bool = False) -> Finished:
        trace = self._open.pop(tid)
        self._uncharge(trace)
        keep = self._cfg.recent_trace_ids
        if keep and tid not in self._recent:
            self._recent.add(tid)
            order = self._recent_order
            order.append(tid)
            if len(order) > keep:
                self._recent.discard(order.popleft())
        record, reason = build_record(tid, trace.spans)
        if record is None and evicted:
            reason = Reject.EVICTED
        unread = record is None and reason is not Reject.NOT_RAG and reason is not Reject.EVICTED
        return Finished(tid, record, reason, trace.refs, trace.spans if unread else None)


def build_record(trace_id: str, spans: list[SpanFacts]) -> tuple[RagRecord | None, Reject | None]:
    """Merge the spans of one trace, whatever dialect each used, into a record."""
    t = _TraceSpans(spans)
    root, retrievers, rerankers, llms = t.root, t.retrievers, t.rerankers, t.llms
    if not (retrievers or rerankers or llms) and not any(s.chunks for s in spans):
        # No retrieval and no model call: HTTP or framework instrumentation of non-RAG endpoints,
        # an index build, an embedding call (a chain whose input is a batch, whose inner steps
        # echo text: only the request span's query or answer counts). Not a defect, unless an
        # instrumentation we do not read wrote it.
        asked = (root.query or root.answer) if root is not None else any(s.query or s.answer for s in spans)
        if not asked:
            return None, Reject.UNREADABLE if t.unread else Reject.NOT_RAG
    if len(retrievers) > 1:
        retrievers = _retrievals(retrievers, llms[-1] if llms else None)

    query = root.query if root is not None else None
    if not query:
        query = _first_query(retrievers) or _first_query(rerankers) or _first_query(llms)
        if not query:
            return None, Reject.MISSING_QUERY
    answer = root.answer if root is not None else None
    if not answer:
        answer = next((s.answer for s in reversed(llms) if s.answer), None)
        if not answer:
            return None, Reject.MISSING_ANSWER
    model = next((s.model for s in reversed(llms) if s.model), None)

    chunks = _final_ranking(rerankers, retrievers)
    anchor = root if root is not None else spans[0]
    retrieval_ns, generation_ns, tokens_in, tokens_out = stage_facts(retrievers, rerankers, llms)
    return (
        RagRecord(
            trace_id=trace_id,
            span_id=anchor.span_id,
            service=anchor.service,
            query=query,
            query_type=anchor.query_type or t.query_type or "",
            chunks=chunks,
            answer=answer,
            model=model,
            start_ns=anchor.start_ns,
            end_ns=anchor.end_ns,
            replay=t.replay,
            release=anchor.release or t.release,
            retrieval_ns=retrieval_ns,
            generation_ns=generation_ns,
            error=anchor.error,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            session_id=anchor.session_id or t.session_id,
            user_id=anchor.user_id or t.user_id,
        ),
        None,
    )


class _TraceSpans:
    """A trace's spans by role (LLM calls in the order they ended), and what the record takes
    from the first span that has it when its anchor has none."""

    __slots__ = (
        "llms",
        "query_type",
        "release",
        "replay",
        "rerankers",
        "retrievers",
        "root",
        "session_id",
        "unread",
        "user_id",
    )

    def __init__(self, spans: list[SpanFacts]) -> None:
        self.root: SpanFacts | None = None
        self.retrievers: list[SpanFacts] = []
        self.rerankers: list[SpanFacts] = []
        self.llms: list[SpanFacts] = []
        self.query_type: str | None = None
        self.release = ""
        self.session_id: str | None = None
        self.user_id: str | None = None
        self.replay = False
        self.unread = False
        for s in spans:
            self._take(s)
        if len(self.llms) > 1:
            self.llms.sort(key=_end_ns)

    def _take(self, s: SpanFacts) -> None:
        role = s.role
        if role is _ROOT:
            # The trace's own root wins over a parented span that calls itself a chain.
            if self.root is None or (self.root.parent_span_id and not s.parent_span_id):
                self.root = s
        elif role is _RETRIEVER:
            self.retrievers.append(s)
        elif role is _LLM:
            self.llms.append(s)
        elif role is _RERANKER:
            self.rerankers.append(s)
        if not self.query_type:
            self.query_type = s.query_type
        if not self.release:
            self.release = s.release
        if self.session_id is None:
            self.session_id = s.session_id
        if self.user_id is None:
            self.user_id = s.user_id
        if s.replay:
            self.replay = True
        if s.unread:
            self.unread = True


def _retrievals(retrievers: list[SpanFacts], final: SpanFacts | None) -> list[SpanFacts]:
    """One span per retrieval that fed the final generation.

    A retriever whose own child retriever returned chunks is one retrieval seen twice (DSPy's
    `Retrieve` around its `ColBERTv2` call, LlamaIndex's `retrieve` around `_retrieve`): the child,
    nearer the store, keeps ids and scores. A retrieval that started after the final generation
    started (an agent's next step) did not feed it.
    """
    outer = {s.parent_span_id for s in retrievers if s.chunks}
    start = final.start_ns if final is not None else 0
    return [s for s in retrievers if s.span_id not in outer and not (start and s.start_ns > start)]


def stage_facts(
    retrievers: Sequence[SpanFacts], rerankers: Sequence[SpanFacts], llms: Sequence[SpanFacts]
) -> tuple[int, int, int | None, int | None]:
    """A record's RED figures from its spans: the retriever stage's and the generator stage's
    wall time (`_stage_ns`), and the generator tokens its LLM spans report, summed (None: none
    reported). `_assembly.c` computes the same, and calls this for spans whose fields are not
    plain ints."""
    tokens_in = tokens_out = None
    for s in llms:
        if s.input_tokens is not None:
            tokens_in = s.input_tokens + (tokens_in or 0)
        if s.output_tokens is not None:
            tokens_out = s.output_tokens + (tokens_out or 0)
    return _stage_ns(retrievers, rerankers), _stage_ns(llms, ()), tokens_in, tokens_out


def _stage_ns(spans: Sequence[SpanFacts], more: Sequence[SpanFacts]) -> int:
    """A stage's wall time: its first span's start to its last span's end, over the spans with
    times (a span with absurd times has them zeroed by the decoder); -1 when none has."""
    lo = hi = 0
    for group in (spans, more):
        for s in group:
            if s.start_ns:
                if not lo or s.start_ns < lo:
                    lo = s.start_ns
                if s.end_ns > hi:
                    hi = s.end_ns
    return hi - lo if lo else -1


def _end_ns(s: SpanFacts) -> int:
    return s.end_ns


def _first_query(spans: list[SpanFacts]) -> str | None:
    for s in spans:
        if s.query:
            return s.query
    return None


def _final_ranking(rerankers: list[SpanFacts], retrievers: list[SpanFacts]) -> list[Chunk]:
    """The reranker's output is the context the model saw; without one, the union of every
    retrieval call (multi-hop services retrieve more than once), in call order, deduplicated."""
    if rerankers:
        last = max(rerankers, key=lambda s: s.end_ns)
        if last.chunks:
            return last.chunks
    if len(retrievers) == 1:
        return retrievers[0].chunks or []
    seen: set[str] = set()
    out: list[Chunk] = []
    for n, s in enumerate(sorted(retrievers, key=lambda s: s.start_ns), 1):
        for c in s.chunks or ():
            if c.id not in seen:
                seen.add(c.id)
                # a copy: the span's own chunks are the decoder's, left as it gave them
                out.append(Chunk(c.id, c.content, c.score, c.raw, n))
    return out


# --- the compiled assembler ---------------------------------------------------------------------


def _field_names(cls: type) -> list[str] | None:
    """The fields `_assembly` fills when it builds a `cls` itself; None: it calls the class."""
    layout = slots_layout(cls)
    return None if layout is None else [name for name, _, _ in layout]


@functools.cache
def compiled_assembler() -> Any:
    """The compiled `_assembly.Assembler` class, set up; None where it was not built."""
    try:
        from monitor.ingest import _assembly
    except ImportError:
        return None
    _assembly.setup(
        SpanFacts,
        Chunk,
        MessageRef,
        RagRecord,
        _field_names(RagRecord),
        Finished,
        _field_names(Finished),
        (_ROOT, _RETRIEVER, _RERANKER, _LLM, SpanRole.OTHER),
        (
            Reject.LATE_SPAN,
            Reject.EVICTED,
            Reject.NOT_RAG,
            Reject.MISSING_QUERY,
            Reject.MISSING_ANSWER,
            Reject.TOO_MANY_SPANS,
        ),
        (TRACE_COST, SPAN_COST),
        functools.partial(sorted, key=_end_ns),
        functools.partial(sorted, key=attrgetter("start_ns")),
        functools.partial(max, key=_end_ns),
        stage_facts,
        build_record,
    )
    return _assembly.Assembler


_compiled, ASSEMBLER = choose("assembler", "monitor.ingest._assembly", compiled_assembler)

if TYPE_CHECKING:
    Assembler = PyAssembler
else:
    Assembler = _compiled or PyAssembler
