"""Trace assembly, offset tracking and record counting, without Kafka: ordering, timeouts, bounds,
holds."""

from __future__ import annotations

import gc
import tracemalloc
from types import SimpleNamespace

import pytest

from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Chunk, Reject, SpanFacts, SpanRole
from monitor.ingest import assemble
from monitor.ingest.assemble import SPAN_COST, TRACE_COST, Assembler, Finished, build_record
from monitor.ingest.config import AssemblyConfig
from monitor.ingest.decode import decode
from monitor.ingest.stage import NEW_REFS
from monitor.kafka.config import Encoding
from monitor.kafka.offsets import MessageRef, OffsetTracker, RefMaker, new_refs, release_all


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


def test_next_due_is_when_poll_next_emits() -> None:
    """The stage wakes at `next_due` on a quiet topic: a trace must be ready then, not before."""
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    asm = Assembler(AssemblyConfig(grace_seconds=1.0, timeout_seconds=30))
    assert asm.next_due() is None
    root, ret, llm = rag_spans("t1")
    asm.add(llm, tracker.track("p0", 0), 100, now=10.0)  # the timeout runs from here
    assert asm.next_due() == 40.0
    asm.add(ret, tracker.track("p0", 1), 100, now=12.0)
    asm.add(root, tracker.track("p0", 2), 100, now=12.5)  # the root: emitted after the grace
    assert asm.next_due() == 13.5
    assert asm.poll(13.4) == []
    (fin,) = asm.poll(13.5)
    assert fin.record is not None and asm.next_due() is None
    asm.add(span("t2", "x", "p"), tracker.track("p0", 3), 100, now=20.0)
    assert asm.next_due() == 50.0
    assert asm.poll(49.9) == [] and len(asm.poll(50.0)) == 1


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


ONE_SPAN = TRACE_COST + SPAN_COST  # what an open one-span trace holds besides its message


def test_byte_bound() -> None:
    asm = Assembler(AssemblyConfig(max_open_bytes=2 * (400 + ONE_SPAN) + 100, timeout_seconds=100))
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    evicted = []
    for i in range(5):
        evicted += asm.add(span(f"t{i}", "x", "p"), tracker.track("p0", i), 400, now=0.0)
    assert asm.open_bytes == 2 * (400 + ONE_SPAN) and len(evicted) == 3


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


def test_spans_that_cannot_shape_the_record_are_counted_not_kept() -> None:
    """The HTTP, database and cache spans around a RAG request: their messages are held and their
    bytes counted, but the record is the one every span would give, anchor included."""
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    for rootless in (False, True):
        tid = f"mix{rootless}"
        spans = [
            span(tid, "recv", "http"),  # the trace's first span: the anchor when there is no root
            span(tid, "sql", "chain"),
            *([] if rootless else [span(tid, "http", role=SpanRole.ROOT)]),
            span(tid, "chain", "http", SpanRole.ROOT, query="q?", answer="a.", query_type="lookup"),
            span(tid, "ret", "chain", SpanRole.RETRIEVER, query="q?", chunks=[Chunk("c1", "x", 0.9)]),
            span(tid, "cache", "chain"),
            span(tid, "llm", "chain", SpanRole.LLM, answer="a.", model="m1"),
            span(tid, "tpl", "chain", query_type="ignored"),  # a field a record can take: kept
        ]
        if rootless:
            spans = [s for s in spans if s.role is not SpanRole.ROOT]
        asm = Assembler(AssemblyConfig(grace_seconds=0, timeout_seconds=5))
        r0, r1 = tracker.track("p0", 0 + 2 * rootless), tracker.track("p0", 1 + 2 * rootless)
        assert r0 is not None and r1 is not None
        out: list[Finished] = []
        asm.add_spans(spans[:4], r0, 10, 0.0, out)
        asm.add_spans(spans[4:], r1, 10, 0.0, out)
        kept = [s.span_id for s in spans if s.span_id not in ("sql", "cache")]
        assert [s.span_id for s in asm._open[tid].spans] == kept
        # two messages, each charged once; the spans kept, not the others
        assert out == [] and asm.open_bytes == 2 * 10 + TRACE_COST + len(kept) * SPAN_COST
        r0.release()
        r1.release()
        (fin,) = asm.poll(10.0)
        expected, _ = build_record(tid, spans)
        assert fin.record == expected and fin.record is not None
        assert fin.record.span_id == ("recv" if rootless else "http")
        assert [r.offset for r in fin.refs] == [r0.offset, r1.offset]
        release_all(fin.refs)
    assert tracker.committable() == {"p0": 4}


def test_inert_spans_decoded_only_as_counts_are_assembled_alike() -> None:
    """`decode(..., for_assembly=True)` hands a message's inert spans after their trace's first as
    a count per trace: the same bytes, holds, records, late spans and evictions of older traces as
    the spans themselves. (Only a trace evicted by its own message's bytes may lose a different
    number of that message's spans: they are counted after the message's other spans.)"""
    inert = {"sql", "cache", "x2", "late2", "late3"}
    for rootless in (False, True):
        results = []
        for counted in (False, True):
            tracker = OffsetTracker()
            tracker.assign(["p0"])
            # "t" (five spans kept, two rootless) and "u" fit; "w"'s second span makes rootless "t" leave
            bound = 2 * TRACE_COST + 5 * SPAN_COST + 20
            asm = Assembler(AssemblyConfig(grace_seconds=0, timeout_seconds=5, max_open_bytes=bound))
            messages = [
                [
                    span("t", "recv", "http"),  # the first: kept either way
                    span("t", "http", role=SpanRole.ROOT),
                    span("t", "sql", "chain"),
                    span("t", "chain", "http", SpanRole.ROOT, query="q?", answer="a."),
                    span("t", "cache", "chain"),
                    span("t", "llm", "chain", SpanRole.LLM, query="q?", answer="a.", model="m1"),
                    span("u", "x", "y"),
                    span("u", "x2", "y"),
                ],
                [span("t", "late", "chain"), span("t", "late2", "chain"), span("t", "late3", "chain")],
                [span("w", "w1", "y"), span("w", "w2", "y", SpanRole.LLM, answer="a.")],
            ]
            if rootless:
                messages[0] = [s for s in messages[0] if s.role is not SpanRole.ROOT]
            out: list[Finished] = []
            state = []
            for i, spans in enumerate(messages):
                ref = tracker.track("p0", i)
                assert ref is not None
                others: dict[str, int] = {}
                if counted:
                    for s in spans:
                        if s.span_id in inert:
                            others[s.trace_id] = others.get(s.trace_id, 0) + 1
                    spans = [s for s in spans if s.span_id not in inert]
                asm.add_spans(spans, ref, 10, float(i), out, others)
                ref.release()
                out += asm.poll(float(i))
                holds = {t: [r.offset for r in tr.refs] for t, tr in asm._open.items()}
                state.append((asm.open_bytes, holds))
            out += asm.flush(complete_only=False)
            left = [(f.trace_id, f.record, f.reason, [r.offset for r in f.refs]) for f in out]
            results.append((state, left))
            for f in out:
                release_all(f.refs)
            assert tracker.committable() == {"p0": 3}
        assert results[0] == results[1]
        # "t" with its root is emitted at once, so its next message is late; the rootless one is
        # still open then, and made to leave (a record all the same) by "w"'s bytes
        late = [] if rootless else [Reject.LATE_SPAN] * 3
        assert [f[2] for f in results[0][1]] == [None, *late, Reject.NOT_RAG, Reject.MISSING_QUERY]


@pytest.mark.parametrize("make_refs", [new_refs, NEW_REFS], ids=["python", "stage's"])
def test_track_run_stops_where_track_would(make_refs: RefMaker) -> None:
    tracker = OffsetTracker(make_refs)
    tracker.assign(["p0"])
    gen = tracker.generation("p0")
    refs = tracker.track_run("p0", _at(3, 4, 5, 5, 6), gen)  # a re-delivery ends the run
    assert [(r.partition, r.offset, r.holds) for r in refs] == [("p0", 3, 1), ("p0", 4, 1), ("p0", 5, 1)]
    assert all(type(r) is MessageRef for r in refs)
    assert tracker.track_run("p0", _at(4, 6), gen) == []
    assert tracker.track_run("p0", _at(6), (gen or 0) + 1) == []  # an older batch's generation
    release_all(refs)
    assert tracker.committable() == {"p0": 6}
    assert [r.offset for r in tracker.track_run("p0", _at(6, 7), gen)] == [6, 7]
    assert tracker.track("p0", 7, gen) is None


def _at(*offsets: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(offset=o) for o in offsets]


def test_histogram_tally_flushes_what_observe_would_have() -> None:
    """Record metrics are counted locally and flushed per batch: the exposition is the same."""
    values = [0, 3, 3, 7, 100, 101, 2.5, 0.1, 1e9, -1.0]
    direct, tallied = Metrics(), Metrics()
    for v in values:
        direct.retrieved_chunks.labels(service="s", query_type="q").observe(v)
        direct.records.labels(service="s", query_type="q").inc()
    series = tallied.record_series("s", "q")
    for i, v in enumerate(values):
        series.records += 1
        series.chunks.observe(v)
        if i == 4:
            series.flush()  # twice: each adds only what came since the last one
    assert set(_samples(tallied, "ragmon_records_total").values()) == {5.0}  # the rest is local
    series.flush()
    series.flush()
    for name in ("ragmon_records_total", "ragmon_retrieved_chunks_bucket", "ragmon_retrieved_chunks_count"):
        assert _samples(tallied, name) == _samples(direct, name)
    assert _samples(tallied, "ragmon_retrieved_chunks_sum") == _samples(direct, "ragmon_retrieved_chunks_sum")


def _samples(m: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for f in m.registry.collect()
        for s in f.samples
        if s.name == name
    }


def test_a_message_is_charged_whole_while_any_trace_holds_it() -> None:
    """The compiled decoder leaves chunk text where it lies in its message, so one open trace with
    a chunk from a 1 MB message keeps the whole megabyte alive: it is charged whole, once, until
    the last trace holding it leaves (it was charged a share per span: 10 KB of it here)."""
    asm = Assembler(AssemblyConfig(grace_seconds=0, timeout_seconds=100, max_open_bytes=1_500_000))
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    big = tracker.track("p0", 0)
    assert big is not None
    chunk = [Chunk("c1", score=0.9, raw=b"text")]
    retrievals = [span(f"t{i}", "ret", "r", SpanRole.RETRIEVER, query="q?", chunks=chunk) for i in range(100)]
    out: list[Finished] = []
    asm.add_spans(retrievals, big, 1_000_000, 0.0, out)
    big.release()
    assert out == [] and asm.open_bytes == 1_000_000 + 100 * ONE_SPAN
    small = tracker.track("p0", 1)
    assert small is not None
    roots = [span(f"t{i}", "r", role=SpanRole.ROOT, query="q?", answer="a.") for i in range(1, 100)]
    asm.add_spans(roots, small, 1_000, 1.0, out)
    small.release()
    out += asm.poll(1.0)
    assert len(out) == 99 and all(f.record is not None for f in out)
    for f in out:
        release_all(f.refs)
    # t0 never gets its root: it alone holds the first message, all of it
    assert asm.open_traces == 1 and asm.open_bytes == 1_000_000 + ONE_SPAN
    nxt = tracker.track("p0", 2)
    assert nxt is not None
    other = span("u", "ret", "r", SpanRole.RETRIEVER, query="q?", chunks=chunk)
    evicted = asm.add(other, nxt, 1_000_000, 2.0)
    nxt.release()
    assert [(f.trace_id, f.reason) for f in evicted] == [("t0", Reject.EVICTED)]
    release_all(evicted[0].refs)
    assert asm.open_bytes == 1_000_000 + ONE_SPAN and tracker.committable() == {"p0": 2}


def test_spans_past_the_cap_are_dropped_and_counted() -> None:
    """A 50,000-span trace takes 10,000 spans (`max_spans_per_trace`); the other 40,000 are
    dropped, each a `too_many_spans` of its own, and hold no message. The trace is emitted as usual."""
    asm = Assembler(AssemblyConfig(grace_seconds=0, timeout_seconds=100, max_spans_per_trace=10_000))
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    out: list[Finished] = []
    for m in range(50):
        ref = tracker.track("p0", m)
        assert ref is not None
        spans = [span("big", f"s{m}-{i}", "r") for i in range(1000)]
        if m == 0:
            spans[0] = span("big", "r", role=SpanRole.ROOT, query="q?", answer="a.")
        if m % 2:  # as the decoder hands inert spans after their trace's first: a count
            asm.add_spans(spans[:1], ref, 100_000, 0.0, out, {"big": 999})
        else:
            asm.add_spans(spans, ref, 100_000, 0.0, out)
        ref.release()
        assert asm.open_traces == 1
    assert [f.reason for f in out] == [Reject.TOO_MANY_SPANS] * 40_000
    assert all(f.refs == [] for f in out)
    assert asm.open_bytes == 10 * 100_000 + ONE_SPAN  # the ten messages its spans came from; one kept
    (fin,) = asm.poll(1.0)
    assert fin.record is not None and fin.record.answer == "a." and len(fin.refs) == 10
    release_all(fin.refs)
    assert asm.open_bytes == 0 and tracker.committable() == {"p0": 50}


def test_one_trace_over_the_byte_bound_is_evicted_alone() -> None:
    """The byte bound holds even when a single open trace is over it: it is evicted (a record if
    it has one), its later spans are late (it was kept growing while it was the only one)."""
    bound = 5_000 + ONE_SPAN  # one span kept: the others are inert
    asm = Assembler(AssemblyConfig(timeout_seconds=100, max_open_bytes=bound))
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    out: list[Finished] = []
    for m in range(10):
        ref = tracker.track("p0", m)
        assert ref is not None
        asm.add_spans([span("huge", f"s{m}", "r")], ref, 1_000, 0.0, out)
        ref.release()
        assert asm.open_bytes <= bound
    assert [f.reason for f in out] == [Reject.EVICTED] + [Reject.LATE_SPAN] * 4
    assert len(out[0].refs) == 6
    release_all(out[0].refs)
    assert asm.open_traces == 0 and tracker.committable() == {"p0": 10}


def test_what_open_traces_keep_alive_stays_within_the_byte_bound() -> None:
    """Memory that open traces keep alive, measured (tracemalloc): the messages, and the span,
    chunk and trace objects, on the path in use (compiled, or pure Python under
    RAGMON_PURE_PYTHON). Rootless one-span retrieval traces, 200 to a 100 KB message, and one
    trace of 2,000 spans across them, under a 4 MiB bound: what is held stays within it (11 MiB
    were: only the messages were charged, not ~1 KB of objects per open one-span trace)."""
    from bench.memory import messages, parse_args

    args = [
        "--spans",
        "20000",
        "--spans-per-message",
        "200",
        "--message-bytes",
        "100000",
        "--big-trace-spans",
        "2000",
    ]
    values = [v for _, v in messages(parse_args(args))]
    bound = 4 << 20
    # `assemble.Assembler` is the path in use; not the differential pair, which holds two of each
    make = assemble.Assembler
    asm = make(
        AssemblyConfig(timeout_seconds=3600, max_open_traces=10**6, max_open_bytes=bound, recent_trace_ids=0)
    )
    out: list[Finished] = []
    most = 0
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for offset, value in enumerate(values):
            value = bytes(bytearray(value))  # the consumer's copy: alive only while something holds it
            ref = MessageRef("p0", offset)
            decoded = decode(value, Encoding.OTLP_PROTO, for_assembly=True)
            asm.add_spans(decoded.spans, ref, len(value), 0.0, out, decoded.others)
            del value, decoded, ref
            out.clear()
            most = max(most, tracemalloc.get_traced_memory()[0] - base)
    finally:
        tracemalloc.stop()
    assert asm.open_traces > 1000  # the bound, not the count, is what holds them back
    assert most <= bound * 1.05, f"{most / 2**20:.1f} MiB held under a {bound / 2**20:.0f} MiB bound"


@pytest.mark.parametrize(
    ("releases", "expected"),
    [
        (("v2", "v1", ""), "v2"),  # the root's
        (("", "", "v1"), "v1"),  # else any span's
        (("", "", ""), ""),
    ],
)
def test_record_release_is_the_roots_else_any_spans(releases: tuple[str, str, str], expected: str) -> None:
    tracker = OffsetTracker()
    tracker.assign(["p0"])
    asm = Assembler(AssemblyConfig(grace_seconds=0.0, timeout_seconds=30))
    out: list[Finished] = []
    for i, (s, release) in enumerate(zip(rag_spans("t1"), releases, strict=True)):
        s.release = release
        out += asm.add(s, tracker.track("p0", i), 100, now=10.0)
    out += asm.poll(11.0)
    (fin,) = out
    assert fin.record is not None and fin.record.release == expected


def test_several_retrievals_one_record_each_chunk_keeps_its_retrieval() -> None:
    """Query rewriting and multi-hop: the chunks of every retrieval that started before the final
    generation, in call order, each with the retrieval it came from; a retriever around its own
    child retriever (DSPy's Retrieve around ColBERTv2) is one retrieval, the child's chunks (with
    ids and scores) used; a retrieval after the final generation started (an agent's next step)
    fed nothing."""
    t = "multi"

    def at(start: int, end: int, s: SpanFacts) -> SpanFacts:
        s.start_ns, s.end_ns = start, end
        return s

    spans = [
        at(10, 100, span(t, "root", role=SpanRole.ROOT, query="who and where?", answer="a.")),
        at(
            11,
            20,
            span(t, "hop1", "root", SpanRole.RETRIEVER, chunks=[Chunk("c-aaaa", "A"), Chunk("c-bbbb", "B")]),
        ),
        at(
            12,
            19,
            span(
                t, "colbert1", "hop1", SpanRole.RETRIEVER, chunks=[Chunk("a", "A", 2.0), Chunk("b", "B", 1.0)]
            ),
        ),
        at(
            21,
            30,
            span(t, "hop2", "root", SpanRole.RETRIEVER, chunks=[Chunk("b", "B", 3.0), Chunk("c", "C", 1.5)]),
        ),
        at(31, 40, span(t, "llm", "root", SpanRole.LLM, answer="a.")),
        at(41, 50, span(t, "late", "root", SpanRole.RETRIEVER, chunks=[Chunk("d", "D")])),
    ]
    record, reason = build_record(t, spans)
    assert reason is None and record is not None
    assert [(c.id, c.retrieval) for c in record.chunks] == [("a", 1), ("b", 1), ("c", 2)]
    assert [c["retrieval"] for c in record.to_json_dict()["chunks"]] == [1, 1, 2]
    single, _ = build_record(
        "one",
        [
            span("one", "r", role=SpanRole.ROOT, query="q", answer="a"),
            span("one", "x", "r", SpanRole.RETRIEVER, chunks=[Chunk("z", "Z")]),
        ],
    )
    assert single is not None and "retrieval" not in single.to_json_dict()["chunks"][0]
