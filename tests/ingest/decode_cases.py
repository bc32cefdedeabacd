"""What the decoder tests share: a real SDK tracer (`Spans`), the encodings as the Collector's
kafkaexporter writes them (protobuf, or OTLP/JSON with hex ids and string int64s), the OpenInference
sample trace, and hypothesis strategies for attribute values.

Helpers decode through this module's `decode` global, as the test_decode_*.py files do through
theirs: test_decode_compiled.py swaps it for its comparison of the compiled and pure-Python paths.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from google.protobuf.json_format import MessageToDict, ParseDict
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from monitor.contracts.model import SpanFacts
from monitor.ingest.decode import Decoded, decode
from monitor.kafka.config import Encoding


class Spans:
    """A real SDK tracer whose finished spans are kept in memory."""

    def __init__(self, service: str = "rag-svc", **resource: Any) -> None:
        """`resource`: more resource attributes, keyed as `attrs` takes them (`service__version`)."""
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service, **attrs(**resource)})
        )
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer: Tracer = self.provider.get_tracer("test")

    @property
    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    @contextmanager
    def span(self, name: str, **attributes: Any) -> Iterator[Any]:
        with self.tracer.start_as_current_span(name, attributes=attributes or None) as s:
            yield s


def attrs(**kv: Any) -> dict[str, Any]:
    """Attribute dicts keyed by dotted names (Python kwargs cannot carry dots)."""
    return {k.replace("__", "."): v for k, v in kv.items()}


def proto_bytes(spans: list[ReadableSpan]) -> bytes:
    value: bytes = encode_spans(spans).SerializeToString()
    return value


def to_otlp_json(message: ExportTraceServiceRequest | TracesData) -> bytes:
    """OTLP/JSON as the Collector writes it: camelCase, int64 as strings, ids as hex (not base64)."""
    d = MessageToDict(message)

    def fix(o: Any) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                    o[k] = base64.b64decode(v).hex()
                else:
                    fix(v)
        elif isinstance(o, list):
            for x in o:
                fix(x)

    fix(d)
    return json.dumps(d).encode()


def hex_ids(span: ReadableSpan) -> tuple[str, str, str]:
    ctx = span.get_span_context()
    assert ctx is not None
    parent = format(span.parent.span_id, "016x") if span.parent else ""
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"), parent


def ok(d: Decoded) -> Decoded:
    assert d.error is None, (d.error, d.detail)
    return d


def by_name(facts: list[SpanFacts]) -> dict[str, SpanFacts]:
    return {f.name: f for f in facts}


def decode_both(spans: list[ReadableSpan]) -> dict[str, SpanFacts]:
    """Decode as protobuf and as OTLP/JSON; both must give identical SpanFacts."""
    from_proto = ok(decode(proto_bytes(spans), Encoding.OTLP_PROTO))
    from_json = ok(decode(to_otlp_json(encode_spans(spans)), Encoding.OTLP_JSON))
    key: Callable[[SpanFacts], str] = lambda f: f.span_id  # noqa: E731
    assert sorted(from_proto.spans, key=key) == sorted(from_json.spans, key=key)
    assert from_proto.problems == from_json.problems
    return by_name(from_proto.spans)


DOC = "Paris is the capital of France. " * 22  # ~700 chars per chunk


def openinference_trace(t: Spans) -> None:
    with t.span(
        "rag",
        **attrs(
            openinference__span__kind="CHAIN",
            input__value="What is the capital of France?",
            output__value="Paris.",
            rag__query_type="lookup",
            rag__replay=True,
        ),
    ):
        docs: dict[str, Any] = {}
        for i, (doc_id, score) in enumerate([("d7", 0.91), ("d2", 0.85), ("d9", 0.40)]):
            docs[f"retrieval.documents.{i}.document.id"] = doc_id
            docs[f"retrieval.documents.{i}.document.content"] = f"{doc_id}: {DOC}"
            docs[f"retrieval.documents.{i}.document.score"] = score
        with t.span(
            "retrieve",
            **attrs(openinference__span__kind="RETRIEVER", input__value="What is the capital of France?"),
        ) as s:
            s.set_attributes(docs)
        with t.span(
            "rerank",
            **attrs(
                openinference__span__kind="RERANKER",
                reranker__query="capital of France",
                reranker__model_name="cross-encoder",
            ),
        ) as s:
            s.set_attributes(
                {
                    "reranker.output_documents.0.document.id": "d2",
                    "reranker.output_documents.0.document.content": "d2 text",
                    "reranker.output_documents.0.document.score": 3.5,
                    "reranker.output_documents.1.document.id": "d7",
                    "reranker.output_documents.1.document.content": "d7 text",
                    "reranker.output_documents.1.document.score": 1.25,
                }
            )
        with t.span(
            "llm",
            **attrs(
                openinference__span__kind="LLM",
                llm__model_name="gpt-4o-mini",
                llm__input_messages__0__message__role="system",
                llm__input_messages__0__message__content="Answer from the context.",
                llm__input_messages__1__message__role="user",
                llm__input_messages__1__message__content="What is the capital of France?",
                llm__output_messages__0__message__role="assistant",
                llm__output_messages__0__message__content="Paris.",
                output__value='{"id": "chatcmpl-1", "choices": []}',
            ),
        ):
            pass


def _one_chain_span(**extra: Any) -> list[ReadableSpan]:
    t = Spans()
    with t.span(
        "c", **{"openinference.span.kind": "CHAIN", "input.value": "q", "output.value": "a", **extra}
    ):
        pass
    return t.finished


# ---------------------------------------------------------------------------------------------
# hypothesis strategies: the attribute keys the dialects read, values of every OTLP/JSON kind

KNOWN_KEYS = [
    "service.name",
    "service.version",
    "openinference.span.kind",
    "input.value",
    "input.mime_type",
    "output.value",
    "metadata",
    "retrieval.documents.0.document.id",
    "retrieval.documents.0.document.content",
    "retrieval.documents.0.document.score",
    "retrieval.documents.0.document.metadata",
    "retrieval.documents.1.document.id",
    "reranker.query",
    "reranker.output_documents.0.document.id",
    "reranker.output_documents.0.document.score",
    "llm.model_name",
    "llm.input_messages.0.message.role",
    "llm.input_messages.0.message.content",
    "llm.output_messages.0.message.content",
    "llm.output_messages.0.message.contents.0.message_content.text",
    "llm.output_messages.0.message.role",
    "gen_ai.operation.name",
    "gen_ai.system",
    "gen_ai.retrieval.query.text",
    "gen_ai.retrieval.documents",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.prompt.0.content",
    "gen_ai.prompt.0.role",
    "gen_ai.completion.0.content",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "llm.request.type",
    "traceloop.span.kind",
    "traceloop.entity.name",
    "traceloop.entity.input",
    "traceloop.entity.output",
    "rag.query_type",
    "rag.replay",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
kind_strings = st.sampled_from(
    ["CHAIN", "RETRIEVER", "RERANKER", "LLM", "TOOL", "retrieval", "chat", "invoke_agent", "workflow", "task"]
)
attr_text = st.one_of(
    st.text(max_size=30),
    kind_strings,
    json_values.map(json.dumps),
    st.sampled_from(['{"query": "q"}', '[{"id": "a", "score": "x"}]', '[{"role": "user", "parts": 1}]']),
)


def any_value(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    leaves: list[st.SearchStrategy[dict[str, Any]]] = [
        attr_text.map(lambda s: {"stringValue": s}),
        st.integers(-(2**63), 2**63 - 1).map(lambda i: {"intValue": str(i)}),
        st.one_of(st.integers(), st.text(max_size=5)).map(lambda i: {"intValue": i}),
        st.one_of(st.floats(), st.text(max_size=5)).map(lambda f: {"doubleValue": f}),
        json_values.map(lambda b: {"boolValue": b}),
        st.binary(max_size=8).map(lambda b: {"bytesValue": base64.b64encode(b).decode()}),
        json_values.map(lambda v: {"stringValue": v}),
        st.just({}),
    ]
    if depth:
        inner = any_value(depth - 1)
        leaves.append(st.lists(inner, max_size=3).map(lambda vs: {"arrayValue": {"values": vs}}))
        leaves.append(
            st.lists(st.fixed_dictionaries({"key": st.text(max_size=5), "value": inner}), max_size=3).map(
                lambda kvs: {"kvlistValue": {"values": kvs}}
            )
        )
    return st.one_of(leaves)


def _to_any_value(v: dict[str, Any], out: AnyValue) -> bool:
    """Fill a proto AnyValue from a fuzzed OTLP/JSON one; False when proto cannot hold it."""
    try:
        ParseDict(v, out)
    except Exception:
        return False
    return True
