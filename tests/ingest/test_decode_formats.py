"""The wire formats `decode` takes, and auto-detection between them: OTLP protobuf (an
ExportTraceServiceRequest or TracesData, many traces and services in one message), OTLP/JSON (as the
Collector writes it, hand-written snake_case, base64 ids) and the flat JSON record (required
fields, bad fields and timestamps).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from decode_cases import Spans, _one_chain_span, hex_ids, ok, openinference_trace, proto_bytes, to_otlp_json
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from monitor.contracts.model import Chunk, RagRecord, Reject, SpanRole
from monitor.ingest import decode as decode_mod
from monitor.ingest.decode import decode
from monitor.kafka.config import Encoding

# ---------------------------------------------------------------------------------------------
# wire formats


def test_release_is_read_from_the_resources_service_version() -> None:
    new, old, none = (
        Spans("svc", service__version="v1.4.2"),
        Spans("svc", service__version="v1.4.1"),
        Spans("svc"),
    )
    for t in (new, old, none):
        openinference_trace(t)
    req = encode_spans(new.finished + old.finished + none.finished)
    for value, enc in (
        (req.SerializeToString(), Encoding.OTLP_PROTO),
        (to_otlp_json(req), Encoding.OTLP_JSON),
    ):
        d = ok(decode(value, enc))
        assert sorted(f.release for f in d.spans) == [""] * 4 + ["v1.4.1"] * 4 + ["v1.4.2"] * 4


def test_release_keys_in_order_a_spans_own_attribute_before_its_resources() -> None:
    t = Spans("svc", service__version="v9", prompt__version="p-resource")
    with (
        t.span("root", **{"openinference.span.kind": "CHAIN", "prompt.version": "p7"}),
        t.span("llm", **{"openinference.span.kind": "LLM", "output.value": "a"}),
    ):
        pass
    bare = Spans("svc", service__version="v9")
    with bare.span("root", **{"openinference.span.kind": "CHAIN", "input.value": "q"}):
        pass
    req = encode_spans(t.finished + bare.finished)
    decode_mod.set_release_keys(["prompt.version", "service.version"])
    try:
        for value, enc in (
            (req.SerializeToString(), Encoding.OTLP_PROTO),
            (to_otlp_json(req), Encoding.OTLP_JSON),
        ):
            by_name = {(f.name, f.release) for f in ok(decode(value, enc)).spans}
            assert by_name == {("root", "p7"), ("llm", "p-resource"), ("root", "v9")}
        decode_mod.set_release_keys([])  # no release read at all
        assert {f.release for f in ok(decode(req.SerializeToString(), Encoding.OTLP_PROTO)).spans} == {""}
    finally:
        decode_mod.set_release_keys(decode_mod.DEFAULT_RELEASE_KEYS)


def test_a_release_that_is_not_a_non_empty_string_is_no_release() -> None:
    for version in ("", 7, True):
        t = Spans("svc", service__version=version)
        openinference_trace(t)
        for f in ok(decode(proto_bytes(t.finished), Encoding.OTLP_PROTO)).spans:
            assert f.release == ""


def test_many_traces_and_services_in_one_message() -> None:
    a, b = Spans("svc-a"), Spans("svc-b")
    for t in (a, b, a):
        openinference_trace(t)
    spans = a.finished + b.finished
    req = encode_spans(spans)
    assert len(req.resource_spans) == 2
    for value, enc in (
        (req.SerializeToString(), Encoding.OTLP_PROTO),
        (to_otlp_json(req), Encoding.OTLP_JSON),
    ):
        d = ok(decode(value, enc))
        assert len(d.spans) == 12
        roots = [f for f in d.spans if f.role is SpanRole.ROOT]
        assert len({f.trace_id for f in roots}) == 3
        assert sorted(f.service for f in roots) == ["svc-a", "svc-a", "svc-b"]
        assert {f.trace_id for f in d.spans} == {f.trace_id for f in roots}


def test_traces_data_and_export_request_are_interchangeable() -> None:
    spans = _one_chain_span()
    as_traces_data = TracesData.FromString(encode_spans(spans).SerializeToString()).SerializeToString()
    assert decode(as_traces_data, Encoding.OTLP_PROTO).spans == decode(proto_bytes(spans), "otlp_proto").spans  # type: ignore[arg-type]


def test_hand_written_otlp_json_with_snake_case_and_every_value_kind() -> None:
    now = time.time_ns()
    message = {
        "resource_spans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"string_value": "hand"}}]},
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": "0AF7651916CD43DD8448EB211C80319C",
                                "span_id": "B7AD6B7169203331",
                                "name": "retrieve",
                                "start_time_unix_nano": now - 2_000_000,
                                "end_time_unix_nano": str(now - 1_000_000),
                                "parentSpanId": "00f067aa0ba902b7",
                                "attributes": [
                                    {"key": "openinference.span.kind", "value": {"stringValue": "RETRIEVER"}},
                                    {"key": "input.value", "value": {"intValue": "42"}},
                                    {"key": "retrieval.documents.0.document.id", "value": {"intValue": 7}},
                                    {
                                        "key": "retrieval.documents.0.document.score",
                                        "value": {"doubleValue": 0.5},
                                    },
                                    {
                                        "key": "retrieval.documents.1.document.id",
                                        "value": {"stringValue": "x"},
                                    },
                                    {
                                        "key": "retrieval.documents.1.document.score",
                                        "value": {"intValue": "2"},
                                    },
                                    {
                                        "key": "tags",
                                        "value": {"arrayValue": {"values": [{"stringValue": "a"}]}},
                                    },
                                    {
                                        "key": "blob",
                                        "value": {"bytesValue": base64.b64encode(b"\x00").decode()},
                                    },
                                    {"key": "meta", "value": {"kvlistValue": {"values": []}}},
                                    {"key": "ratio", "value": {"doubleValue": "NaN"}},
                                    {"key": "rag.replay", "value": {"boolValue": True}},
                                ],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    d = ok(decode(json.dumps(message).encode(), Encoding.OTLP_JSON))
    (f,) = d.spans
    assert (f.trace_id, f.span_id, f.parent_span_id) == (
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
        "00f067aa0ba902b7",
    )
    assert (f.service, f.role, f.query, f.replay) == ("hand", SpanRole.RETRIEVER, "42", True)
    assert f.chunks == [Chunk("7", None, 0.5), Chunk("x", None, 2.0)]
    assert (f.start_ns, f.end_ns) == (now - 2_000_000, now - 1_000_000)
    assert d.problems == []


def test_otlp_json_accepts_base64_ids_as_json_format_writes_them() -> None:
    spans = _one_chain_span()
    raw = json.dumps(MessageToDict(encode_spans(spans))).encode()  # ids in base64
    (f,) = ok(decode(raw, Encoding.OTLP_JSON)).spans
    assert (f.trace_id, f.span_id, f.parent_span_id) == hex_ids(spans[0])


def flat(**overrides: Any) -> dict[str, Any]:
    now = time.time()
    rec: dict[str, Any] = {
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
        "service": "flat-svc",
        "query": "What is 2+2?",
        "query_type": "lookup",
        "chunks": [
            {"id": "m1", "content": "2+2=4", "score": 0.9},
            {"id": "m2", "content": "arithmetic", "score": None},
        ],
        "answer": "4",
        "model": "tiny",
        "start": now - 1.5,
        "end": now - 1.0,
        "replay": False,
    }
    rec.update(overrides)
    return rec


def test_flat_json_record() -> None:
    rec = flat(release="v3")
    d = ok(decode(json.dumps(rec).encode(), Encoding.JSON))
    assert d.spans == [] and d.problems == []
    (r,) = d.records
    assert r == RagRecord(
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        span_id="00f067aa0ba902b7",
        service="flat-svc",
        query="What is 2+2?",
        query_type="lookup",
        chunks=[Chunk("m1", "2+2=4", 0.9), Chunk("m2", "arithmetic", None)],
        answer="4",
        model="tiny",
        start_ns=r.start_ns,
        end_ns=r.end_ns,
        replay=False,
        release="v3",
    )
    assert abs(r.start_ns - rec["start"] * 1e9) < 1e3 and abs(r.end_ns - rec["end"] * 1e9) < 1e3
    # The record's own JSON form decodes to the same record.
    again = ok(decode(json.dumps(r.to_json_dict()).encode(), Encoding.JSON)).records
    assert again == [r]


def test_flat_json_minimal_record_derives_a_stable_trace_id() -> None:
    raw = json.dumps({"query": "q", "answer": 7}).encode()
    (r,) = ok(decode(raw, Encoding.JSON)).records
    assert len(r.trace_id) == 32 and int(r.trace_id, 16) >= 0
    assert len(r.span_id) == 16
    assert (r.answer, r.service, r.query_type, r.chunks, r.start_ns, r.replay) == (
        "7",
        "unknown_service",
        "",
        [],
        0,
        False,
    )
    assert ok(decode(raw, Encoding.JSON)).records[0].trace_id == r.trace_id  # redelivery
    other = json.dumps({"query": "q2", "answer": 7}).encode()
    assert ok(decode(other, Encoding.JSON)).records[0].trace_id != r.trace_id


def test_flat_json_non_hex_ids_are_hashed_stably_uuid_is_normalised() -> None:
    (a,) = ok(decode(json.dumps(flat(trace_id="req-123")).encode(), Encoding.JSON)).records
    (b,) = ok(decode(json.dumps(flat(trace_id="req-123", query="other")).encode(), Encoding.JSON)).records
    assert a.trace_id == b.trace_id and len(a.trace_id) == 32
    (u,) = ok(
        decode(json.dumps(flat(trace_id="4BF92F35-77B3-4DA6-A3CE-929D0E0E4736")).encode(), Encoding.JSON)
    ).records
    assert u.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(
    ("overrides", "error", "problems"),
    [
        ({"query": None}, Reject.MISSING_QUERY, []),
        ({"query": "   "}, Reject.MISSING_QUERY, []),
        ({"query": ["a", "b"]}, Reject.MISSING_QUERY, [Reject.BAD_ATTRIBUTE]),
        ({"answer": None}, Reject.MISSING_ANSWER, []),
        ({"answer": {"text": "x"}}, Reject.MISSING_ANSWER, [Reject.BAD_ATTRIBUTE]),
    ],
)
def test_flat_json_required_fields(overrides: dict[str, Any], error: Reject, problems: list[Reject]) -> None:
    rec = flat(**overrides)
    rec = {k: v for k, v in rec.items() if v is not None}
    d = decode(json.dumps(rec).encode(), Encoding.JSON)
    assert d.error is error and d.records == [] and d.problems == problems


def test_flat_json_bad_fields_are_dropped_not_fatal() -> None:
    rec = flat(
        query=12.5,
        chunks=[{"id": ["x"], "content": "c1", "score": "high"}, {"id": "ok", "score": "0.25"}, 5],
        model=3,
        service=["s"],
        replay="1",
    )
    d = ok(decode(json.dumps(rec).encode(), Encoding.JSON))
    (r,) = d.records
    assert r.query == "12.5"
    assert [(c.content, c.score) for c in r.chunks] == [("c1", None), (None, 0.25)]
    assert r.chunks[0].id  # derived from content after the list id was dropped
    assert r.chunks[1].id == "ok"
    assert (r.model, r.service, r.replay) == (None, "unknown_service", True)
    assert d.problems.count(Reject.BAD_ATTRIBUTE) == 5  # id, score, item 5, model, service


@pytest.mark.parametrize(
    "times",
    [
        {"start": time.time() - 1, "end": time.time() - 2},  # inverted
        {"start": time.time() - 40 * 86400, "end": time.time() - 40 * 86400 + 1},  # far past
        {"start": time.time(), "end": time.time() + 3 * 3600},  # far future
        {"start": "yesterday", "end": time.time()},
        {"start": 1e300, "end": 1e301},
    ],
)
def test_flat_json_bad_timestamps(times: dict[str, Any]) -> None:
    d = ok(decode(json.dumps(flat(**times)).encode(), Encoding.JSON))
    (r,) = d.records
    assert (r.start_ns, r.end_ns) == (0, 0)
    assert d.problems == [Reject.BAD_TIMESTAMP]


# ---------------------------------------------------------------------------------------------
# auto-detection


def test_auto_detects_every_encoding() -> None:
    spans = _one_chain_span()
    want = decode(proto_bytes(spans), Encoding.OTLP_PROTO).spans
    assert decode(proto_bytes(spans), Encoding.AUTO).spans == want
    assert decode(to_otlp_json(encode_spans(spans)), Encoding.AUTO).spans == want
    assert decode(b"\n\t " + to_otlp_json(encode_spans(spans)), Encoding.AUTO).spans == want
    snake = json.dumps({"resource_spans": []}).encode()
    assert decode(snake, Encoding.AUTO).error is Reject.EMPTY  # OTLP/JSON with no spans, not a flat record
    (r,) = ok(decode(b"  " + json.dumps(flat()).encode(), Encoding.AUTO)).records
    assert r.query == "What is 2+2?"


def test_auto_does_not_mistake_protobuf_starting_with_newline_brace_for_json() -> None:
    # Field 1 (tag 0x0a) of length 123 (0x7b = "{"): the bytes start b"\n{", like indented JSON.
    now = time.time_ns()
    data = TracesData()
    rs = data.resource_spans.add()
    span = rs.scope_spans.add().spans.add()
    span.trace_id, span.span_id = b"\x01" * 16, b"\x02" * 8
    span.start_time_unix_nano, span.end_time_unix_nano = now - 1000, now
    span.attributes.append(KeyValue(key="input.value", value=AnyValue(string_value="q")))
    while rs.ByteSize() < 123:
        span.name += "x"
    value = data.SerializeToString()
    assert value[:2] == b"\n{"
    (f,) = ok(decode(value, Encoding.AUTO)).spans
    assert f.role is SpanRole.ROOT and f.query == "q" and f.service == "unknown_service"
