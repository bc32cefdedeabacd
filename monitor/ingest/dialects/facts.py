"""`apply`: one span's attributes onto its `SpanFacts`, whichever dialect wrote them."""

from __future__ import annotations

from typing import Any

from monitor.contracts.model import SpanFacts, SpanRole
from monitor.ingest.dialects.chunks import has_oi_docs, oi_documents, retrieved
from monitor.ingest.dialects.haystack import haystack_component
from monitor.ingest.dialects.keys import (
    INPUT_TOKEN_KEYS,
    MAX_ID_CHARS,
    MAX_UNREAD_KEYS,
    OUTPUT_TOKEN_KEYS,
    SESSION_KEYS,
    UNKNOWN_PREFIXES,
    USER_KEYS,
)
from monitor.ingest.dialects.messages import (
    ANSWER_KEYS,
    QUERY_KEYS,
    last_user_message,
    llm_answer,
    retriever_query,
    root_answer,
    root_query,
    text_attr,
)
from monitor.ingest.dialects.roles import explicit_role, inferred_role
from monitor.ingest.dialects.scalars import loads, model_attr, parse_bool, scalar_text, str_attr, token_count
from monitor.ingest.dialects.traceloop import llamaindex_llm, traceloop_documents, traceloop_task

_ROOT = SpanRole.ROOT
_RETRIEVER = SpanRole.RETRIEVER
_RERANKER = SpanRole.RERANKER
_LLM = SpanRole.LLM
_OTHER = SpanRole.OTHER


def apply(facts: SpanFacts, attrs: dict[str, Any]) -> None:
    """Fill role, query, answer, chunks, model, query_type and replay of `facts` from `attrs`, and an
    LLM span's tokens.

    Fields a span has in an unusable shape are dropped and noted in `facts.problems`. The compiled
    decoder (`_wire.c`, `map_span`) follows these steps itself for spans with an explicit
    OpenInference kind and plain values, and calls this for anything else: a change here needs
    the same change there (tests/ingest/test_decode_compiled_fuzz.py fuzzes both against each other).
    """
    problems = facts.problems
    role = explicit_role(attrs)
    if role is None:
        role = _ROOT if not facts.parent_span_id else inferred_role(attrs)

    if role is not _LLM and "traceloop.span.kind" in attrs and llamaindex_llm(facts, attrs, problems):
        role = _LLM
    elif role is _ROOT:
        facts.query = root_query(attrs, problems)
        facts.answer = root_answer(attrs, problems)
        facts.model = model_attr(attrs, problems)
        if has_oi_docs(attrs, "retrieval.documents.") or "gen_ai.retrieval.documents" in attrs:
            facts.chunks = retrieved(attrs, problems)
    elif role is _RETRIEVER:
        facts.query = retriever_query(attrs, problems)
        facts.chunks = retrieved(attrs, problems)
        if facts.chunks is None and "traceloop.entity.output" in attrs:
            facts.chunks = traceloop_documents(attrs["traceloop.entity.output"], problems)
    elif role is _RERANKER:
        q = text_attr(attrs, "reranker.query", QUERY_KEYS, problems)
        facts.query = q if q is not None else text_attr(attrs, "input.value", QUERY_KEYS, problems)
        facts.chunks = oi_documents(attrs, "reranker.output_documents.", problems)
        facts.model = str_attr(attrs, "reranker.model_name", problems)
    elif role is _LLM:
        a = llm_answer(attrs, problems)
        facts.answer = a if a is not None else text_attr(attrs, "output.value", ANSWER_KEYS, problems)
        facts.query = last_user_message(attrs, problems)
        facts.model = model_attr(attrs, problems)
        facts.input_tokens = token_count(attrs, INPUT_TOKEN_KEYS, problems)
        facts.output_tokens = token_count(attrs, OUTPUT_TOKEN_KEYS, problems)
    elif "haystack.component.type" in attrs or "haystack.agent.step.llm.output" in attrs:
        role = haystack_component(facts, attrs, problems)
    elif "traceloop.entity.output" in attrs or "traceloop.entity.input" in attrs:
        role = traceloop_task(facts, attrs, problems)
    facts.role = role

    qt = attrs.get("rag.query_type")
    if qt is None and "metadata" in attrs:
        qt = _metadata_query_type(attrs["metadata"])
    if qt is not None:
        facts.query_type = scalar_text(qt, problems)
    rp = attrs.get("rag.replay")
    if rp is not None:
        facts.replay = parse_bool(rp, problems)
    facts.session_id = _first_id(attrs, SESSION_KEYS)
    facts.user_id = _first_id(attrs, USER_KEYS)
    if not (facts.query or facts.answer or facts.chunks):
        unread = sorted(k for k in attrs if k.startswith(UNKNOWN_PREFIXES))
        if unread:
            facts.unread = tuple(unread[:MAX_UNREAD_KEYS])


def _first_id(attrs: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """The first of `keys` holding a non-empty string or an integer, cut at MAX_ID_CHARS."""
    for key in keys:
        v = attrs.get(key)
        if isinstance(v, str) and v:
            return v[:MAX_ID_CHARS]
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
    return None


def is_inert(facts: SpanFacts) -> bool:
    """`apply` found nothing a record can use: role OTHER, and no query, answer, chunks, query type
    or replay. The HTTP, database and cache spans around a RAG request; assembly only counts them."""
    return facts.role is _OTHER and not (
        facts.query
        or facts.answer
        or facts.chunks
        or facts.query_type
        or facts.replay
        or facts.unread
        or facts.session_id
        or facts.user_id
    )


def _metadata_query_type(metadata: Any) -> Any:
    md = loads(metadata)
    if isinstance(md, dict):
        return md.get("rag.query_type", md.get("query_type"))
    return None
