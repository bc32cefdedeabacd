"""Trace assembly: spans that arrive in any order, across Kafka messages, become RAG records.

A trace is emitted `grace_seconds` after its root span arrives (children of a distributed trace may
trail the root), or after `timeout_seconds` if the root never comes and enough is present. Open
traces are bounded by count and bytes; the oldest goes first.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from monitor.config import AssemblyConfig
from monitor.kafka.offsets import MessageRef
from monitor.model import Chunk, RagRecord, Reject, SpanFacts, SpanRole


@dataclass(slots=True)
class _OpenTrace:
    first_seen: float
    spans: list[SpanFacts] = field(default_factory=list)
    refs: list[MessageRef] = field(default_factory=list)
    nbytes: int = 0
    root_seen: bool = False


@dataclass(slots=True)
class Finished:
    """A trace leaving the assembler: a record, or the reason it was dropped. Either way the
    caller releases `refs` once it has dealt with it."""

    trace_id: str
    record: RagRecord | None
    reason: Reject | None
    refs: list[MessageRef]


class Assembler:
    def __init__(self, config: AssemblyConfig) -> None:
        self._cfg = config
        self._open: OrderedDict[str, _OpenTrace] = OrderedDict()  # oldest first
        self._root_ready: deque[tuple[float, str]] = deque()  # (emit at, trace id), in time order
        self._recent: OrderedDict[str, None] = OrderedDict()  # emitted ids, to spot late spans
        self._bytes = 0

    @property
    def open_traces(self) -> int:
        return len(self._open)

    @property
    def open_bytes(self) -> int:
        return self._bytes

    def add(self, span: SpanFacts, ref: MessageRef, size: int, now: float) -> list[Finished]:
        """Take one span; returns traces forced out by capacity (usually none).

        A late span (its trace already emitted) comes back as a dropped `Finished` of its own.
        """
        tid = span.trace_id
        trace = self._open.get(tid)
        if trace is None:
            if tid in self._recent:
                return [Finished(tid, None, Reject.LATE_SPAN, [])]
            trace = self._open[tid] = _OpenTrace(first_seen=now)
        trace.spans.append(span)
        if not trace.refs or trace.refs[-1] is not ref:
            ref.acquire()
            trace.refs.append(ref)
        trace.nbytes += size
        self._bytes += size
        # Any parentless span is the root, whatever its role: a trace that is a lone LLM call
        # must not wait for the timeout.
        if not span.parent_span_id and not trace.root_seen:
            trace.root_seen = True
            self._root_ready.append((now + self._cfg.grace_seconds, tid))
        out: list[Finished] = []
        while len(self._open) > self._cfg.max_open_traces or (
            self._bytes > self._cfg.max_open_bytes and len(self._open) > 1
        ):
            oldest = next(iter(self._open))
            out.append(self._finish(oldest, evicted=True))
        return out

    def poll(self, now: float) -> list[Finished]:
        """Traces whose grace period or timeout has passed."""
        out: list[Finished] = []
        ready = self._root_ready
        while ready and ready[0][0] <= now:
            _, tid = ready.popleft()
            if tid in self._open:
                out.append(self._finish(tid))
        deadline = now - self._cfg.timeout_seconds
        while self._open:
            tid, trace = next(iter(self._open.items()))
            if trace.first_seen > deadline:
                break
            out.append(self._finish(tid))
        return out

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
            self._bytes -= trace.nbytes
            dropped.extend(trace.refs)
        return dropped

    def _finish(self, tid: str, *, evicted: bool = False) -> Finished:
        trace = self._open.pop(tid)
        self._bytes -= trace.nbytes
        if self._cfg.recent_trace_ids:
            self._recent[tid] = None
            if len(self._recent) > self._cfg.recent_trace_ids:
                self._recent.popitem(last=False)
        record, reason = build_record(tid, trace.spans)
        if record is None and evicted:
            reason = Reject.EVICTED
        return Finished(tid, record, reason, trace.refs)


def build_record(trace_id: str, spans: list[SpanFacts]) -> tuple[RagRecord | None, Reject | None]:
    """Merge the spans of one trace, whatever dialect each used, into a record."""
    root = None
    retrievers: list[SpanFacts] = []
    rerankers: list[SpanFacts] = []
    llms: list[SpanFacts] = []
    for s in spans:
        role = s.role
        if role is SpanRole.ROOT:
            # The trace's own root wins over a parented span that calls itself a chain.
            if root is None or (root.parent_span_id and not s.parent_span_id):
                root = s
        elif role is SpanRole.RETRIEVER:
            retrievers.append(s)
        elif role is SpanRole.RERANKER:
            rerankers.append(s)
        elif role is SpanRole.LLM:
            llms.append(s)
    llms.sort(key=lambda s: s.end_ns)
    if not (retrievers or rerankers or llms) and not any(s.query or s.answer or s.chunks for s in spans):
        # HTTP or framework instrumentation of non-RAG endpoints shares the topic: not a defect.
        return None, Reject.NOT_RAG

    query = _first(
        root.query if root else None, *(s.query for s in retrievers), *(s.query for s in rerankers)
    )
    query = query or _first(*(s.query for s in llms))
    if not query:
        return None, Reject.MISSING_QUERY
    answer = _first(root.answer if root else None, *(s.answer for s in reversed(llms)))
    if not answer:
        return None, Reject.MISSING_ANSWER

    chunks = _final_ranking(rerankers, retrievers)
    anchor = root or spans[0]
    return (
        RagRecord(
            trace_id=trace_id,
            span_id=anchor.span_id,
            service=anchor.service,
            query=query,
            query_type=_first(anchor.query_type, *(s.query_type for s in spans)) or "",
            chunks=chunks,
            answer=answer,
            model=_first(*(s.model for s in reversed(llms))),
            start_ns=anchor.start_ns,
            end_ns=anchor.end_ns,
            replay=any(s.replay for s in spans),
        ),
        None,
    )


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
    for s in sorted(retrievers, key=lambda s: s.start_ns):
        for c in s.chunks or ():
            if c.id not in seen:
                seen.add(c.id)
                out.append(c)
    return out


def _first(*values: str | None) -> str | None:
    for v in values:
        if v:
            return v
    return None
