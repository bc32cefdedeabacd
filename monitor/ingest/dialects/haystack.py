"""Haystack's own tracer (`haystack.tracing.OpenTelemetryTracer`, content tracing on): component
spans (retrievers, generators, an agent's model call) and the pipeline's input and output."""

from __future__ import annotations

from typing import Any

from monitor.contracts.model import Reject, SpanFacts, SpanRole
from monitor.ingest.dialects.chunks import chunks_from_items
from monitor.ingest.dialects.scalars import loads, token_count

_RETRIEVER = SpanRole.RETRIEVER
_LLM = SpanRole.LLM
_OTHER = SpanRole.OTHER


def haystack_component(facts: SpanFacts, attrs: dict[str, Any], problems: list[Reject]) -> SpanRole:
    """A `haystack.component.run` span (or an agent's model call): a retriever when its output
    holds `documents` and its input a query; a generation when its output holds `replies` (a
    generator component, or `haystack.agent.step.llm`: the `LLM` component's model call)."""
    out = attrs.get("haystack.agent.step.llm.output", attrs.get("haystack.component.output"))
    doc = loads(out)
    if not isinstance(doc, dict):
        return _OTHER
    replies = doc.get("replies")
    generates = "haystack.agent.step.llm.output" in attrs or "Generator" in str(
        attrs.get("haystack.component.type")
    )
    if isinstance(replies, list) and replies and generates:
        facts.answer = _haystack_reply(replies[-1])
        meta = _haystack_meta(doc, replies[-1])
        model = meta.get("model")
        facts.model = model if isinstance(model, str) and model else None
        usage = meta.get("usage")
        if isinstance(usage, dict):
            facts.input_tokens = token_count(usage, ("prompt_tokens", "input_tokens"), problems)
            facts.output_tokens = token_count(usage, ("completion_tokens", "output_tokens"), problems)
        return _LLM
    docs = doc.get("documents")
    inp = attrs.get("haystack.component.input")
    if isinstance(docs, list) and isinstance(inp, str) and '"query"' in inp:
        query = loads(inp)
        q = query.get("query") if isinstance(query, dict) else None
        facts.query = q if isinstance(q, str) and q else None
        facts.chunks = chunks_from_items(docs, problems)
        return _RETRIEVER
    return _OTHER


def _haystack_reply(reply: Any) -> str | None:
    """A reply: a string (2.x `OpenAIGenerator`), or a serialised `ChatMessage` (`{"role",
    "content": [{"text"}]}`; 2.x's `_content`)."""
    if isinstance(reply, str):
        return reply or None
    if not isinstance(reply, dict):
        return None
    parts = reply.get("content", reply.get("_content"))
    if isinstance(parts, str):
        return parts or None
    if isinstance(parts, list):
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(texts) or None
    return None


def _haystack_meta(doc: dict[str, Any], reply: Any) -> dict[str, Any]:
    """A reply's meta: on the `ChatMessage` (chat generators), or the output's parallel `meta` list."""
    meta = reply.get("meta", reply.get("_meta")) if isinstance(reply, dict) else None
    if not isinstance(meta, dict):
        metas = doc.get("meta")
        meta = metas[-1] if isinstance(metas, list) and metas else None
    return meta if isinstance(meta, dict) else {}


def haystack_pipeline_query(value: Any) -> str | None:
    """`haystack.pipeline.input_data`, `{"<component>": {"<input>": value}}`: the first
    component input named like a query (the user names the components, not the inputs)."""
    doc = loads(value)
    if not isinstance(doc, dict):
        return None
    for inputs in doc.values():
        if isinstance(inputs, dict):
            for k in ("query", "question"):
                q = inputs.get(k)
                if isinstance(q, str) and q:
                    return q
    return None


def haystack_pipeline_answer(value: Any) -> str | None:
    """`haystack.pipeline.output_data`: the last reply of a component that returned `replies`."""
    doc = loads(value)
    if not isinstance(doc, dict):
        return None
    for outputs in doc.values():
        replies = outputs.get("replies") if isinstance(outputs, dict) else None
        if isinstance(replies, list) and replies:
            return _haystack_reply(replies[-1])
    return None
