"""The compiled `otlp_proto` decoder (`monitor/ingest/_wire.c`) against the pure-Python reference.

Both paths must give the same `Decoded` — spans, inert spans counted per trace (`for_assembly`),
problems, reject reason and detail — with and without `for_assembly`, for every decoder test case
(test_decode.py runs again here with each `decode` call made on both paths and compared), the
bad-input corpus, the workload generator's messages, production-like traffic where most spans are
not RAG, and fuzzed and structurally mutated messages. Canonical messages must be taken by the
compiled path itself, not handed back to the reference, or the comparison proves nothing.

`RAGMON_REQUIRE_COMPILED=1` (set by `make test`) turns a missing extension into a failure rather
than a skip.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import os
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
import test_decode as cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.trace import SpanKind
from support import sdk_trace

from monitor.demo.workload import generate
from monitor.ingest import decode as decode_mod
from monitor.ingest import dialects
from monitor.ingest.assemble import Assembler, Finished
from monitor.ingest.compiled import slots_layout
from monitor.ingest.config import AssemblyConfig
from monitor.ingest.decode import Decoded
from monitor.kafka.config import Encoding
from monitor.kafka.offsets import OffsetTracker, release_all
from monitor.model import Chunk, Reject, SpanFacts, SpanRole

WIRE = decode_mod.compiled_decoder()
REQUIRED = os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0")
needs_wire = pytest.mark.skipif(
    WIRE is None and not REQUIRED, reason="compiled decoder not built (no C compiler here)"
)


def test_compiled_decoder_is_built_when_required() -> None:
    if not REQUIRED:
        pytest.skip("RAGMON_REQUIRE_COMPILED is not set")
    assert WIRE is not None, "monitor.ingest._wire did not build: see the pip install output"
    pure = os.environ.get("RAGMON_PURE_PYTHON", "") not in ("", "0")
    assert ("python (RAGMON_PURE_PYTHON is set)" if pure else "compiled") == decode_mod.OTLP_PROTO_DECODER


# ---------------------------------------------------------------------------------------------
# the comparison


def on_path(wire: Any, value: bytes, encoding: Encoding, now: int, lean: bool = False) -> Decoded:
    saved = decode_mod._wire
    decode_mod._wire = wire
    try:
        return decode_mod.decode(value, encoding, now, for_assembly=lean)
    finally:
        decode_mod._wire = saved


def both(
    value: bytes,
    encoding: Encoding = Encoding.OTLP_PROTO,
    now_ns: int | None = None,
    *,
    for_assembly: bool = False,
) -> Decoded:
    """Decode on both paths, with and without `for_assembly`; they must agree to the last field and
    type (repr tells 1 from True), and `for_assembly` must only set inert spans aside and leave
    chunk text undecoded. Returns what `decode` would have."""
    assert WIRE is not None, "compiled decoder not built"
    now = time.time_ns() if now_ns is None else now_ns
    ref = on_path(None, value, encoding, now)
    out = on_path(WIRE, value, encoding, now)
    assert repr(out) == repr(ref)
    assert out == ref
    lean_ref = on_path(None, value, encoding, now, lean=True)
    lean = on_path(WIRE, value, encoding, now, lean=True)
    assert repr(lean) == repr(lean_ref)
    assert lean == lean_ref
    assert_set_aside(out, lean)
    return lean if for_assembly else out


def as_full(s: SpanFacts) -> SpanFacts:
    """A span of `for_assembly` as `decode` without it gives it: chunk text decoded (`Chunk.raw`
    holds it undecoded; never both)."""
    if not s.chunks:
        return s
    return dataclasses.replace(s, chunks=[Chunk(c.id, c.text, c.score) for c in s.chunks])


def assert_set_aside(full: Decoded, lean: Decoded) -> None:
    """`lean` is `full` less the inert spans after their trace's first, counted per trace, with
    its chunk text left undecoded."""
    assert (lean.error, lean.detail, lean.problems, lean.records) == (
        full.error,
        full.detail,
        full.problems,
        full.records,
    )
    kept = iter(lean.spans)
    k = next(kept, None)
    seen: set[str] = set()
    counted: dict[str, int] = {}
    for s in full.spans:
        if k is not None and repr(s) == repr(as_full(k)):
            seen.add(s.trace_id)
            k = next(kept, None)
        else:
            assert s.trace_id in seen and dialects.is_inert(s)
            counted[s.trace_id] = counted.get(s.trace_id, 0) + 1
    assert k is None and counted == lean.others


def taken(value: bytes, now_ns: int | None = None) -> Decoded:
    """`both`, and the compiled path decoded it itself (no hand-back to the reference)."""
    assert WIRE is not None
    now = time.time_ns() if now_ns is None else now_ns
    for lean in (False, True):
        assert WIRE.decode_spans(value, now, lean) is not None, "handed back to the reference path"
    return both(value, Encoding.OTLP_PROTO, now)


# ---------------------------------------------------------------------------------------------
# every test of test_decode.py, again, with each decode call compared on both paths


@pytest.fixture(scope="module", autouse=True)
def _differential_decode() -> Iterator[None]:
    """Module-scoped (hypothesis refuses function-scoped fixtures): swaps test_decode's `decode`."""
    if WIRE is None:
        yield
        return
    real = cases.decode
    cases.decode = both
    yield
    cases.decode = real


for _name, _fn in inspect.getmembers(cases, inspect.isfunction):
    if _name.startswith("test_") and _fn.__module__ == cases.__name__:
        globals()[f"{_name}__both_paths"] = needs_wire(_fn)


# ---------------------------------------------------------------------------------------------
# corpora


@needs_wire
@pytest.mark.parametrize("mode", ["per_trace", "batched", "split"])
def test_workload_messages(mode: str) -> None:
    for m in generate(120, seed=5, mode=mode).messages:
        d = taken(m.value)
        assert d.error is None and d.spans


ROOT = {"openinference.span.kind": "CHAIN"}


def bad_input_corpus() -> list[bytes]:
    """tests/ingest/test_bad_input.py's messages (those the decoder sees), and a few of the same kind."""
    rng = random.Random(3)
    whole = generate(2, seed=11).messages[0].value
    values = [
        bytes(rng.randrange(256) for _ in range(500)),
        whole[: len(whole) // 2],
        b'{"resourceSpans": [',
        b"[1, 2, 3]",
        b'{"query": "caf\xe9 \xff", "answer": "x"}',
        b"\x0a" + bytes(rng.randrange(256) for _ in range(4096)),
        whole + b"\x00",
        whole.replace(b"rag.request", b"rag.r\xffquest"),
    ]
    values += [
        v
        for _, v in (
            sdk_trace([("rag", {**ROOT, "input.value": "a question with no answer"})]),
            sdk_trace([("rag", {**ROOT, "input.value": ["not", "a", "string"], "output.value": "x"})]),
            sdk_trace(
                [
                    ("rag", {**ROOT, "input.value": "q?", "output.value": "a."}),
                    (
                        "retrieve",
                        {
                            "openinference.span.kind": "RETRIEVER",
                            "retrieval.documents.0.document.id": "d1",
                            "retrieval.documents.0.document.score": "high",
                        },
                    ),
                ]
            ),
            sdk_trace(
                [("rag", {**ROOT, "input.value": "q?", "output.value": "a."})],
                start_ns=10**9,
                end_ns=2 * 10**9,
            ),
            sdk_trace([("rag", {**ROOT, "input.value": "q", "output.value": "a", "rag.query_type": "qt-1"})]),
        )
    ]
    return values


@needs_wire
def test_bad_input_corpus() -> None:
    for value in bad_input_corpus():
        for encoding in Encoding:
            both(value, encoding)


HTTP_SERVER = {
    "http.method": "POST",
    "http.scheme": "http",
    "http.host": "rag-svc:8000",
    "http.flavor": "1.1",
    "http.target": "/query",
    "http.url": "http://rag-svc:8000/query",
    "http.route": "/query",
    "http.status_code": 200,
    "http.user_agent": "python-httpx/0.27.0",
    "net.host.port": 8000,
    "net.peer.ip": "10.0.3.17",
}
DB = {
    "db.system": "postgresql",
    "db.name": "docs",
    "db.user": "rag",
    "db.statement": "SELECT id, body FROM chunks WHERE id = ANY(%s)",
    "net.peer.name": "pg",
    "net.peer.port": 5432,
}
CACHE = {"db.system": "redis", "db.statement": "GET embedding:7f3a", "db.redis.database_index": 0}


def production_trace(t: cases.Spans) -> None:
    """An HTTP root, a CHAIN below it, and DB, cache and HTTP client spans around the RAG ones."""
    with t.span("POST /query", **HTTP_SERVER), t.span("rag", **ROOT, **{"input.value": "q?"}) as root:
        with t.span("SELECT docs", **DB):
            pass
        with t.span("GET", **CACHE):
            pass
        with (
            t.span(
                "retrieve",
                **{
                    "openinference.span.kind": "RETRIEVER",
                    "input.value": "q?",
                    "retrieval.documents.0.document.id": "d1",
                    "retrieval.documents.0.document.content": "Paris is the capital.",
                    "retrieval.documents.0.document.score": 0.9,
                },
            ),
            t.span("POST", **{"http.method": "POST", "http.url": "http://embed/v1", "http.status_code": 200}),
        ):
            pass
        with t.span("generate", **{"openinference.span.kind": "LLM", "output.value": "Paris."}):
            pass
        root.set_attribute("output.value", "Paris.")
    with (
        t.span("GET /healthz", **{**HTTP_SERVER, "http.route": "/healthz", "http.target": "/healthz"}),
        t.tracer.start_as_current_span("internal", kind=SpanKind.INTERNAL, attributes={"x": [1, 2]}),
    ):
        pass


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
    assert facts is not None and [k for _, k, _ in facts] == [0] * 7 + [1] * 7 + [2]
    assert facts[7] == ("role", 1, SpanRole.OTHER)
    assert slots_layout(Chunk) == [
        ("id", 0, None),
        ("content", 1, None),
        ("score", 1, None),
        ("raw", 1, None),
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
                yield decode_mod._pb_attrs(sp.attributes)


# ---------------------------------------------------------------------------------------------
# shapes the compiled path hands back, and fuzz


def _sample_request() -> ExportTraceServiceRequest:
    t = cases.Spans()
    cases.openinference_trace(t)
    production_trace(t)
    return encode_spans(t.finished)


SAMPLE = _sample_request()
SAMPLE_BYTES = bytes(SAMPLE.SerializeToString())


@needs_wire
def test_non_canonical_shapes_agree() -> None:
    """Merged singular fields, several oneof members, groups, unknown fields: what upb does."""
    span = SAMPLE.resource_spans[0].scope_spans[0].spans[0]
    span_bytes = span.SerializeToString()
    kv = KeyValue(key="input.value", value=AnyValue(string_value="q")).SerializeToString()
    service = KeyValue(key="service.name", value=AnyValue(int_value=3)).SerializeToString()
    extra_fields = [
        b"\x4a" + bytes([len(kv) + 4]) + kv + b"\x12\x02\x18\x01",  # attribute with a 2nd value: merged
        b"\x2a\x03abc",  # a second name: last wins
        b"\xa8\x1f\x01",  # unknown varint field 500
        b"\x83\x1f\x84\x1f",  # an empty group 496
        b"\x08\x01",  # trace_id as a varint: wrong wire type
        b"\x4a\x0b\x0a\x03abc\x12\x04\x10\x01\x18\x02",  # bool and int members both set
        b"\x4a\x00",  # an empty KeyValue
        b"\x4a\x07\x0a\x05input",  # a key without value
        b"\x5a\x04\x12\x02\xc3\x28",  # an event name that is not UTF-8
    ]
    for extra in extra_fields:
        bad = span_bytes + extra
        msg = _wrap(bad)
        both(msg)
        both(msg, Encoding.AUTO)
    rs = SAMPLE.resource_spans[0].SerializeToString()
    res = b"\x0a" + bytes([len(service) + 2]) + b"\x0a" + bytes([len(service)]) + service
    for rs_bytes in (rs + res, res + rs, rs + b"\x0a\x00"):
        both(b"\x0a" + _varint(len(rs_bytes)) + rs_bytes)


def _padded(n: int, width: int) -> bytes:
    """The varint of `n` in exactly `width` bytes (over-long: zero groups with the continuation bit)."""
    short = _varint(n)
    if width == len(short):
        return short
    return bytes(b | 0x80 for b in short) + b"\x80" * (width - len(short) - 1) + b"\x00"


@needs_wire
@pytest.mark.parametrize("width", range(1, 11))
def test_length_prefixes_are_taken_as_upb_takes_them(width: int) -> None:
    """upb reads a length prefix of at most 5 bytes, whatever its value (a varint value may take
    10): a longer one makes the message corrupt on both paths. Found by bench/fuzz.py: the
    compiled path took 6 to 10 bytes and decoded spans where the reference rejected the message."""
    span = SAMPLE.resource_spans[0].scope_spans[0].spans[0].SerializeToString()
    kv = KeyValue(key="input.value", value=AnyValue(string_value="q")).SerializeToString()
    rs = SAMPLE.resource_spans[0].SerializeToString()
    for msg in (
        _wrap(span + b"\x4a" + _padded(len(kv), width) + kv),  # an attribute
        _wrap(span + b"\x2a" + _padded(3, width) + b"abc"),  # the span's name
        b"\x0a" + _padded(len(rs), width) + rs,  # the outermost field
    ):
        d = both(msg)
        assert (d.error is None) == (width <= 5), d.error


@needs_wire
def test_utf8_is_checked_alike_at_every_length_and_position() -> None:
    """The compiled check takes ASCII a word at a time (the last word overlapping): a non-ASCII
    sequence, valid or not, anywhere in a string of any length is judged as upb judges it, in a
    span name, an attribute key, and values the dialects read or skip."""
    span_bytes = SAMPLE.resource_spans[0].scope_spans[0].spans[0].SerializeToString()
    sequences = [b"\xc3\xa9", b"\xc3\x28", b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\x80"]

    def field(tag: bytes, body: bytes) -> bytes:
        return tag + _varint(len(body)) + body

    def attribute(key: bytes, value: bytes) -> bytes:
        return field(b"\x4a", field(b"\x0a", key) + field(b"\x12", field(b"\x0a", value)))

    for n in range(20):
        for pos in range(n + 1):
            for seq in sequences:
                text = b"a" * pos + seq + b"b" * (n - pos)
                for extra in (
                    field(b"\x2a", text),  # the name
                    attribute(text, b"v"),  # a key
                    attribute(b"db.statement", text),  # a value skipped
                    attribute(b"input.value", text),  # a value read
                ):
                    both(_wrap(span_bytes + extra))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _wrap(span: bytes) -> bytes:
    ss = b"\x12" + _varint(len(span)) + span
    rs = b"\x12" + _varint(len(ss)) + ss
    return b"\x0a" + _varint(len(rs)) + rs


fuzz = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@needs_wire
@fuzz
@given(data=st.data())
def test_fuzz_mutated_messages(data: st.DataObject) -> None:
    """Byte flips, insertions, deletions and cuts of a message with RAG and non-RAG spans."""
    raw = bytearray(SAMPLE_BYTES)
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(raw) - 1))
        op = data.draw(st.sampled_from(["set", "insert", "delete"]))
        if op == "set":
            raw[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        else:
            del raw[i : i + data.draw(st.integers(1, 4))]
    cut = data.draw(st.integers(0, len(raw)))
    now = data.draw(st.sampled_from([time.time_ns(), 10**9, 0, -(10**18), 2**63]))
    for enc in (Encoding.OTLP_PROTO, Encoding.AUTO):
        both(bytes(raw[:cut]), enc, now)


def _bare_first_span(parent: bool) -> tuple[ExportTraceServiceRequest, Any]:
    """A copy of SAMPLE whose first span has no attributes (and a parent when asked)."""
    req = ExportTraceServiceRequest()
    req.CopyFrom(SAMPLE)
    span = req.resource_spans[0].scope_spans[0].spans[0]
    del span.attributes[:]
    if parent:
        span.parent_span_id = b"\x02" * 8
    return req, span


@needs_wire
@fuzz
@given(
    kvs=st.lists(
        st.tuples(st.sampled_from([*cases.KNOWN_KEYS, "http.method", "x"]), cases.any_value()), max_size=12
    ),
    parent=st.booleans(),
    events=st.lists(
        st.tuples(
            st.sampled_from([*sorted(dialects.MERGED_EVENTS), "log"]), st.sampled_from(cases.KNOWN_KEYS)
        ),
        max_size=3,
    ),
)
def test_fuzz_attributes_of_any_type(
    kvs: list[tuple[str, dict[str, Any]]], parent: bool, events: list[tuple[str, str]]
) -> None:
    req, span = _bare_first_span(parent)
    values = []
    for key, value in kvs:
        av = AnyValue()
        if cases._to_any_value(value, av):
            span.attributes.append(KeyValue(key=key, value=av))
            values.append(av)
    for i, (name, key) in enumerate(events):
        ev = span.events.add(name=name, time_unix_nano=1)
        if values:
            ev.attributes.append(KeyValue(key=key, value=values[i % len(values)]))
    raw = bytes(req.SerializeToString())
    taken(raw)
    both(raw, Encoding.AUTO)


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list):
        return AnyValue(array_value={"values": [_any(v) for v in value]})
    return AnyValue(string_value=value)


TEXT = st.sampled_from(
    [
        "q?",
        "",
        " ",
        "  a plain answer",
        '{"query": "x"}',
        ' ["x"]',
        '"quoted" and more',
        "\u3000{x",
        "\xa0[",
        "日本",
    ]
) | st.text(max_size=4)
ODD = st.integers(-2, 2) | st.floats(allow_nan=True) | st.booleans() | st.lists(st.just("x"), max_size=2)
ROLE_WORD = st.sampled_from(
    ["user", "USER", "Human", "assistant", "AI", "bot", "model", "system", "tool", "ＵＳＥＲ"]
)


def _oi_attrs() -> st.SearchStrategy[dict[str, Any]]:
    """OpenInference spans near the shapes `_wire.c` maps itself, and just outside them."""
    kind = st.sampled_from(
        ["CHAIN", "chain", "Agent", "RETRIEVER", "LLM", "llm", "TOOL", "RERANKER", "chaın", "", "EMBEDDING"]
    )
    text = TEXT | ODD
    doc = st.fixed_dictionaries(
        {},
        optional={
            "id": st.sampled_from(["d1", "d2", ""]) | st.integers(0, 3),
            "content": TEXT | st.integers(0, 3),
            "score": st.floats(allow_nan=True, allow_infinity=True) | st.integers(0, 1) | st.just("0.5"),
            "metadata": st.just('{"id": "m1"}'),
        },
    )
    message = st.fixed_dictionaries({}, optional={"role": ROLE_WORD | ODD, "content": TEXT | ODD})
    single = st.fixed_dictionaries(
        {},
        optional={
            "openinference.span.kind": kind | st.integers(0, 1),
            "input.value": text,
            "output.value": text,
            "rag.query_type": TEXT | st.integers(0, 2),
            "rag.replay": st.booleans() | st.sampled_from(["true", "no", 1]),
            "metadata": st.just('{"query_type": "m"}'),
            "llm.model_name": TEXT | st.integers(0, 1),
            "gen_ai.request.model": TEXT,
            "traceloop.entity.input": TEXT,
            "traceloop.entity.output": TEXT,
            "gen_ai.retrieval.query.text": TEXT,
            "gen_ai.retrieval.documents": st.just('[{"id": "g1", "content": "x"}]'),
            "gen_ai.input.messages": st.just('[{"role": "user", "content": "u"}]'),
            "gen_ai.completion.0.content": TEXT,
            "input.mime_type": st.just("text/plain"),
        },
    )

    def build(
        one: dict[str, Any], docs: list[dict[str, Any]], ins: list[dict[str, Any]], outs: list[Any]
    ) -> Any:
        out = dict(one)
        for i, d in enumerate(docs):
            out |= {f"retrieval.documents.{i}.document.{k}": v for k, v in d.items()}
        for prefix, msgs in (("llm.input_messages", ins), ("llm.output_messages", outs)):
            for i, m in enumerate(msgs):
                out |= {f"{prefix}.{i}.message.{k}": v for k, v in m.items()}
        return out

    lists = st.lists(message, max_size=3)
    return st.builds(build, single, st.lists(doc, max_size=4), lists, lists)


@needs_wire
@fuzz
@given(attrs=_oi_attrs(), parent=st.booleans(), dup=st.booleans())
def test_fuzz_dialect_shapes_mapped_natively(attrs: dict[str, Any], parent: bool, dup: bool) -> None:
    """The shapes `_wire.c` maps without `dialects.apply`, and every way out of them, agree; an
    attribute given twice counts once, as the last value (upb and the dict agree)."""
    req, span = _bare_first_span(parent)
    for key, value in attrs.items():
        if dup:
            span.attributes.append(KeyValue(key=key, value=_any("first")))
        span.attributes.append(KeyValue(key=key, value=_any(value)))
    taken(bytes(req.SerializeToString()))


@needs_wire
@pytest.mark.parametrize("n_docs", [3, 42, 43, 60])
@pytest.mark.parametrize("prefixed_at", [None, 0, 5])
def test_attributes_past_the_array_or_with_a_prefixed_key_agree(n_docs: int, prefixed_at: int | None) -> None:
    """`_wire.c` keeps a span's attributes in an array (128 at most) while they are all keys of
    its table, and moves them into a dict for `apply` past that or at a prefixed key: what came
    before and after the move, a key repeated across it included, reads the same either way."""
    req, span = _bare_first_span(False)
    attrs: list[tuple[str, Any]] = [("openinference.span.kind", "RETRIEVER"), ("input.value", "q?")]
    for i in range(n_docs):  # 3 keys each: 42 documents fill the array to 128, 43 pass it
        doc = f"retrieval.documents.{i}.document."
        attrs += [(doc + "id", f"d{i}"), (doc + "content", f"text {i}"), (doc + "score", 1.0 / (i + 1))]
    if prefixed_at is not None:
        attrs.insert(prefixed_at, ("retrieval.documents.0.document.extra", "x"))
    attrs += [("input.value", "asked again"), ("retrieval.documents.1.document.id", "again")]
    for key, value in attrs:
        span.attributes.append(KeyValue(key=key, value=_any(value)))
    out = taken(bytes(req.SerializeToString()))
    retriever = out.spans[0]  # the span changed; the others are SAMPLE's
    assert retriever.query == "asked again"
    assert retriever.chunks is not None and len(retriever.chunks) == min(n_docs, 64)
    assert retriever.chunks[1].id == "again"


@needs_wire
def test_openinference_spans_are_mapped_without_apply() -> None:
    """The workload's spans take the native mapping (else the fuzz above would prove little): all
    but those whose text looks like JSON (a quoted title in an answer)."""
    assert WIRE is not None
    before = WIRE.counts()
    spans = [s for m in generate(40, seed=5).messages for s in taken(m.value).spans]
    native, by_apply = (now - then for now, then in zip(WIRE.counts(), before, strict=True))
    assert native + by_apply == 4 * len(spans)  # each decoded four times by `taken`
    assert by_apply <= native // 20


@needs_wire
def test_bad_ids_times_and_services_agree() -> None:
    for field, value in (
        ("trace_id", b""),
        ("trace_id", b"\x00" * 16),
        ("span_id", b"\x00" * 8),
        ("parent_span_id", b"\x01\x02"),
        ("start_time_unix_nano", 1),
        ("end_time_unix_nano", 2**64 - 1),
    ):
        req = ExportTraceServiceRequest()
        req.CopyFrom(SAMPLE)
        setattr(req.resource_spans[0].scope_spans[0].spans[1], field, value)
        taken(bytes(req.SerializeToString()))
    for service in (AnyValue(string_value=""), AnyValue(bool_value=True), AnyValue()):
        req = ExportTraceServiceRequest()
        req.CopyFrom(SAMPLE)
        attrs = req.resource_spans[0].resource.attributes
        del attrs[:]
        attrs.append(KeyValue(key="service.name", value=service))
        attrs.append(KeyValue(key="service.name", value=AnyValue(string_value="second")))
        d = taken(bytes(req.SerializeToString()))
        assert d.problems[:1] == [Reject.BAD_ATTRIBUTE]


# ---------------------------------------------------------------------------------------------
# invalid UTF-8 in one string of a 100-span message: replaced and counted, on both paths


def _hundred_spans() -> ExportTraceServiceRequest:
    """25 OpenInference traces of 4 spans each, in one message (the kafkaexporter's shape)."""
    t = cases.Spans()
    for _ in range(25):
        cases.openinference_trace(t)
    req = encode_spans(t.finished)
    assert len(req.resource_spans[0].scope_spans[0].spans) == 100
    return req


HUNDRED = _hundred_spans()
INVALID = [b"\xc3\x28", b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xff", b"\xe2\x82"]
WHERE = ("name", "key", "read value", "skipped value", "service")


def _field(tag: bytes, body: bytes) -> bytes:
    return tag + _varint(len(body)) + body


def _kv(key: bytes, value: bytes) -> bytes:
    """A KeyValue with a string value, either not necessarily UTF-8."""
    return _field(b"\x0a", key) + _field(b"\x12", _field(b"\x0a", value))


def _with_string(where: str, index: int, text: bytes) -> bytes:
    """HUNDRED with `text` (raw bytes, valid UTF-8 or not) as the span name, an attribute key, a
    value the dialects read (`input.value`), one they skip, or service.name, of span `index`;
    written at the wire level, as protobuf's own types refuse such a `string`."""
    rs = HUNDRED.resource_spans[0]
    ss = rs.scope_spans[0]
    spans = []
    for i, span in enumerate(ss.spans):
        copy = type(span)()
        copy.CopyFrom(span)
        extra = b""
        if i == index and where == "name":
            copy.name = ""
            extra = _field(b"\x2a", text)
        elif i == index and where != "service":
            key, value = {"key": (text, b"v"), "read value": (b"input.value", text)}.get(
                where, (b"http.url", text)
            )
            extra = _field(b"\x4a", _kv(key, value))
        spans.append(_field(b"\x12", copy.SerializeToString() + extra))
    resource = [_field(b"\x0a", _kv(b"service.name", text if where == "service" else b"rag-svc"))]
    resource += [
        _field(b"\x0a", kv.SerializeToString()) for kv in rs.resource.attributes if kv.key != "service.name"
    ]
    scope = _field(b"\x0a", ss.scope.SerializeToString()) + b"".join(spans)
    return _field(b"\x0a", _field(b"\x0a", b"".join(resource)) + _field(b"\x12", scope))


def _check_replaced(where: str, index: int, text: bytes) -> None:
    """The message with one invalid string decodes, on both paths, to what the same message with
    that string replaced (U+FFFD for each invalid sequence) gives, plus one `invalid_utf8`."""
    bad = both(_with_string(where, index, text))
    good = taken(_with_string(where, index, text.decode("utf-8", "replace").encode()))
    assert good.error is None and bad.error is None, bad.detail
    assert len(bad.spans) == 100
    assert bad.spans == good.spans
    assert bad.problems == [Reject.INVALID_UTF8, *good.problems]


@needs_wire
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("index", [0, 50, 99])
def test_one_invalid_string_among_100_spans_is_replaced(where: str, index: int) -> None:
    """The first, a middle or the last span; each kind of invalid sequence at the start, inside
    and at the end of the string."""
    for i, seq in enumerate(INVALID):
        _check_replaced(where, index, (seq + b"abc", b"ab" + seq + b"cd", b"abc" + seq, seq)[(i + index) % 4])


@needs_wire
def test_invalid_strings_in_several_spans_count_each() -> None:
    req = ExportTraceServiceRequest()
    req.CopyFrom(HUNDRED)
    for i in (3, 40, 97):
        req.resource_spans[0].scope_spans[0].spans[i].name = "\x01\x02\x03\x04\x05"
    raw = bytes(req.SerializeToString())
    assert raw.count(b"\x01\x02\x03\x04\x05") == 3
    d = both(raw.replace(b"\x01\x02\x03\x04\x05", b"\xc3\x28abc"))
    assert d.problems == [Reject.INVALID_UTF8] * 3 and len(d.spans) == 100
    assert d.detail == "invalid_utf8 x3 in 100 span(s)"
    assert [s.name for s in d.spans if "\ufffd" in s.name] == ["\ufffd(abc"] * 3


@needs_wire
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.sampled_from(WHERE),
    index=st.integers(0, 99),
    before=st.binary(max_size=6).map(lambda b: b.decode("latin-1").encode()),
    seq=st.sampled_from(INVALID) | st.binary(min_size=1, max_size=4),
    after=st.text(max_size=4).map(str.encode),
)
def test_fuzz_one_invalid_string_among_100_spans(
    where: str, index: int, before: bytes, seq: bytes, after: bytes
) -> None:
    text = before + seq + after
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        _check_replaced(where, index, text)
    else:
        taken(_with_string(where, index, text))


@needs_wire
def test_invalid_strings_nested_in_values_and_events_count_each() -> None:
    """Strings inside an array or a key-value list, an event's name and attribute: each bad one
    replaced and counted, the span kept."""
    span = HUNDRED.resource_spans[0].scope_spans[0].spans[7].SerializeToString()
    strings = [_field(b"\x0a", s) for s in (b"ok", b"\xff", b"\xc3\x28")]
    array = _field(b"\x2a", b"".join(_field(b"\x0a", s) for s in strings))  # 2 bad
    kvlist = _field(b"\x32", _field(b"\x0a", _kv(b"k\x80", b"\xe0\x80\x80")))  # 2 bad
    event = _field(b"\x12", b"log\xff") + _field(b"\x1a", _kv(b"message", b"\xed\xa0\x80"))  # 2 bad
    extra = (
        _field(b"\x4a", _field(b"\x0a", b"tags") + _field(b"\x12", array))
        + _field(b"\x4a", _field(b"\x0a", b"meta") + _field(b"\x12", kvlist))
        + _field(b"\x5a", event)
    )
    d = both(_wrap(span + extra))
    assert d.error is None and d.problems == [Reject.INVALID_UTF8] * 6
    assert [s.span_id for s in d.spans] == [HUNDRED.resource_spans[0].scope_spans[0].spans[7].span_id.hex()]
