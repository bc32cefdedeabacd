"""Trace assembly and offset tracking, without Kafka: ordering, timeouts, bounds, holds."""

from __future__ import annotations

from monitor.config import AssemblyConfig
from monitor.ingest.assemble import Assembler
from monitor.kafka.offsets import OffsetTracker
from monitor.model import Chunk, Reject, SpanFacts, SpanRole


def span(tid: str, sid: str, parent: str = "", role: SpanRole = SpanRole.OTHER, **kw: object) -> SpanFacts:
    return SpanFacts(
        trace_id=tid,
        span_id=sid,
        parent_span_id=parent,
        name=sid,
        service="svc",
        start_ns=1,
        end_ns=2,
        role=role,
        **kw,  # type: ignore[arg-type]
    )


def rag_spans(tid: str) -> list[SpanFacts]:
    return [
        span(tid, "r", role=SpanRole.ROOT, query="q?", answer="a.", query_type="lookup"),
        span(
            tid,
            "ret",
            "r",
            SpanRole.RETRIEVER,
            query="q?",
            chunks=[Chunk("c1", "x", 0.9), Chunk("c2", "y", 0.5)],
        ),
        span(tid, "llm", "r", SpanRole.LLM, answer="a.", model="m1"),
    ]


def test_children_before_root_wait_for_grace_then_emit() -> None:
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    asm = Assembler(AssemblyConfig(grace_seconds=1.0, timeout_seconds=30))
    root, ret, llm = rag_spans("t1")
    refs = [tracker.track("p0", i) for i in range(3)]
    # Children arrive first, in separate messages; the root last.
    for s, ref in ((llm, refs[0]), (ret, refs[1]), (root, refs[2])):
        assert asm.add(s, ref, 100, now=10.0) == []
        ref.release()
    assert asm.poll(10.5) == []
    assert tracker.committable() == {}  # spans still open: nothing may be committed
    (fin,) = asm.poll(11.0)
    assert fin.record is not None
    assert [c.id for c in fin.record.chunks] == ["c1", "c2"]
    assert fin.record.model == "m1" and fin.record.query_type == "lookup"
    for r in fin.refs:
        r.release()
    assert tracker.committable() == {"p0": 3}


def test_rootless_trace_times_out_with_reason() -> None:
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    asm = Assembler(AssemblyConfig(grace_seconds=1.0, timeout_seconds=5))
    ref = tracker.track("p0", 0)
    asm.add(span("t2", "ret", "r", SpanRole.RETRIEVER, chunks=[Chunk("c1")]), ref, 10, now=0.0)
    ref.release()
    assert asm.poll(4.9) == []
    (fin,) = asm.poll(5.0)
    assert fin.record is None and fin.reason is Reject.MISSING_QUERY


def test_timeout_emits_when_enough_is_present_without_root() -> None:
    asm = Assembler(AssemblyConfig(timeout_seconds=5))
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    ref = tracker.track("p0", 0)
    asm.add(span("t3", "ret", "x", SpanRole.RETRIEVER, query="q", chunks=[Chunk("c")]), ref, 10, now=0.0)
    asm.add(span("t3", "llm", "x", SpanRole.LLM, answer="ans"), ref, 10, now=0.0)
    (fin,) = asm.poll(6.0)
    assert fin.record is not None and fin.record.answer == "ans" and fin.record.query == "q"


def test_capacity_evicts_oldest_and_late_span_is_flagged() -> None:
    asm = Assembler(AssemblyConfig(max_open_traces=2, timeout_seconds=100))
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    out = []
    for i in range(3):
        ref = tracker.track("p0", i)
        out += asm.add(span(f"t{i}", "ret", "x", SpanRole.RETRIEVER, chunks=[]), ref, 10, now=float(i))
        ref.release()
    assert [f.trace_id for f in out] == ["t0"] and out[0].reason is Reject.EVICTED
    assert asm.open_traces == 2
    late = asm.add(span("t0", "llm", "x", SpanRole.LLM, answer="a"), tracker.track("p0", 9), 10, now=4.0)
    assert late[0].reason is Reject.LATE_SPAN


def test_byte_bound() -> None:
    asm = Assembler(AssemblyConfig(max_open_bytes=1000, timeout_seconds=100))
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    evicted = []
    for i in range(5):
        evicted += asm.add(span(f"t{i}", "x", "p"), tracker.track("p0", i), 400, now=0.0)
    assert asm.open_bytes <= 1000 and len(evicted) == 3


def test_reranker_output_is_the_final_ranking() -> None:
    asm = Assembler(AssemblyConfig(grace_seconds=0))
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    ref = tracker.track("p0", 0)
    spans = rag_spans("t4")
    spans.append(span("t4", "rr", "r", SpanRole.RERANKER, chunks=[Chunk("c2", "y", 3.0)]))
    for s in spans:
        asm.add(s, ref, 10, now=0.0)
    (fin,) = asm.poll(0.0)
    assert fin.record is not None and [c.id for c in fin.record.chunks] == ["c2"]


def test_a_trace_without_rag_content_is_not_rag_not_missing_query() -> None:
    asm = Assembler(AssemblyConfig(grace_seconds=0))
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    ref = tracker.track("p0", 0)
    asm.add(span("h", "root", role=SpanRole.ROOT), ref, 10, now=0.0)  # e.g. GET /healthz
    asm.add(span("h", "child", "root"), ref, 10, now=0.0)
    (fin,) = asm.poll(0.0)
    assert fin.record is None and fin.reason is Reject.NOT_RAG


def test_offsets_commit_stops_at_first_unfinished_message() -> None:
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    a, b, c = (tracker.track("p0", i) for i in (5, 6, 7))
    a.release()
    c.release()
    assert tracker.committable() == {"p0": 6}
    b.release()
    assert tracker.committable() == {"p0": 8}
    tracker.forget(["p0"])
    assert tracker.committable() == {}


def test_flush_on_shutdown_leaves_incomplete_traces_held() -> None:
    asm = Assembler(AssemblyConfig(grace_seconds=10))
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    r0, r1 = tracker.track("p0", 0), tracker.track("p0", 1)
    for s in rag_spans("done"):
        asm.add(s, r0, 10, now=0.0)
    asm.add(span("open", "ret", "r", SpanRole.RETRIEVER), r1, 10, now=0.0)
    r0.release()
    r1.release()
    finished = asm.flush(complete_only=True)
    assert [f.trace_id for f in finished] == ["done"]
    for f in finished:
        for r in f.refs:
            r.release()
    assert tracker.committable() == {"p0": 1}  # the open trace's message will be re-read
