"""Decoding each attribute dialect into SpanFacts: OpenInference, the GenAI semantic conventions
(current, and the legacy indexed attributes and events) and Traceloop; the role of a span without a
kind, the `rag.replay` forms, the default service name, and the chunk text the ingest stage's decode
leaves undecoded. Spans come from the real OpenTelemetry SDK (decode_cases.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from decode_cases import (
    DOC,
    Spans,
    _one_chain_span,
    attrs,
    by_name,
    decode_both,
    hex_ids,
    ok,
    openinference_trace,
    proto_bytes,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from monitor.contracts.model import Chunk, RagRecord, Reject, SpanRole
from monitor.ingest.decode import decode
from monitor.kafka.config import Encoding


def test_openinference_trace_maps_roles_fields_and_ids() -> None:
    t = Spans("rag-svc")
    openinference_trace(t)
    sdk = {s.name: s for s in t.finished}
    facts = decode_both(t.finished)

    for name, s in sdk.items():
        f = facts[name]
        assert (f.trace_id, f.span_id, f.parent_span_id) == hex_ids(s)
        assert f.service == "rag-svc"
        assert (f.start_ns, f.end_ns) == (s.start_time, s.end_time)
        assert f.problems == []

    root = facts["rag"]
    assert root.role is SpanRole.ROOT and root.parent_span_id == ""
    assert root.query == "What is the capital of France?"
    assert root.answer == "Paris."
    assert root.query_type == "lookup"
    assert root.replay is True

    ret = facts["retrieve"]
    assert ret.role is SpanRole.RETRIEVER
    assert ret.query == "What is the capital of France?"
    assert ret.chunks == [
        Chunk("d7", f"d7: {DOC}", 0.91),
        Chunk("d2", f"d2: {DOC}", 0.85),
        Chunk("d9", f"d9: {DOC}", 0.40),
    ]

    rr = facts["rerank"]
    assert rr.role is SpanRole.RERANKER
    assert rr.query == "capital of France"
    assert rr.chunks == [Chunk("d2", "d2 text", 3.5), Chunk("d7", "d7 text", 1.25)]

    llm = facts["llm"]
    assert llm.role is SpanRole.LLM
    assert llm.answer == "Paris."  # the assistant message, not the raw provider JSON in output.value
    assert llm.model == "gpt-4o-mini"
    assert llm.query == "What is the capital of France?"  # last user message
    assert llm.query_type is None and llm.replay is False


def test_openinference_json_input_and_output_values_are_unwrapped() -> None:
    t = Spans()
    with t.span(
        "chain",
        **attrs(
            openinference__span__kind="AGENT",
            input__value=json.dumps({"question": "Who wrote Hamlet?", "chat_history": []}),
            input__mime_type="application/json",
            output__value=json.dumps({"answer": "Shakespeare.", "context": ["x"]}),
        ),
    ):
        with t.span(
            "retriever",
            **attrs(openinference__span__kind="RETRIEVER", input__value='{"query": "Hamlet author"}'),
        ):
            pass
        with t.span("plain", **attrs(openinference__span__kind="CHAIN", input__value="{not json")):
            pass
    f = decode_both(t.finished)
    assert (f["chain"].role, f["chain"].query, f["chain"].answer) == (
        SpanRole.ROOT,
        "Who wrote Hamlet?",
        "Shakespeare.",
    )
    assert f["retriever"].query == "Hamlet author"
    assert f["retriever"].chunks is None  # a retriever that returned nothing says so by absence
    # A nested CHAIN is still a ROOT candidate; it keeps its parent so the assembler can rank it.
    assert f["plain"].role is SpanRole.ROOT and f["plain"].parent_span_id == f["chain"].span_id
    assert f["plain"].query == "{not json"


def test_genai_semconv_current() -> None:
    t = Spans("genai-svc")
    with t.span(
        "invoke_agent rag",
        **attrs(
            gen_ai__operation__name="invoke_agent",
            gen_ai__input__messages=json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "How tall is Everest?"}]}]
            ),
            gen_ai__output__messages=json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "8,849 m."}]}]
            ),
            rag__query_type="exact_match",
        ),
    ):
        with t.span(
            "retrieval kb",
            **attrs(
                gen_ai__operation__name="retrieval",
                gen_ai__retrieval__query__text="Everest height",
                gen_ai__retrieval__documents=json.dumps(
                    [
                        {"id": "e1", "score": 0.8, "content": "Everest is 8,849 m tall."},
                        {"id": "e2", "score": 0.5},
                    ]
                ),
            ),
        ):
            pass
        with t.span(
            "chat gpt-4o",
            **attrs(
                gen_ai__operation__name="chat",
                gen_ai__request__model="gpt-4o",
                gen_ai__response__model="gpt-4o-2024-08-06",
                gen_ai__input__messages=json.dumps(
                    [
                        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
                        {"role": "user", "content": "How tall is Everest?"},
                    ]
                ),
                gen_ai__output__messages=json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": "8,849 m."}],
                            "finish_reason": "stop",
                        }
                    ]
                ),
            ),
        ):
            pass
        with t.span("embeddings", **attrs(gen_ai__operation__name="embeddings")):
            pass
    f = decode_both(t.finished)
    root = f["invoke_agent rag"]
    assert (root.role, root.query, root.answer, root.query_type, root.service) == (
        SpanRole.ROOT,
        "How tall is Everest?",
        "8,849 m.",
        "exact_match",
        "genai-svc",
    )
    ret = f["retrieval kb"]
    assert ret.role is SpanRole.RETRIEVER
    assert ret.query == "Everest height"
    assert ret.chunks == [Chunk("e1", "Everest is 8,849 m tall.", 0.8), Chunk("e2", None, 0.5)]
    chat = f["chat gpt-4o"]
    assert (chat.role, chat.answer, chat.model, chat.query) == (
        SpanRole.LLM,
        "8,849 m.",
        "gpt-4o-2024-08-06",
        "How tall is Everest?",
    )
    assert f["embeddings"].role is SpanRole.OTHER


def test_genai_semconv_legacy_indexed_attributes_and_events() -> None:
    t = Spans()
    with t.span("handler"):
        with t.span(
            "openai.chat",
            **attrs(
                llm__request__type="chat",
                gen_ai__system="openai",
                gen_ai__request__model="gpt-3.5-turbo",
                gen_ai__prompt__0__role="system",
                gen_ai__prompt__0__content="Use the context.",
                gen_ai__prompt__1__role="user",
                gen_ai__prompt__1__content="Capital of Italy?",
                gen_ai__completion__0__role="assistant",
                gen_ai__completion__0__content="Rome.",
            ),
        ):
            pass
        # Semconv before 1.37 also put prompt and completion on span events.
        with t.span(
            "chat old",
            **attrs(gen_ai__operation__name="chat", gen_ai__system="openai", gen_ai__request__model="m1"),
        ) as s:
            s.add_event(
                "gen_ai.content.prompt",
                {"gen_ai.prompt": json.dumps([{"role": "user", "content": "Capital of Spain?"}])},
            )
            s.add_event(
                "gen_ai.content.completion",
                {"gen_ai.completion": json.dumps([{"role": "assistant", "content": "Madrid."}])},
            )
    f = decode_both(t.finished)
    handler = f["handler"]
    assert handler.role is SpanRole.ROOT  # no parent, no dialect kind
    assert handler.query is None and handler.answer is None
    legacy = f["openai.chat"]
    assert (legacy.role, legacy.query, legacy.answer, legacy.model) == (
        SpanRole.LLM,
        "Capital of Italy?",
        "Rome.",
        "gpt-3.5-turbo",
    )
    old = f["chat old"]
    assert (old.role, old.query, old.answer, old.model) == (
        SpanRole.LLM,
        "Capital of Spain?",
        "Madrid.",
        "m1",
    )


def test_traceloop_workflow_tasks_and_retriever_task() -> None:
    t = Spans("tl-svc")
    with t.span(
        "rag_pipeline.workflow",
        **attrs(
            traceloop__span__kind="workflow",
            traceloop__entity__name="rag_pipeline",
            traceloop__entity__input=json.dumps({"args": [], "kwargs": {"question": "What is RAG?"}}),
            traceloop__entity__output=json.dumps("Retrieval-augmented generation."),
            rag__replay="true",
        ),
    ):
        with t.span(
            "retrieve_docs.task",
            **attrs(
                traceloop__span__kind="task",
                traceloop__entity__name="retrieve_docs",
                traceloop__entity__input=json.dumps({"args": ["What is RAG?"], "kwargs": {}}),
                traceloop__entity__output=json.dumps(
                    [
                        {"id": "k1", "content": "RAG combines retrieval and generation.", "score": 0.7},
                        {"page_content": "no id here", "metadata": {"source": "wiki"}},
                    ]
                ),
            ),
        ):
            pass
        with t.span(
            "format.task",
            **attrs(
                traceloop__span__kind="task",
                traceloop__entity__input='{"inputs": {"x": 1}}',
                traceloop__entity__output='{"outputs": {"text": "formatted"}}',
            ),
        ):
            pass
        with t.span(
            "agent",
            **attrs(
                traceloop__span__kind="agent",
                traceloop__entity__input='{"inputs": {"input": "sub question"}}',
                traceloop__entity__output='{"outputs": {"output": "sub answer"}}',
            ),
        ):
            pass
    f = decode_both(t.finished)
    wf = f["rag_pipeline.workflow"]
    assert (wf.role, wf.query, wf.answer, wf.replay, wf.service) == (
        SpanRole.ROOT,
        "What is RAG?",
        "Retrieval-augmented generation.",
        True,
        "tl-svc",
    )
    ret = f["retrieve_docs.task"]
    assert ret.role is SpanRole.RETRIEVER
    assert ret.query == "What is RAG?"
    assert ret.chunks is not None and [c.content for c in ret.chunks] == [
        "RAG combines retrieval and generation.",
        "no id here",
    ]
    assert ret.chunks[0] == Chunk("k1", "RAG combines retrieval and generation.", 0.7)
    assert ret.chunks[1].id  # an id-less document gets a stable derived id
    assert f["format.task"].role is SpanRole.OTHER
    agent = f["agent"]
    assert (agent.role, agent.query, agent.answer) == (SpanRole.ROOT, "sub question", "sub answer")


def test_parentless_span_without_kind_is_root_child_without_kind_is_other() -> None:
    t = Spans()
    with (
        t.span("POST /ask", **attrs(input__value="q?", output__value="a.", http__method="POST")),
        t.span("db query", db__system="postgresql"),
    ):
        pass
    f = decode_both(t.finished)
    assert (f["POST /ask"].role, f["POST /ask"].query, f["POST /ask"].answer) == (SpanRole.ROOT, "q?", "a.")
    assert f["db query"].role is SpanRole.OTHER
    assert f["db query"].query is None


def test_child_span_without_kind_is_classified_by_its_attributes() -> None:
    t = Spans()
    with t.span("root"):
        with t.span(
            "search",
            **{"retrieval.documents.0.document.id": "a", "retrieval.documents.0.document.score": 1.0},
        ):
            pass
        with t.span("gen", **{"llm.output_messages.0.message.content": "hi"}):
            pass
    f = decode_both(t.finished)
    assert f["search"].role is SpanRole.RETRIEVER and f["search"].chunks == [Chunk("a", None, 1.0)]
    assert f["gen"].role is SpanRole.LLM and f["gen"].answer == "hi"


@pytest.mark.parametrize(
    ("value", "expected", "problem"),
    [
        (True, True, False),
        ("true", True, False),
        ("1", True, False),
        ("false", False, False),
        (0, False, False),
    ],
)
def test_rag_replay_forms(value: Any, expected: bool, problem: bool) -> None:
    t = Spans()
    with t.span("r", **{"openinference.span.kind": "CHAIN", "rag.replay": value}):
        pass
    (f,) = ok(decode(proto_bytes(t.finished), Encoding.OTLP_PROTO)).spans
    assert f.replay is expected
    assert (Reject.BAD_ATTRIBUTE in f.problems) is problem


def test_span_status_and_generator_tokens() -> None:
    """The RED figures a span gives: status ERROR (on any role), and an LLM span's tokens from
    GenAI semconv (current names over the older ones), Traceloop's older names or OpenInference's;
    a negative, huge or textual count is dropped as bad_attribute, never read as a number."""
    from opentelemetry.trace import Status, StatusCode

    oi_llm = {"openinference.span.kind": "LLM", "llm.output_messages.0.message.content": "Paris."}
    t = Spans()
    with t.span("rag", **{"openinference.span.kind": "CHAIN", "input.value": "q?"}) as root:
        with t.span("oi", **oi_llm, **{"llm.token_count.prompt": 120, "llm.token_count.completion": 30}):
            pass
        with t.span(
            "semconv",
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.usage.input_tokens": 5,
                "gen_ai.usage.output_tokens": 7,
                "gen_ai.usage.prompt_tokens": 999,
            },
        ) as failed:
            failed.set_status(Status(StatusCode.ERROR, "upstream 503"))
        with t.span(
            "legacy",
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.usage.prompt_tokens": 11,
                "gen_ai.usage.completion_tokens": 4,
            },
        ):
            pass
        with t.span("task", **{"traceloop.span.kind": "task", "gen_ai.usage.prompt_tokens": 11}):
            pass
        hostile = {"llm.token_count.prompt": -5, "llm.token_count.completion": 10**12}
        with t.span("hostile", **oi_llm, **hostile):
            pass
        with t.span("textual", **oi_llm, **{"gen_ai.usage.input_tokens": "12"}):
            pass
        with t.span("retriever", **{"openinference.span.kind": "RETRIEVER", "llm.token_count.prompt": 3}):
            pass
        root.set_status(Status(StatusCode.ERROR))
    f = decode_both(t.finished)
    assert {name: s.error for name, s in f.items()} == {
        "rag": True,
        "oi": False,
        "semconv": True,
        "legacy": False,
        "task": False,
        "hostile": False,
        "textual": False,
        "retriever": False,
    }
    tokens = {name: (s.input_tokens, s.output_tokens) for name, s in f.items()}
    assert tokens == {
        "rag": (None, None),
        "oi": (120, 30),
        "semconv": (5, 7),
        "legacy": (11, 4),
        "task": (None, None),  # no LLM role: no generator tokens
        "hostile": (None, None),
        "textual": (None, None),
        "retriever": (None, None),
    }
    assert f["hostile"].problems == [Reject.BAD_ATTRIBUTE, Reject.BAD_ATTRIBUTE]
    assert f["textual"].problems == [Reject.BAD_ATTRIBUTE]
    assert not f["oi"].problems and not f["semconv"].problems


def test_default_service_name_when_resource_has_none() -> None:
    req = encode_spans(_one_chain_span())
    del req.resource_spans[0].resource.attributes[:]
    (f,) = ok(decode(req.SerializeToString(), Encoding.OTLP_PROTO)).spans
    assert f.service == "unknown_service"


def test_for_assembly_leaves_chunk_text_undecoded() -> None:
    """The ingest stage's decode (`for_assembly`) hands retrieved text over as its UTF-8 bytes
    (`Chunk.raw`, `content` None), whether the documents were mapped natively or by `apply` (a
    score sent as a string); `text`, and so the record's JSON, read it back unchanged."""
    t = Spans()
    doc = "Zürich — 東京 \U0001f600 plain"
    with t.span("rag", **attrs(openinference__span__kind="CHAIN", input__value="q?", output__value="a.")):
        for name, score in (("native", 0.9), ("by-apply", "0.5")):
            with t.span(
                name,
                **{
                    "openinference.span.kind": "RETRIEVER",
                    "retrieval.documents.0.document.id": "d1",
                    "retrieval.documents.0.document.content": doc,
                    "retrieval.documents.0.document.score": score,
                    "retrieval.documents.1.document.id": "d2",
                    "retrieval.documents.1.document.content": "",
                },
            ):
                pass
    value = proto_bytes(t.finished)
    full = by_name(ok(decode(value, Encoding.OTLP_PROTO)).spans)
    lean = by_name(ok(decode(value, Encoding.OTLP_PROTO, for_assembly=True)).spans)
    for name in ("native", "by-apply"):
        assert [(c.content, c.raw) for c in full[name].chunks or ()] == [(doc, None), ("", None)]
        chunks = lean[name].chunks or []
        assert [(c.id, c.content, c.score) for c in chunks] == [
            (c.id, None, c.score) for c in full[name].chunks or ()
        ]
        assert [bytes(c.raw) for c in chunks if c.raw is not None] == [doc.encode(), b""]
        assert [c.text for c in chunks] == [doc, ""]
    record = RagRecord("t", "s", "svc", "q?", "", lean["native"].chunks or [], "a.")
    assert [c["content"] for c in record.to_json_dict()["chunks"]] == [doc, ""]
