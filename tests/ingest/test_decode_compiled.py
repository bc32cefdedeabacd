"""The compiled `otlp_proto` decoder (`monitor/ingest/_wire.c`) against the pure-Python reference.

Both paths must give the same `Decoded` — spans, inert spans counted per trace (`for_assembly`),
problems, reject reason and detail — with and without `for_assembly` (decode_compare.py's `both`),
for every decoder test case (the test_decode_*.py files run again here with each `decode` call made
on both paths and compared), the bad-input corpus, the workload generator's messages and
production-like traffic where most spans are not RAG; and what the compiled path builds (slot
layouts, objects the cyclic collector skips, raw chunk text) behaves as the reference's. Canonical
messages must be taken by the compiled path itself, not handed back to the reference, or the
comparison proves nothing. Shapes it hands back and fuzzing: test_decode_compiled_fuzz.py; invalid
UTF-8: test_decode_compiled_utf8.py.

`RAGMON_REQUIRE_COMPILED=1` (set by `make test`) turns a missing extension into a failure rather
than a skip.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import os
import time
from collections.abc import Iterator
from typing import Any

import decode_cases as cases
import pytest
import test_decode_bad_input
import test_decode_dialects
import test_decode_formats
import test_decode_fuzz
from decode_compare import (
    CACHE,
    DB,
    HTTP_SERVER,
    REQUIRED,
    WIRE,
    bad_input_corpus,
    both,
    needs_wire,
    on_path,
    production_trace,
    taken,
)

from monitor.contracts.model import Chunk, Reject, SpanFacts, SpanRole
from monitor.demo.workload import generate
from monitor.ingest import decode as decode_mod
from monitor.ingest import dialects
from monitor.ingest.assemble import Assembler, Finished
from monitor.ingest.config import AssemblyConfig
from monitor.ingest.decode import Decoded
from monitor.ingest.decode.otlp_proto import pb_attrs
from monitor.kafka.config import Encoding
from monitor.kafka.offsets import OffsetTracker, release_all
from monitor.plumbing.compiled import slots_layout
from tests.compat.apps.harness import read_capture
from tests.compat.readback import CAPTURES, capture_names
from tests.compat.receiver import split_by_trace


def test_compiled_decoder_is_built_when_required() -> None:
    if not REQUIRED:
        pytest.skip("RAGMON_REQUIRE_COMPILED is not set")
    assert WIRE is not None, "monitor.ingest._wire did not build: see the pip install output"
    pure = os.environ.get("RAGMON_PURE_PYTHON", "") not in ("", "0")
    assert ("python (RAGMON_PURE_PYTHON is set)" if pure else "compiled") == decode_mod.OTLP_PROTO_DECODER


# ---------------------------------------------------------------------------------------------
# every test of the test_decode_*.py files, again, with each decode call compared on both paths

CASES = (test_decode_dialects, test_decode_formats, test_decode_bad_input, test_decode_fuzz)


@pytest.fixture(scope="module", autouse=True)
def _differential_decode() -> Iterator[None]:
    """Module-scoped (hypothesis refuses function-scoped fixtures): swaps the `decode` of those
    files and of their helpers (decode_cases.py)."""
    if WIRE is None:
        yield
        return
    modules = (cases, *CASES)
    real = [m.decode for m in modules]
    for m in modules:
        m.decode = both
    yield
    for m, decode in zip(modules, real, strict=True):
        m.decode = decode


for _cases in CASES:
    for _name, _fn in inspect.getmembers(_cases, inspect.isfunction):
        if _name.startswith("test_") and _fn.__module__ == _cases.__name__:
            globals()[f"{_name}__both_paths"] = needs_wire(_fn)


# ---------------------------------------------------------------------------------------------
# corpora


@needs_wire
@pytest.mark.parametrize("mode", ["per_trace", "batched", "split"])
def test_workload_messages(mode: str) -> None:
    for m in generate(120, seed=5, mode=mode).messages:
        d = taken(m.value)
        assert d.error is None and d.spans


@needs_wire
def test_bad_input_corpus() -> None:
    for value in bad_input_corpus():
        for encoding in Encoding:
            both(value, encoding)


@needs_wire
def test_non_rag_spans_are_skipped_with_the_same_result() -> None:
    t = cases.Spans()
    production_trace(t)
    d = taken(cases.proto_bytes(t.finished))
    roles = {f.name: f.role for f in d.spans}
    assert roles["POST /query"] is SpanRole.ROOT and roles["GET /healthz"] is SpanRole.ROOT
    assert roles["SELECT docs"] is roles["GET"] is roles["internal"] is SpanRole.OTHER
    assert roles["rag"] is SpanRole.ROOT and roles["retrieve"] is SpanRole.RETRIEVER
    lean = on_path(WIRE, cases.proto_bytes(t.finished), Encoding.OTLP_PROTO, time.time_ns(), lean=True)
    # each trace's first span (the spans end, and are exported, children first) is kept
    assert [f.name for f in lean.spans if f.role is SpanRole.OTHER] == ["SELECT docs", "internal"]
    assert list(lean.others.values()) == [2]  # the cache GET and the embedding POST


@needs_wire
def test_set_aside_with_many_traces_in_one_message() -> None:
    """The compiled path's table of a message's traces grows past its first 16 slots."""
    t = cases.Spans()
    for _ in range(40):
        with t.span("POST /query", **HTTP_SERVER), t.span("SELECT docs", **DB), t.span("GET", **CACHE):
            pass
    d = taken(cases.proto_bytes(t.finished))
    lean = on_path(WIRE, cases.proto_bytes(t.finished), Encoding.OTLP_PROTO, time.time_ns(), lean=True)
    assert len(d.spans) == 120 and len(lean.spans) == 80 and list(lean.others.values()) == [1] * 40


def test_spans_set_aside_assemble_to_the_same_records() -> None:
    """Assembling what `decode(..., for_assembly=True)` gives yields the records, rejections and
    message holds that assembling every span does: production-like traces in one message and
    spread over several, and the workload split across messages (on whichever path is active)."""
    whole, spread = cases.Spans(), cases.Spans()
    for _ in range(3):
        production_trace(whole)
        production_trace(spread)
    values = [cases.proto_bytes(whole.finished)]
    values += [cases.proto_bytes(spread.finished[i : i + 4]) for i in range(0, len(spread.finished), 4)]
    values += [m.value for m in generate(20, seed=3, mode="split").messages]
    now = time.time_ns()
    results = []
    for lean in (False, True):
        tracker = OffsetTracker()
        tracker.assign(["p0"])
        asm = Assembler(AssemblyConfig(grace_seconds=1, timeout_seconds=5))
        out: list[Finished] = []
        for offset, value in enumerate(values):
            ref = tracker.track("p0", offset)
            assert ref is not None
            d = decode_mod.decode(value, Encoding.OTLP_PROTO, now, for_assembly=lean)
            n_spans = len(d.spans) + sum(d.others.values())
            asm.add_spans(d.spans, ref, len(value) // n_spans + 1, offset / 10, out, d.others)
            assert d.others or not lean or offset  # the whole traces' message sets spans aside
            ref.release()
            out += asm.poll(offset / 10)
        out += asm.flush(complete_only=False)
        results.append(
            [
                (f.trace_id, f.record and f.record.to_json_dict(), f.reason, [r.offset for r in f.refs])
                for f in out
            ]
        )
        for f in out:
            release_all(f.refs)
        assert tracker.committable() == {"p0": len(values)}
    assert results[0] == results[1]
    reasons = [r[2] for r in results[0]]
    assert reasons.count(None) == 6 + 20 and reasons.count(Reject.NOT_RAG) == 6  # the healthz traces


def test_span_types_are_built_by_layout_while_plain_slots_dataclasses() -> None:
    """`_wire` fills the slots of SpanFacts, Chunk and Decoded itself (their `__init__` only
    stores values); a dataclass that does more, or has no slots, is called instead."""
    facts = slots_layout(SpanFacts)
    assert facts is not None and [k for _, k, _ in facts] == [0] * 7 + [1] * 8 + [2] + [1] * 7
    assert facts[7] == ("role", 1, SpanRole.OTHER)
    assert slots_layout(Chunk) == [
        ("id", 0, None),
        ("content", 1, None),
        ("score", 1, None),
        ("raw", 1, None),
        ("retrieval", 1, 0),
    ]
    assert [k for _, k, _ in slots_layout(Decoded) or ()] == [2, 3, 2, 1, 1, 2]

    @dataclasses.dataclass(slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            assert self.x

    @dataclasses.dataclass
    class NoSlots:
        x: int

    assert slots_layout(Checked) is None and slots_layout(NoSlots) is None


@needs_wire
def test_compiled_spans_stay_out_of_the_cyclic_collector() -> None:
    """Spans, chunks and their lists can hold no cycle, so the compiled path builds them untracked:
    the collector no longer walks every open trace's spans at each collection. The reference
    path's objects are tracked as usual, and both compare equal."""
    value = generate(1, seed=4).messages[0].value
    out = taken(value)
    spans = out.spans
    chunks = [c for s in spans for c in s.chunks or ()]
    assert spans and chunks
    assert not any(gc.is_tracked(o) for o in [*spans, *chunks, *(s.chunks for s in spans if s.chunks)])
    assert not any(gc.is_tracked(s.problems) for s in spans)
    ref = on_path(None, value, Encoding.OTLP_PROTO, time.time_ns())
    assert all(gc.is_tracked(s) for s in ref.spans)


@needs_wire
def test_raw_text_reads_and_compares_as_bytes_and_keeps_its_message() -> None:
    """`Chunk.raw` from the compiled path points into the message: it must keep the message
    alive, read as bytes and compare equal to the bytes the reference path holds."""
    value = generate(1, seed=9).messages[0].value
    lean = WIRE.decode_spans(value, time.time_ns(), True)
    chunk = next(c for s in lean.spans for c in s.chunks or ())
    raw, text = chunk.raw, chunk.text
    assert type(raw).__name__ == "RawText" and chunk.content is None and text
    assert raw == text.encode() and text.encode() == raw and raw != text.encode() + b"x"
    assert raw != text  # text only equals its bytes, not the str
    del value, lean, chunk
    gc.collect()
    assert str(raw, "utf-8") == text and bytes(raw) == text.encode() and memoryview(raw).readonly


def test_every_key_apply_reads_is_in_the_shared_table() -> None:
    """`_wire` gives `apply` only the keys in `ATTRIBUTE_KEYS`/`INDEXED_PREFIXES`: a key read
    outside them would make the compiled path answer differently."""
    read: set[str] = set()

    class Spy(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            read.add(key)
            return super().get(key, default)

        def __contains__(self, key: object) -> bool:
            read.add(str(key))
            return super().__contains__(key)

        def __getitem__(self, key: str) -> Any:
            read.add(key)
            return super().__getitem__(key)

    samples: list[dict[str, Any]] = [{}]
    t = cases.Spans()
    for build in (cases.openinference_trace, production_trace):
        build(t)
    for m in generate(3, seed=1).messages:
        samples += [dict(v.items()) for v in _all_attrs(m.value)]
    samples += [dict(v.items()) for v in _all_attrs(cases.proto_bytes(t.finished))]
    # JSON-looking text, so that `_text_attr` also asks for the mime types
    everything = {k: '{"query": "x"}' for k in dialects.ATTRIBUTE_KEYS} | {
        "gen_ai.operation.name": "chat",
        "retrieval.documents.0.document.id": "a",
        "reranker.output_documents.0.document.id": "a",
        "llm.input_messages.0.message.role": "user",
        "llm.output_messages.0.message.role": "assistant",
        "gen_ai.prompt.0.content": "p",
        "gen_ai.completion.0.content": "c",
    }
    samples.append(everything)
    for kind in ("CHAIN", "RETRIEVER", "RERANKER", "LLM", "TOOL"):
        samples.append({**everything, "openinference.span.kind": kind})
    rest = {k: v for k, v in everything.items() if k != "openinference.span.kind"}
    for op in ("retrieval", "chat", "invoke_agent", "embeddings"):
        samples.append({**rest, "gen_ai.operation.name": op})
    rest = {k: v for k, v in rest.items() if k != "gen_ai.operation.name"}
    for tl in ("workflow", "task"):
        samples.append({**rest, "traceloop.span.kind": tl})
    samples.append({k: v for k, v in rest.items() if k != "traceloop.span.kind"})
    samples.append(
        {k: v for k, v in rest.items() if k.startswith("traceloop.")} | {"traceloop.span.kind": "task"}
    )
    for attrs in samples:
        for parent in ("", "02" * 8):
            spy = Spy(attrs)
            dialects.wants_events(spy)
            dialects.apply(SpanFacts("01" * 16, "03" * 8, parent, "retriever", "s", 1, 2), spy)
    outside = {
        k for k in read if k not in dialects.ATTRIBUTE_KEYS and not k.startswith(dialects.INDEXED_PREFIXES)
    }
    assert {"openinference.span.kind", "traceloop.entity.name", "input.mime_type"} <= read  # the spy sees
    assert not outside


def _all_attrs(value: bytes) -> Iterator[dict[str, Any]]:
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    data = TracesData()
    data.ParseFromString(value)
    for rs in data.resource_spans:
        for ss in rs.scope_spans:
            for sp in ss.spans:
                yield pb_attrs(sp.attributes)


@needs_wire
@pytest.mark.parametrize("name", capture_names())
def test_the_spans_real_instrumentations_write_decode_alike(name: str) -> None:
    """Each compat capture, as the exporter sent it and split by trace as the Collector writes it:
    both decoders give the same spans, field for field (JSON wrappers, serialised nodes and
    documents, Haystack's component spans, sessions, scopes)."""
    for body in read_capture(CAPTURES / f"{name}.otlp"):
        both(body)
        for _, value in split_by_trace(body):
            both(value, for_assembly=True)
