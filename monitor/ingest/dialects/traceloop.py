"""OpenLLMetry (Traceloop) spans that name no role: a task holding retrieved documents (LangChain
Documents included), and LlamaIndex's model calls written as tasks or workflows."""

from __future__ import annotations

from typing import Any

from monitor.contracts.model import Chunk, Reject, SpanFacts, SpanRole
from monitor.ingest.dialects.chunks import chunks_from_items
from monitor.ingest.dialects.keys import INPUT_TOKEN_KEYS, OUTPUT_TOKEN_KEYS
from monitor.ingest.dialects.messages import QUERY_KEYS, last_user_message, text_attr
from monitor.ingest.dialects.scalars import loads, model_attr, token_count

_RETRIEVER = SpanRole.RETRIEVER
_OTHER = SpanRole.OTHER


def traceloop_task(facts: SpanFacts, attrs: dict[str, Any], problems: list[Reject]) -> SpanRole:
    """A Traceloop task that names no role: a retriever by its entity's name, or any task whose
    input or output is a list of serialised LangChain Documents (OpenLLMetry 0.40 writes no
    retriever span: the documents show up in the task that formats them)."""
    name = attrs.get("traceloop.entity.name")
    label = name if isinstance(name, str) else facts.name
    chunks = None
    if "retriev" in label.lower() and "traceloop.entity.output" in attrs:
        chunks = traceloop_documents(attrs["traceloop.entity.output"], problems)
        if chunks is not None:
            facts.query = text_attr(attrs, "traceloop.entity.input", QUERY_KEYS, problems)
    if chunks is None:
        for key in ("traceloop.entity.input", "traceloop.entity.output"):
            value = attrs.get(key)
            if isinstance(value, str) and '"Document"' in value:
                chunks = _lc_documents(loads(value))
                if chunks:
                    break
    if not chunks and chunks is None:
        return _OTHER
    facts.chunks = chunks
    return _RETRIEVER


def _lc_documents(doc: Any, depth: int = 0) -> list[Chunk] | None:
    """The first list of serialised LangChain Documents (`{"lc": 1, "type": "constructor", "id":
    [..., "Document"], "kwargs": {...}}`) in a task's input or output."""
    if depth > 3:
        return None
    if isinstance(doc, list) and doc and all(_is_lc_document(x) for x in doc):
        return chunks_from_items(doc, [])
    values = doc.values() if isinstance(doc, dict) else doc if isinstance(doc, list) else ()
    for v in values:
        if isinstance(v, dict | list):
            found = _lc_documents(v, depth + 1)
            if found:
                return found
    return None


def _is_lc_document(item: Any) -> bool:
    if not isinstance(item, dict) or item.get("type") != "constructor":
        return False
    ident = item.get("id")
    return isinstance(ident, list) and bool(ident) and ident[-1] == "Document"


def traceloop_documents(value: Any, problems: list[Reject]) -> list[Chunk] | None:
    """A traceloop retriever task's output, when it is recognisably a list of documents."""
    parsed = loads(value)
    if isinstance(parsed, dict):
        parsed = parsed.get("outputs", parsed.get("documents"))
        if isinstance(parsed, dict):
            parsed = parsed.get("documents", parsed.get("output"))
    if not isinstance(parsed, list) or not all(isinstance(x, dict | str) for x in parsed):
        return None
    scratch: list[Reject] = []
    chunks = chunks_from_items(parsed, scratch)
    problems.extend(scratch)
    return chunks


def llamaindex_llm(facts: SpanFacts, attrs: dict[str, Any], problems: list[Reject]) -> bool:
    """OpenLLMetry's LlamaIndex model call: a task or workflow (its name the model's class) whose
    output is a serialised `CompletionResponse` (`{"text", "raw", …}`) or `ChatResponse`
    (`{"message": {"content"}, "raw", …}`); the model and usage are the provider's `raw` reply."""
    out = attrs.get("traceloop.entity.output")
    if not isinstance(out, str) or '"raw"' not in out:
        return False
    doc = loads(out)
    if not isinstance(doc, dict) or "raw" not in doc or not ("text" in doc or "message" in doc):
        return False
    message = doc.get("message")
    text = message.get("content") if isinstance(message, dict) else doc.get("text")
    facts.answer = text if isinstance(text, str) and text else None
    facts.query = last_user_message(attrs, problems) or text_attr(
        attrs, "traceloop.entity.input", QUERY_KEYS, problems
    )
    raw = doc["raw"] if isinstance(doc["raw"], dict) else {}
    model = raw.get("model")
    facts.model = model if isinstance(model, str) and model else model_attr(attrs, problems)
    usage = raw.get("usage")
    if isinstance(usage, dict):
        facts.input_tokens = token_count(usage, ("prompt_tokens", "input_tokens"), problems)
        facts.output_tokens = token_count(usage, ("completion_tokens", "output_tokens"), problems)
    else:
        facts.input_tokens = token_count(attrs, INPUT_TOKEN_KEYS, problems)
        facts.output_tokens = token_count(attrs, OUTPUT_TOKEN_KEYS, problems)
    return True
