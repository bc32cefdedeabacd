"""Malformed input of every kind comes back from `decode` as a `Reject`, or as a counted problem with
the span kept, never as an exception: empty and garbage messages, truncated protobuf, invalid UTF-8,
malformed ids, wrong attribute types, absurd times; a reject's detail never carries message content.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from decode_cases import (
    Spans,
    _one_chain_span,
    decode_both,
    ok,
    openinference_trace,
    proto_bytes,
    to_otlp_json,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from monitor.contracts.model import Reject, SpanRole
from monitor.ingest.decode import decode
from monitor.kafka.config import Encoding


@pytest.mark.parametrize("encoding", list(Encoding))
def test_empty_message(encoding: Encoding) -> None:
    d = decode(b"", encoding)
    assert d.error is Reject.EMPTY and d.spans == [] and d.records == []


@pytest.mark.parametrize(
    ("value", "encoding", "error"),
    [
        (b"\xff\xfe\x00garbage", Encoding.OTLP_PROTO, Reject.DECODE_ERROR),
        (b"\x0a\xff\xff\xff\xff\x0f", Encoding.OTLP_PROTO, Reject.DECODE_ERROR),
        (TracesData().SerializeToString() + b"", Encoding.OTLP_PROTO, Reject.EMPTY),
        (b'{"query": "x",', Encoding.JSON, Reject.DECODE_ERROR),
        (b"[1, 2]", Encoding.JSON, Reject.DECODE_ERROR),
        (b'"just a string"', Encoding.OTLP_JSON, Reject.DECODE_ERROR),
        (b'{"query": "caf\xe9", "answer": "a"}', Encoding.JSON, Reject.INVALID_UTF8),
        (b'{"query": "caf\xe9 \xff", "answer": "x"}', Encoding.AUTO, Reject.INVALID_UTF8),
        (b"{\xff\x00\x13garbage\x80", Encoding.AUTO, Reject.DECODE_ERROR),
        (b'{"query": "\\ud800", "answer": "a"}', Encoding.JSON, Reject.INVALID_UTF8),
        (b'{"resourceSpans": "nope"}', Encoding.OTLP_JSON, Reject.DECODE_ERROR),
        (b'{"resourceSpans": []}', Encoding.OTLP_JSON, Reject.EMPTY),
        (b'{"other": 1}', Encoding.OTLP_JSON, Reject.EMPTY),
        (b"   ", Encoding.JSON, Reject.EMPTY),
        (b"   ", Encoding.AUTO, Reject.EMPTY),
        (b'{"query": "x"', Encoding.AUTO, Reject.DECODE_ERROR),
        (b"[" * 100_000, Encoding.JSON, Reject.DECODE_ERROR),
    ],
)
def test_bad_messages_are_rejected(value: bytes, encoding: Encoding, error: Reject) -> None:
    d = decode(value, encoding)
    assert d.error is error, d.detail
    assert d.spans == [] and d.records == []
    assert d.detail and len(d.detail) <= 100


def test_emoji_surrogate_pair_escapes_are_fine() -> None:
    (r,) = ok(decode(b'{"query": "\\ud83d\\ude00?", "answer": "a"}', Encoding.JSON)).records
    assert r.query == "\U0001f600?"


def test_truncated_protobuf_never_raises() -> None:
    t = Spans()
    openinference_trace(t)
    value = proto_bytes(t.finished)
    for n in range(1, len(value), 7):
        d = decode(value[:n], Encoding.OTLP_PROTO)
        assert d.error in (None, Reject.DECODE_ERROR, Reject.EMPTY, Reject.INVALID_UTF8)


def _request_with(mutate: Callable[[ExportTraceServiceRequest], None]) -> bytes:
    req = encode_spans(_one_chain_span())
    mutate(req)
    value: bytes = req.SerializeToString()
    return value


def test_invalid_utf8_in_protobuf_string_field_is_replaced_and_counted() -> None:
    """upb refuses a whole message for one string that is not UTF-8: it used to be rejected with
    every good span in it. Now each such string has its bad bytes replaced by U+FFFD (as the
    OpenTelemetry SDKs and Collector do) and counts once as `invalid_utf8`; the span is kept."""
    marker = "\u00e9MARK"
    for where in ("name", "query", "key", "service"):
        req = encode_spans(_one_chain_span(**({"input.value": marker} if where == "query" else {})))
        span = req.resource_spans[0].scope_spans[0].spans[0]
        if where == "name":
            span.name = marker
        elif where == "key":
            span.attributes.append(KeyValue(key=marker, value=AnyValue(string_value="v")))
        elif where == "service":
            for kv in req.resource_spans[0].resource.attributes:
                if kv.key == "service.name":
                    kv.value.string_value = marker
        raw = req.SerializeToString()
        bad = raw.replace(marker.encode(), b"\xff\xfe" + marker.encode()[2:])  # same length, not UTF-8
        assert bad != raw
        fixed = "\ufffd\ufffdMARK"
        for encoding in (Encoding.OTLP_PROTO, Encoding.AUTO):
            d = decode(bad, encoding)
            assert d.error is None, (where, d.detail)
            assert d.problems == [Reject.INVALID_UTF8], where
            assert d.detail == "invalid_utf8 x1 in 1 span(s)"
            (f,) = d.spans
            assert (f.name, f.query, f.answer, f.role) == (
                fixed if where == "name" else "c",
                fixed if where == "query" else "q",
                "a",
                SpanRole.ROOT,
            )
            assert f.service == (fixed if where == "service" else "rag-svc")


def test_invalid_utf8_and_corrupt_is_a_decode_error() -> None:
    raw = proto_bytes(_one_chain_span(**{"input.value": "\u00e9MARK"}))
    bad = raw.replace("\u00e9MARK".encode(), b"\xff\xfeMARK")
    for cut in (bad[:-3], bad + b"\x0a\x05ab"):
        d = decode(cut, Encoding.OTLP_PROTO)
        assert (d.error, d.spans, d.problems) == (Reject.DECODE_ERROR, [], [])


def test_span_with_malformed_ids_is_dropped_others_kept() -> None:
    def break_first(req: ExportTraceServiceRequest) -> None:
        spans = req.resource_spans[0].scope_spans[0].spans
        good = spans.add()
        good.CopyFrom(spans[0])
        good.span_id = b"\x01" * 8
        spans[0].trace_id = b"\x01\x02\x03"

    d = ok(decode(_request_with(break_first), Encoding.OTLP_PROTO))
    assert [f.span_id for f in d.spans] == ["01" * 8]
    assert d.problems == [Reject.DECODE_ERROR]
    assert "decode_error" in d.detail  # the log line says what was lost

    for field, value in (("trace_id", b""), ("span_id", b"\x00" * 8), ("parent_span_id", b"\x01\x02")):

        def break_only(req: ExportTraceServiceRequest, field: str = field, value: bytes = value) -> None:
            setattr(req.resource_spans[0].scope_spans[0].spans[0], field, value)

        d = decode(_request_with(break_only), Encoding.OTLP_PROTO)
        assert d.error is Reject.DECODE_ERROR and d.spans == [], field


def test_otlp_json_span_with_bad_ids_is_dropped() -> None:
    good = json.loads(to_otlp_json(encode_spans(_one_chain_span())))
    for bad_id in ("xyz", 12, "00" * 16, None):
        msg = json.loads(json.dumps(good))
        msg["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = bad_id
        d = decode(json.dumps(msg).encode(), Encoding.OTLP_JSON)
        assert d.error is Reject.DECODE_ERROR, bad_id


def test_wrong_attribute_types_drop_the_field() -> None:
    t = Spans()
    root_attrs = {"openinference.span.kind": "CHAIN", "input.value": 17, "output.value": ["a", "b"]}
    retriever_attrs = {
        "openinference.span.kind": "RETRIEVER",
        "retrieval.documents.0.document.id": ["not", "an", "id"],
        "retrieval.documents.0.document.content": "first",
        "retrieval.documents.0.document.score": "very relevant",
        "retrieval.documents.1.document.id": "b",
        "retrieval.documents.1.document.score": "0.5",
        "retrieval.documents.2.document.id": "c",
        "retrieval.documents.2.document.score": True,
        "rag.query_type": ["x"],
    }
    with t.span("root", **root_attrs), t.span("ret", **retriever_attrs):
        pass
    f = decode_both(t.finished)
    root = f["root"]
    assert (root.query, root.answer) == ("17", None)
    assert root.problems == [Reject.BAD_ATTRIBUTE]
    ret = f["ret"]
    assert ret.chunks is not None
    assert [(c.content, c.score) for c in ret.chunks] == [("first", None), (None, 0.5), (None, None)]
    assert ret.chunks[0].id not in ("", "['not', 'an', 'id']")
    assert [c.id for c in ret.chunks[1:]] == ["b", "c"]
    assert ret.query_type is None
    assert ret.problems == [Reject.BAD_ATTRIBUTE] * 4  # id, score, bool score, query_type
    d = decode(proto_bytes(t.finished), Encoding.OTLP_PROTO)
    assert sorted(d.problems) == sorted(root.problems + ret.problems)


@pytest.mark.parametrize(
    ("start_offset", "end_offset"),
    [
        (-1_000, -2_000),  # end before start
        (-40 * 86400 * 10**9, -40 * 86400 * 10**9 + 1_000),  # a month and more ago
        (0, 2 * 3600 * 10**9),  # ends two hours in the future
    ],
)
def test_absurd_span_times_are_zeroed_span_kept(start_offset: int, end_offset: int) -> None:
    now = time.time_ns()
    t = Spans()
    s = t.tracer.start_span(
        "c",
        attributes={"openinference.span.kind": "CHAIN", "input.value": "q"},
        start_time=now + start_offset,
    )
    s.end(end_time=now + end_offset)  # the SDK accepts any times, so producers do send these
    for d in (
        decode(proto_bytes(t.finished), Encoding.OTLP_PROTO, now_ns=now),
        decode(to_otlp_json(encode_spans(t.finished)), Encoding.OTLP_JSON, now_ns=now),
    ):
        (f,) = ok(d).spans
        assert (f.start_ns, f.end_ns) == (0, 0)
        assert f.problems == [Reject.BAD_TIMESTAMP] and d.problems == [Reject.BAD_TIMESTAMP]
        assert f.query == "q"


def test_now_ns_bounds_plausible_times() -> None:
    spans = _one_chain_span()
    value = proto_bytes(spans)
    assert decode(value, Encoding.OTLP_PROTO).spans[0].start_ns == spans[0].start_time
    way_later = time.time_ns() + 60 * 86400 * 10**9
    assert decode(value, Encoding.OTLP_PROTO, now_ns=way_later).spans[0].start_ns == 0


def test_detail_never_carries_message_content() -> None:
    secret = "SECRET-" + "x" * 200
    for value, enc in (
        (b'{"query": "' + secret.encode() + b'", ', Encoding.JSON),
        (json.dumps({"query": [secret], "answer": secret}).encode(), Encoding.JSON),
        (secret.encode(), Encoding.OTLP_PROTO),
    ):
        d = decode(value, enc)
        assert d.error is not None and "SECRET" not in d.detail and len(d.detail) <= 100
