"""Invalid UTF-8 on both decode paths: the compiled check judges a non-ASCII sequence, valid or not,
at every length and position as upb does; an invalid string anywhere in a 100-span message (a
name, a key, a value read or skipped, service.name, nested values, events) is replaced with U+FFFD
and counted once, every span kept.
"""

from __future__ import annotations

import decode_cases as cases
import pytest
from decode_compare import SAMPLE, _varint, _wrap, both, needs_wire, taken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from monitor.contracts.model import Reject


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
