"""The compiled `otlp_proto` decoder against the pure-Python reference on the shapes it hands back or
maps itself: non-canonical protobuf (merged fields, groups, unknown fields), over-long length
prefixes, attributes past its array or behind a prefixed key, bad ids, times and services; and
fuzzed: mutated messages, attributes of any type, OpenInference shapes in and just outside its
native mapping.
"""

from __future__ import annotations

import time
from typing import Any

import decode_cases as cases
import pytest
from decode_compare import SAMPLE, SAMPLE_BYTES, WIRE, _any, _varint, _wrap, both, needs_wire, taken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from monitor.contracts.model import Reject
from monitor.demo.workload import generate
from monitor.ingest import decode as decode_mod
from monitor.ingest import dialects
from monitor.kafka.config import Encoding


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


@needs_wire
def test_scalar_values_of_keys_never_read_agree() -> None:
    """An attribute no dialect reads (`http.status_code`) is only validated; its one-field scalar
    values (int, bool, double, short string) are checked in line, the rest by the schema walk:
    both must take and refuse what upb does."""
    span = SAMPLE.resource_spans[0].scope_spans[0].spans[0].SerializeToString()
    values = [
        b"\x18\xc8\x01",  # int 200
        b"\x18" + b"\xff" * 9 + b"\x01",  # a 10-byte varint
        b"\x18" + b"\xff" * 10 + b"\x01",  # 11 bytes: corrupt
        b"\x18\x80",  # a truncated varint
        b"\x18\x01\x18\x02",  # two ints: the last wins
        b"\x18\x01\x0a\x01x",  # an int, then a string
        b"\x10\x01",  # bool
        b"\x21" + b"\x00" * 8,  # double 0.0
        b"\x21" + b"\x00" * 7,  # a truncated double
        b"\x21" + b"\x00" * 8 + b"\x10\x00",  # a double, then a bool
        b"\x1d\x00\x00\x00\x00",  # int_value as fixed32: wrong wire type
        b"\x19" + b"\x00" * 8,  # int_value as fixed64: wrong wire type
        b"\x20\x00",  # double_value as a varint: wrong wire type
        b"\x08\x01",  # string_value as a varint: wrong wire type
        b"\x78\x05",  # unknown varint field 15
        b"\x79" + b"\x00" * 8,  # unknown fixed64 field 15
        b"\x00\x01",  # field 0
        b"\x0a\x03abc",  # a short string
        b"\x0a\x02\xc3\x28",  # not UTF-8
        b"\x0a\x04abc",  # a string past its value
        b"",  # an empty value
    ]
    for value in values:
        kv = b"\x0a\x10http.status_code" + b"\x12" + _varint(len(value)) + value
        both(_wrap(span + b"\x4a" + _varint(len(kv)) + kv))


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
    release_key = any(k in decode_mod.release_keys() for k, _ in kvs) or any(
        k in decode_mod.release_keys() for _, k in events
    )
    if release_key:  # a span's own release: handed back (see the next tests), still the same
        both(raw)
    else:
        taken(raw)
    both(raw, Encoding.AUTO)


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


@needs_wire
@fuzz
@given(
    kvs=st.lists(
        st.tuples(
            st.sampled_from(["service.name", "service.version", "prompt.version", "x"]), cases.any_value(0)
        ),
        max_size=6,
    )
)
def test_fuzz_resource_release_is_decoded_natively(kvs: list[tuple[str, dict[str, Any]]]) -> None:
    """The release from resource attributes (`service.version` and the like, repeated, of any
    type) is the compiled path's own: never handed back, the reference's value."""
    req = ExportTraceServiceRequest()
    req.CopyFrom(SAMPLE)
    attrs = req.resource_spans[0].resource.attributes
    del attrs[:]
    for key, value in kvs:
        av = AnyValue()
        if cases._to_any_value(value, av):
            attrs.append(KeyValue(key=key, value=av))
    decode_mod.set_release_keys(["prompt.version", "service.version"])
    try:
        taken(bytes(req.SerializeToString()))
    finally:
        decode_mod.set_release_keys(decode_mod.DEFAULT_RELEASE_KEYS)


@needs_wire
def test_a_spans_own_release_attribute_goes_to_the_reference_path() -> None:
    req = ExportTraceServiceRequest()
    req.CopyFrom(SAMPLE)
    req.resource_spans[0].resource.attributes.append(
        KeyValue(key="service.version", value=AnyValue(string_value="v1"))
    )
    span = req.resource_spans[0].scope_spans[0].spans[1]
    span.attributes.append(KeyValue(key="service.version", value=AnyValue(string_value="v2")))
    value = bytes(req.SerializeToString())
    assert WIRE is not None and WIRE.decode_spans(value, time.time_ns(), True) is None
    d = both(value)
    assert {f.release for f in d.spans} == {"v1", "v2"}
