"""A span's role (root, retriever, reranker, LLM, other): the kind a dialect names, or for a
child span that names none, the attributes it carries."""

from __future__ import annotations

from typing import Any

from monitor.contracts.model import SpanRole
from monitor.ingest.dialects.chunks import has_oi_docs

_ROOT = SpanRole.ROOT
_RETRIEVER = SpanRole.RETRIEVER
_RERANKER = SpanRole.RERANKER
_LLM = SpanRole.LLM
_OTHER = SpanRole.OTHER

# CHAIN/AGENT map to ROOT even when the span has a parent: in a distributed trace the RAG entry
# span often has a remote parent, and nested chains are resolved by the assembler (top-most wins).
_OI_ROLES = {
    "CHAIN": _ROOT,
    "AGENT": _ROOT,
    "RETRIEVER": _RETRIEVER,
    "RERANKER": _RERANKER,
    "LLM": _LLM,
}
_GENAI_ROLES = {
    "retrieval": _RETRIEVER,
    "vector_db_retrieve": _RETRIEVER,  # OpenLLMetry's LangChain retriever spans
    "chat": _LLM,
    "text_completion": _LLM,
    "generate_content": _LLM,
    "invoke_agent": _ROOT,
}
_TRACELOOP_ROLES = {"workflow": _ROOT, "agent": _ROOT}


def explicit_role(attrs: dict[str, Any]) -> SpanRole | None:
    kind = attrs.get("openinference.span.kind")
    if isinstance(kind, str):
        return _OI_ROLES.get(kind.upper(), _OTHER)
    op = attrs.get("gen_ai.operation.name")
    if isinstance(op, str):
        return _GENAI_ROLES.get(op.lower(), _OTHER)
    tl = attrs.get("traceloop.span.kind")
    if isinstance(tl, str):
        role = _TRACELOOP_ROLES.get(tl.lower(), _OTHER)
        # OpenLLMetry's LlamaIndex instrumentation writes a model call as a `task` with GenAI messages
        if role is _OTHER and ("gen_ai.output.messages" in attrs or "gen_ai.completion.0.content" in attrs):
            return _LLM
        return role
    return None


def inferred_role(attrs: dict[str, Any]) -> SpanRole:
    """Role of a child span that names no dialect kind, from the attributes it carries."""
    if has_oi_docs(attrs, "retrieval.documents.") or "gen_ai.retrieval.documents" in attrs:
        return _RETRIEVER
    if has_oi_docs(attrs, "reranker.output_documents."):
        return _RERANKER
    rt = attrs.get("llm.request.type")
    if (
        (isinstance(rt, str) and rt in ("chat", "completion"))
        or "llm.output_messages.0.message.content" in attrs
        or "llm.output_messages.0.message.role" in attrs
        or "gen_ai.output.messages" in attrs
        or "gen_ai.completion.0.content" in attrs
        or "gen_ai.completion" in attrs
    ):
        return _LLM
    return _OTHER
