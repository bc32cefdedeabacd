"""The compiled trace assembler (`monitor/ingest/_assembly.c`) against the pure-Python reference.

Both are driven with the same calls, each with its own `MessageRef` objects, and must agree after
every call: the `Finished` objects (trace id, record field by field, reason, the refs in the same
order and no others), late spans, evictions, `open_traces`, `open_bytes`, the open traces
themselves (spans kept, refs held, first seen, bytes, spans taken, root seen) and every ref's
holds and charge. Drives:
every test of test_assemble.py again (each `Assembler` there is both), the workload's messages as
the ingest stage decodes them (one trace a message, spread, batched; the benchmark's production
mix and one span a message), and seeded random operations on small bounds.

`RAGMON_REQUIRE_COMPILED=1` (set by `make test`) turns a missing extension into a failure rather
than a skip.
"""

from __future__ import annotations

import gc
import inspect
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pytest
import test_assemble as cases

from monitor.contracts.model import Chunk, RagRecord, Reject, SpanFacts, SpanRole
from monitor.demo.workload import trace_messages
from monitor.ingest import assemble as assemble_mod
from monitor.ingest.assemble import SPAN_COST, TRACE_COST, Finished, PyAssembler
from monitor.ingest.config import AssemblyConfig
from monitor.ingest.decode import decode
from monitor.kafka.config import Encoding
from monitor.kafka.offsets import MessageRef, new_refs
from tests.compat.apps.harness import read_capture
from tests.compat.readback import CAPTURES, capture_names
from tests.compat.receiver import split_by_trace

COMPILED: Any = assemble_mod.compiled_assembler()
REQUIRED = os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0")
needs_compiled = pytest.mark.skipif(
    COMPILED is None and not REQUIRED, reason="compiled assembler not built (no C compiler here)"
)


def test_compiled_assembler_is_built_when_required() -> None:
    if not REQUIRED:
        pytest.skip("RAGMON_REQUIRE_COMPILED is not set")
    assert COMPILED is not None, "monitor.ingest._assembly did not build: see the pip install output"
    pure = os.environ.get("RAGMON_PURE_PYTHON", "") not in ("", "0")
    assert ("python (RAGMON_PURE_PYTHON is set)" if pure else "compiled") == assemble_mod.ASSEMBLER
    assert (assemble_mod.Assembler is PyAssembler) == pure


# ---------------------------------------------------------------------------------------------
# the comparison


class Both:
    """The reference and the compiled assembler, called alike; the reference's results are
    returned, so a test written for one assembler runs unchanged. The caller's refs go to the
    reference; the compiled one gets a twin of each (same partition and offset), whose holds are
    set to the original's before every call and compared after it."""

    def __init__(self, config: AssemblyConfig) -> None:
        assert COMPILED is not None, "compiled assembler not built"
        self.py = PyAssembler(config)
        self.c = COMPILED(config)
        self.twins: dict[int, tuple[MessageRef, MessageRef]] = {}
        self.spans: list[SpanFacts] = []  # alive, so that ids stay theirs
        self.chunk_lists: set[int] = set()  # the spans' own chunk lists
        self.calls = 0

    # -- the API ------------------------------------------------------------------------------

    @property
    def open_traces(self) -> int:
        assert self.py.open_traces == self.c.open_traces
        return self.py.open_traces

    @property
    def open_bytes(self) -> int:
        assert self.py.open_bytes == self.c.open_bytes
        return self.py.open_bytes

    @property
    def _open(self) -> Any:
        return self.py._open

    def add(self, span: SpanFacts, ref: MessageRef, size: int, now: float) -> list[Finished]:
        self._see([span])
        twin = self._twin(ref)
        return self._compare(
            lambda: self.py.add(span, ref, size, now), lambda: self.c.add(span, twin, size, now)
        )

    def add_spans(
        self,
        spans: Sequence[SpanFacts],
        ref: MessageRef,
        size: int,
        now: float,
        out: list[Finished],
        others: Mapping[str, int] | None = None,
    ) -> None:
        self._see(spans)
        twin = self._twin(ref)
        before = len(out)
        mine: list[Finished] = []

        def py() -> list[Finished]:
            self.py.add_spans(spans, ref, size, now, out, others)
            return out[before:]

        def c() -> list[Finished]:
            assert self.c.add_spans(spans, twin, size, now, mine, others) is None
            return mine

        self._compare(py, c)

    def poll(self, now: float) -> list[Finished]:
        return self._compare(lambda: self.py.poll(now), lambda: self.c.poll(now))

    def next_due(self) -> float | None:
        due = self.py.next_due()
        assert self.c.next_due() == due
        return due

    def flush(self, *, complete_only: bool) -> list[Finished]:
        return self._compare(
            lambda: self.py.flush(complete_only=complete_only),
            lambda: self.c.flush(complete_only=complete_only),
        )

    def drop_partitions(self, partitions: set[object]) -> list[MessageRef]:
        self._sync()
        dropped = self.py.drop_partitions(partitions)
        mine = self.c.drop_partitions(partitions)
        assert type(mine) is list
        self._same_refs(dropped, mine)
        self.check()
        return dropped

    # -- checks -------------------------------------------------------------------------------

    def _see(self, spans: Iterable[SpanFacts]) -> None:
        for s in spans:
            self.spans.append(s)
            if s.chunks is not None:
                self.chunk_lists.add(id(s.chunks))

    def _twin(self, ref: MessageRef) -> MessageRef:
        pair = self.twins.get(id(ref))
        if pair is None:
            twin = MessageRef(ref.partition, ref.offset)
            twin.holds = ref.holds
            pair = self.twins[id(ref)] = (ref, twin)
        assert pair[0] is ref
        return pair[1]

    def _sync(self) -> None:
        for ref, twin in self.twins.values():
            twin.holds = ref.holds

    def _compare(self, py: Callable[[], list[Finished]], c: Callable[[], list[Finished]]) -> list[Finished]:
        self._sync()
        expected = py()
        got = c()
        assert type(got) is list
        assert len(got) == len(expected), (expected, got)
        for e, g in zip(expected, got, strict=True):
            self._same_finished(e, g)
        self.check()
        self.calls += 1
        return expected

    def _same_finished(self, e: Finished, g: Finished) -> None:
        assert type(g) is Finished
        assert g.trace_id == e.trace_id
        assert g.reason is e.reason
        assert repr(g.record) == repr(e.record)  # tells 1 from True, None from ""
        assert g.record == e.record
        if e.record is not None:
            assert type(g.record) is RagRecord
            # a span's own chunk list is handed on as it is; a union is a list of its own
            assert (id(e.record.chunks) in self.chunk_lists) == (g.record.chunks is e.record.chunks)
            assert type(g.record.chunks) is type(e.record.chunks)
        assert type(g.refs) is list
        self._same_refs(e.refs, g.refs)

    def _same_refs(self, expected: list[MessageRef], got: list[MessageRef]) -> None:
        assert len(got) == len(expected)
        for e, g in zip(expected, got, strict=True):
            assert g is self.twins[id(e)][1]
            assert (g.partition, g.offset, g.holds) == (e.partition, e.offset, e.holds)

    def check(self) -> None:
        """The whole state, and every ref's holds."""
        assert self.py.open_traces == self.c.open_traces
        assert self.py.open_bytes == self.c.open_bytes
        assert self.py.next_due() == self.c.next_due()
        py_open = self.py._open
        c_open = self.c._open
        assert list(py_open) == list(c_open)
        for tid, tr in py_open.items():
            ct = c_open[tid]
            assert [id(s) for s in ct.spans] == [id(s) for s in tr.spans]
            assert [id(r) for r in ct.refs] == [id(self.twins[id(r)][1]) for r in tr.refs]
            assert (ct.first_seen, ct.nbytes, ct.count, ct.root_seen) == (
                tr.first_seen,
                tr.nbytes,
                tr.count,
                tr.root_seen,
            )
        for ref, twin in self.twins.values():
            assert (twin.holds, twin.traces, twin.size) == (ref.holds, ref.traces, ref.size), (
                ref.partition,
                ref.offset,
            )


# ---------------------------------------------------------------------------------------------
# every test of test_assemble.py, again, with both assemblers


@pytest.fixture(scope="module", autouse=True)
def _both_assemblers() -> Iterator[None]:
    if COMPILED is None:
        yield
        return
    names = vars(cases)  # test_assemble's globals: its `Assembler` is both, for its tests
    real = names["Assembler"]
    names["Assembler"] = Both
    yield
    names["Assembler"] = real


for _name, _fn in inspect.getmembers(cases, inspect.isfunction):
    if (
        _name.startswith("test_")
        and _fn.__module__ == cases.__name__
        and "Assembler(" in inspect.getsource(_fn)
    ):
        globals()[f"{_name}__both"] = needs_compiled(_fn)


# ---------------------------------------------------------------------------------------------
# the workload, as the ingest stage decodes and assembles it


def _bench_shapes(
    pairs: Iterator[tuple[bytes | None, bytes]], shape: str
) -> Iterator[tuple[bytes | None, bytes]]:
    if shape == "plain":
        return pairs
    from bench.ingest import ProductionMix, one_span_messages

    return one_span_messages(pairs) if shape == "span1" else ProductionMix(7).messages(pairs)


def feed(asm: Both, values: list[bytes], *, step: float, poll_every: int) -> list[Finished]:
    now_ns = time.time_ns()
    out: list[Finished] = []
    for offset, value in enumerate(values):
        ref = MessageRef(offset % 3, offset)
        d = decode(value, Encoding.OTLP_PROTO, now_ns, for_assembly=True)
        assert d.error is None
        if d.spans:
            n_spans = len(d.spans) + sum(d.others.values()) if d.others else len(d.spans)
            asm.add_spans(d.spans, ref, len(value) // n_spans + 1, offset * step, out, d.others)
        ref.release()
        if offset % poll_every == 0:
            out += asm.poll(offset * step)
        for f in out:
            for r in f.refs:
                r.release()
        out.clear()
    return asm.flush(complete_only=False)


@needs_compiled
@pytest.mark.parametrize(
    ("mode", "shape"),
    [
        ("per_trace", "plain"),
        ("split", "plain"),
        ("batched", "plain"),
        ("per_trace", "span1"),
        ("per_trace", "mix"),
    ],
)
def test_workload_messages(mode: str, shape: str) -> None:
    values = [v for _, v in _bench_shapes(trace_messages(60, seed=11, mode=mode), shape)]  # type: ignore[arg-type]
    for config in (
        AssemblyConfig(grace_seconds=0.05, timeout_seconds=2),
        AssemblyConfig(
            grace_seconds=1,
            timeout_seconds=3,
            max_open_traces=7,
            max_open_bytes=20_000 + 10 * TRACE_COST + 20 * SPAN_COST,
            recent_trace_ids=5,
        ),
    ):
        asm = Both(config)
        rest = feed(asm, values, step=0.01, poll_every=3)
        assert asm.calls > len(values)
        assert asm.open_traces == 0 and rest is not None


# ---------------------------------------------------------------------------------------------
# random operations on small bounds

TIDS = [f"t{i}" for i in range(6)]
ROLES = list(SpanRole)
CHUNK_IDS = ["a", "b", "c", "d"]


def random_span(rng: random.Random) -> SpanFacts:
    def text(*values: str | None) -> Any:
        return rng.choice([None, "", *values])

    def chunks() -> list[Chunk] | None:
        r = rng.random()
        if r < 0.3:
            return None
        if r < 0.4:
            return []
        return [
            Chunk(rng.choice(CHUNK_IDS), text("x"), rng.choice([None, 0.5])) for _ in range(rng.randint(1, 4))
        ]

    def ns() -> int:
        return rng.choice([0, 1, 1, 2, 3, 2**70]) if rng.random() < 0.05 else rng.randint(0, 3)

    return SpanFacts(
        trace_id=rng.choice(TIDS),
        span_id=f"s{rng.randint(0, 999)}",
        parent_span_id=rng.choice(["", "", "p", "q"]),
        name="n",
        service=rng.choice(["svc", "other"]),
        start_ns=ns(),
        end_ns=ns(),
        role=rng.choice(ROLES),
        query=text("q1", "q2"),
        answer=text("a1", "a2"),
        chunks=chunks(),
        model=text("m1", "m2"),
        query_type=text("lookup", "howto"),
        replay=rng.random() < 0.1,
        # RED: status, and tokens as the decoder gives them, or beyond (the C path's fallback)
        error=rng.random() < 0.2,
        input_tokens=rng.choice([None, None, 0, 7, 1234, 2**41, 2**70, -3]),
        output_tokens=rng.choice([None, 0, 56, 10_000_000]),
    )


def random_run(seed: int, n_ops: int) -> int:
    rng = random.Random(seed)
    config = AssemblyConfig(
        grace_seconds=rng.choice([0, 1]),
        timeout_seconds=rng.choice([0.5, 1, 3]),
        max_open_traces=rng.randint(1, 5),
        # messages of 1-30 bytes: room for one trace of a span or two, a few, many
        max_open_bytes=rng.choice([20, 60, 200, 10_000])
        + rng.choice([1, 2, 4, 8]) * (TRACE_COST + SPAN_COST),
        recent_trace_ids=rng.choice([0, 1, 3]),
        max_spans_per_trace=rng.choice([1, 2, 5, 10_000]),
    )
    asm = Both(config)
    now = 0.0
    offset = 0
    held: list[MessageRef] = []  # refs the caller still has to release

    def release(fins: list[Finished]) -> None:
        for f in fins:
            held.extend(f.refs)

    for _ in range(n_ops):
        now += rng.choice([0, 0, 0.25, 0.5, 1, 2])
        op = rng.random()
        if op < 0.55:
            ref = MessageRef(rng.choice(["p0", "p1", "p2"]), offset)
            offset += 1
            spans = [random_span(rng) for _ in range(rng.randint(0, 4))]
            others: dict[str, int] | None = None
            if rng.random() < 0.5:
                pool = [s.trace_id for s in spans] + ([rng.choice(TIDS)] if rng.random() < 0.3 else [])
                others = {
                    tid: rng.randint(0, 3) for tid in rng.sample(pool, min(len(pool), rng.randint(0, 3)))
                }
            out: list[Finished] = []
            asm.add_spans(spans, ref, rng.randint(1, 30), now, out, others)
            release(out)
            held.append(ref)  # the consumer's own hold
        elif op < 0.65:
            ref = MessageRef("p0", offset)
            offset += 1
            release(asm.add(random_span(rng), ref, rng.randint(1, 30), now))
            held.append(ref)
        elif op < 0.88:
            release(asm.poll(now))
        elif op < 0.93:
            release(asm.flush(complete_only=rng.random() < 0.6))
        else:
            held.extend(asm.drop_partitions(set(rng.sample(["p0", "p1", "p2", "p9"], rng.randint(0, 2)))))
        rng.shuffle(held)
        for r in held[: rng.randint(0, len(held))]:
            r.release()
            held.remove(r)
    release(asm.flush(complete_only=False))
    assert asm.open_traces == 0 and asm.open_bytes == 0
    return asm.calls


@needs_compiled
@pytest.mark.parametrize("block", range(4))
def test_random_operations(block: int) -> None:
    calls = sum(random_run(block * 1000 + seed, 40) for seed in range(100))
    assert calls > 3000


@needs_compiled
def test_sort_and_max_keep_the_first_of_equals_and_take_any_int() -> None:
    """LLM spans sorted by end (stable), the last reranker by end (the first maximal one), the
    retrievers by start (stable); times beyond 64 bits go through the Python fallbacks."""
    for big in (0, 2**70):
        spans = [
            cases.span("t", "r", role=SpanRole.ROOT, query="q"),
            cases.span("t", "l1", "r", SpanRole.LLM, answer="a1", model="m1"),
            cases.span("t", "l2", "r", SpanRole.LLM, answer="a2", model=""),
            cases.span("t", "x1", "r", SpanRole.RETRIEVER, chunks=[Chunk("b"), Chunk("a")]),
            cases.span("t", "x2", "r", SpanRole.RETRIEVER, chunks=[Chunk("a"), Chunk("c")]),
            cases.span("t", "x3", "r", SpanRole.RETRIEVER, chunks=None),
            cases.span("t", "k1", "r", SpanRole.RERANKER, chunks=[Chunk("k1")]),
            cases.span("t", "k2", "r", SpanRole.RERANKER, chunks=[Chunk("k2")]),
        ]
        for s in spans:
            s.start_ns = s.end_ns = big + 5
        spans[4].start_ns = big + 1
        for last_reranker in ([Chunk("k1")], []):  # empty: the retrievers' union
            spans[6].chunks = last_reranker
            asm = Both(AssemblyConfig(grace_seconds=0))
            out: list[Finished] = []
            asm.add_spans(spans, MessageRef("p0", 0), 10, 0.0, out)
            (fin,) = asm.poll(0.0)
            assert fin.record is not None
            assert fin.record.answer == "a2" and fin.record.model == "m1"
            assert [c.id for c in fin.record.chunks] == (["k1"] if last_reranker else ["a", "c", "b"])


@needs_compiled
def test_references_are_released() -> None:
    """Once a trace is emitted and its `Finished` dropped, its spans, refs and ids are referenced
    as before (no leak), late spans and evictions included; and the assembler is freed."""
    assert COMPILED is not None
    spans = [*cases.rag_spans("leak"), cases.span("leak", "x", "r")]
    ref = MessageRef("p0", 0)
    tid = spans[0].trace_id
    chunks = spans[1].chunks
    objects = [*spans, ref, tid, chunks]
    for _ in range(3):
        before = [sys.getrefcount(o) for o in objects]
        asm = COMPILED(AssemblyConfig(grace_seconds=0, max_open_traces=1, recent_trace_ids=2))
        out: list[Finished] = []
        asm.add_spans(spans, ref, 10, 0.0, out, {"leak": 2, "gone": 1})
        out += asm.poll(0.0)
        asm.add_spans(spans, ref, 10, 1.0, out, {"leak": 1})  # late
        asm.add(cases.span("other", "o"), ref, 10, 1.0)
        asm.add(cases.span("third", "o"), ref, 10, 1.0)  # evicts "other"
        assert [f.reason for f in out] == [None, *[Reject.LATE_SPAN] * 5]
        assert asm.drop_partitions({"p0"}) == [ref]
        del out, asm
        ref.holds = 1
        assert [sys.getrefcount(o) for o in objects] == before
    gc.collect()  # assemblers of earlier tests in this process, unreachable but not yet collected
    alive = sum(type(o) is COMPILED for o in gc.get_objects())
    asm = COMPILED(AssemblyConfig())
    asm.add(spans[0], ref, 10, 0.0)
    del asm  # freed with a trace open
    assert sum(type(o) is COMPILED for o in gc.get_objects()) == alive


@needs_compiled
def test_open_traces_and_records_stay_out_of_the_cyclic_collector() -> None:
    """An open trace, its lists, a record and its `Finished` refer only to spans,
    chunks, message refs and strings (none refers back): untracked, so that the collector's young
    generation is not filled with every trace open for the grace. The stage's message refs too."""
    assert COMPILED is not None
    from monitor.ingest.stage import NEW_REFS

    (ref,) = NEW_REFS("p0", [type("Msg", (), {"offset": 7})()], None)
    asm = COMPILED(AssemblyConfig(grace_seconds=0))
    out: list[Finished] = []
    asm.add_spans(cases.rag_spans("t1"), ref, 10, 0.0, out)
    trace = asm._open["t1"]
    assert not any(gc.is_tracked(o) for o in (trace, trace.spans, trace.refs))
    out += asm.poll(1.0)
    (fin,) = out
    assert fin.record is not None  # its chunk list is the retriever's own here
    assert not any(gc.is_tracked(o) for o in (fin, fin.record, fin.refs))
    if NEW_REFS is not new_refs:
        assert not gc.is_tracked(ref)


def _capture_messages(name: str) -> list[bytes]:
    return [v for body in read_capture(CAPTURES / f"{name}.otlp") for _, v in split_by_trace(body)]


@needs_compiled
@pytest.mark.parametrize("name", capture_names())
def test_the_spans_real_instrumentations_write_assemble_alike(name: str) -> None:
    """Each compat capture (LlamaIndex, LangChain, Haystack, DSPy, with OpenInference, OpenLLMetry
    or their own tracers): nested retrievals, sessions, traces left to the reference's rules, index
    builds that are no record; both assemblers give the same records and reasons."""
    values = _capture_messages(name)
    for config in (
        AssemblyConfig(grace_seconds=0.05, timeout_seconds=2),
        AssemblyConfig(grace_seconds=1, timeout_seconds=3, max_open_traces=2),
    ):
        feed(Both(config), values, step=0.01, poll_every=3)
