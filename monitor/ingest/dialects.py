"""Map span attributes of every supported dialect onto `SpanFacts`.

The decoder turns each wire format into one flat `dict[str, Any]` of attribute values (str, int,
float, bool, bytes, list, dict) and hands it here, so the dialect rules exist once whatever the
encoding. Lookups are by exact key, including indexed families (``retrieval.documents.{i}...``),
which are probed through precomputed key strings and only when the span's kind or its index-0 key
says they are there: no scan over all keys, so the per-span cost stays a few dict lookups.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from typing import Any

from monitor.contracts.model import Chunk, Reject, SpanFacts, SpanRole

# Span events whose attributes are folded into the span's attributes (setdefault): GenAI semconv
# before 1.37 put prompt and completion on events, 1.37+ may put the messages on an event too.
MERGED_EVENTS = frozenset(
    {
        "gen_ai.content.prompt",
        "gen_ai.content.completion",
        "gen_ai.client.inference.operation.details",
    }
)


# An LLM span's generator tokens, in order of precedence: GenAI semconv (1.37+, then the older
# names Traceloop still writes), then OpenInference's. The first key present decides.
INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
OUTPUT_TOKEN_KEYS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
)
# More tokens than any model's context window takes in one call: a hostile or broken value.
MAX_TOKENS = 10_000_000

# The conversation and the end user, first key present: OpenInference and the GenAI semantic
# conventions (`gen_ai.conversation.id`, semconv 1.37; `user.id`, the general `user` namespace;
# `enduser.id`, its deprecated form), then Traceloop's association properties.
SESSION_KEYS = ("session.id", "gen_ai.conversation.id", "traceloop.association.properties.session_id")
USER_KEYS = ("user.id", "enduser.id", "traceloop.association.properties.user_id")
# Longer ids are cut: they ride on every sample and results line.
MAX_ID_CHARS = 256

# Attribute key prefixes of GenAI instrumentations this decoder does not read (the Vercel AI SDK,
# MLflow, Langfuse, LangSmith, Google's ADK, W&B Weave, Prompt flow). A span carrying them and
# nothing readable is `unread`: its trace, if it makes no request, is `unreadable`, not `not_rag`.
UNKNOWN_PREFIXES = ("ai.", "mlflow.", "langfuse.", "langsmith.", "gcp.vertex.agent.", "weave.", "promptflow.")
MAX_UNREAD_KEYS = 16

# Every attribute key `apply` and `wants_events` may read: exact keys, and the indexed families by
# prefix. The compiled decoder (`_wire.c`) materialises only these, so a span with none of them
# (HTTP, database, cache, framework spans) costs no attribute objects, and `apply` sees the same
# answers to every lookup it makes. Reading a new key here means adding it below
# (tests/ingest/test_decode_compiled.py checks this with a dict that records every lookup).
ATTRIBUTE_KEYS = frozenset(
    {
        "openinference.span.kind",
        "gen_ai.operation.name",
        "traceloop.span.kind",
        "input.value",
        "input.mime_type",
        "output.value",
        "output.mime_type",
        "metadata",
        "rag.query_type",
        "rag.replay",
        "llm.model_name",
        "llm.request.type",
        "llm.request.model",
        "llm.response.model",
        "gen_ai.system",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.retrieval.query.text",
        "gen_ai.retrieval.documents",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.prompt",
        "gen_ai.completion",
        "traceloop.entity.input",
        "traceloop.entity.output",
        "traceloop.entity.name",
        "traceloop.mime_type",
        "reranker.query",
        "reranker.model_name",
        "reranker.mime_type",
        # Haystack's own tracer (`haystack.tracing.OpenTelemetryTracer`, content tracing on)
        "haystack.component.type",
        "haystack.component.input",
        "haystack.component.output",
        "haystack.pipeline.input_data",
        "haystack.pipeline.output_data",
        "haystack.agent.step.llm.output",
        *SESSION_KEYS,
        *USER_KEYS,
        *INPUT_TOKEN_KEYS,
        *OUTPUT_TOKEN_KEYS,
    }
)
INDEXED_PREFIXES = (
    "retrieval.documents.",
    "reranker.output_documents.",
    "llm.input_messages.",
    "llm.output_messages.",
    "gen_ai.prompt.",
    "gen_ai.completion.",
    *UNKNOWN_PREFIXES,
)


def wants_events(attrs: dict[str, Any]) -> bool:
    """Only GenAI-semconv spans keep content on events: skip reading events for everything else."""
    return (
        "gen_ai.operation.name" in attrs
        or "gen_ai.system" in attrs
        or "gen_ai.provider.name" in attrs
        or "gen_ai.request.model" in attrs
    )


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

# The keys a framework's JSON input or output holds the query or the answer under, most specific
# first: LlamaIndex (`str_or_query_bundle`, `query_bundle.query_str`, a chat engine's `message`),
# LangChain/OpenLLMetry (`inputs`/`outputs`), DSPy (`question`/`answer`), Haystack (`replies`).
_QUERY_KEYS = ("query", "question", "input", "text", "query_str", "str_or_query_bundle", "message")
_ANSWER_KEYS = ("answer", "output", "text", "result", "content", "response")
# Containers that frameworks wrap the interesting value in ({"inputs": {...}}, {"args": [...]}); a
# container holding a string directly ({"outputs": "…"}) holds the value itself.
_WRAPPERS = (
    "inputs",
    "outputs",
    "kwargs",
    "args",
    "data",
    "response",
    "choices",
    "message",
    "query_bundle",
    "replies",
    "last_message",
)

_ID_KEYS = ("id", "doc_id", "document_id", "chunk_id", "id_", "node_id")
_CONTENT_KEYS = ("content", "page_content", "text")
# What frameworks write where a value could not be serialised: `<generator object …>`,
# `<NodeWithScore(…)>`, a Python repr such as `ChatMessage(_role=…)` or `Document(id=…, …)`. Never a
# query or an answer: the reading falls back to the retriever's query or the generation's output.
_PLACEHOLDER = re.compile(r"<[^<>]*(?:object|\(|\bat 0x)[^<>]*>|[A-Za-z_][\w.]*\((?:_?[a-z_]\w*=)", re.ASCII)


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})

_MAX_DEPTH = 6


def apply(facts: SpanFacts, attrs: dict[str, Any]) -> None:
    """Fill role, query, answer, chunks, model, query_type and replay of `facts` from `attrs`, and an
    LLM span's tokens.

    Fields a span has in an unusable shape are dropped and noted in `facts.problems`. The compiled
    decoder (`_wire.c`, `map_span`) follows these steps itself for spans with an explicit
    OpenInference kind and plain values, and calls this for anything else: a change here needs
    the same change there (tests/ingest/test_decode_compiled_fuzz.py fuzzes both against each other).
    """
    problems = facts.problems
    role = _explicit_role(attrs)
    if role is None:
        role = _ROOT if not facts.parent_span_id else _inferred_role(attrs)

    if role is not _LLM and "traceloop.span.kind" in attrs and _llamaindex_llm(facts, attrs, problems):
        role = _LLM
    elif role is _ROOT:
        facts.query = _root_query(attrs, problems)
        facts.answer = _root_answer(attrs, problems)
        facts.model = _model(attrs, problems)
        if _has_oi_docs(attrs, "retrieval.documents.") or "gen_ai.retrieval.documents" in attrs:
            facts.chunks = _retrieved(attrs, problems)
    elif role is _RETRIEVER:
        facts.query = _retriever_query(attrs, problems)
        facts.chunks = _retrieved(attrs, problems)
        if facts.chunks is None and "traceloop.entity.output" in attrs:
            facts.chunks = _traceloop_documents(attrs["traceloop.entity.output"], problems)
    elif role is _RERANKER:
        q = _text_attr(attrs, "reranker.query", _QUERY_KEYS, problems)
        facts.query = q if q is not None else _text_attr(attrs, "input.value", _QUERY_KEYS, problems)
        facts.chunks = _oi_documents(attrs, "reranker.output_documents.", problems)
        facts.model = _str_attr(attrs, "reranker.model_name", problems)
    elif role is _LLM:
        a = _llm_answer(attrs, problems)
        facts.answer = a if a is not None else _text_attr(attrs, "output.value", _ANSWER_KEYS, problems)
        facts.query = _last_user_message(attrs, problems)
        facts.model = _model(attrs, problems)
        facts.input_tokens = _tokens(attrs, INPUT_TOKEN_KEYS, problems)
        facts.output_tokens = _tokens(attrs, OUTPUT_TOKEN_KEYS, problems)
    elif "haystack.component.type" in attrs or "haystack.agent.step.llm.output" in attrs:
        role = _haystack_component(facts, attrs, problems)
    elif "traceloop.entity.output" in attrs or "traceloop.entity.input" in attrs:
        role = _traceloop_task(facts, attrs, problems)
    facts.role = role

    qt = attrs.get("rag.query_type")
    if qt is None and "metadata" in attrs:
        qt = _metadata_query_type(attrs["metadata"])
    if qt is not None:
        facts.query_type = _scalar_text(qt, problems)
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


# --- role ---------------------------------------------------------------------------------------


def _explicit_role(attrs: dict[str, Any]) -> SpanRole | None:
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


def _inferred_role(attrs: dict[str, Any]) -> SpanRole:
    """Role of a child span that names no dialect kind, from the attributes it carries."""
    if _has_oi_docs(attrs, "retrieval.documents.") or "gen_ai.retrieval.documents" in attrs:
        return _RETRIEVER
    if _has_oi_docs(attrs, "reranker.output_documents."):
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


def _has_oi_docs(attrs: dict[str, Any], prefix: str) -> bool:
    return (
        prefix + "0.document.id" in attrs
        or prefix + "0.document.content" in attrs
        or prefix + "0.document.score" in attrs
    )


# --- query / answer -----------------------------------------------------------------------------


def _root_query(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    """The request's query; None when the root holds only a wrapper, a placeholder or an empty
    string, so that assembly takes the retriever's query instead."""
    q = _text_attr(attrs, "input.value", _QUERY_KEYS, problems)
    if not q:
        q = _text_attr(attrs, "traceloop.entity.input", _QUERY_KEYS, problems)
    if not q and "traceloop.entity.output" in attrs:
        # LangChain under OpenLLMetry, streamed: the input is `{"input": ""}`, the query is echoed
        # in the output's `kwargs.inputs`
        q = _echoed_input(attrs["traceloop.entity.output"])
    if not q and "haystack.pipeline.input_data" in attrs:
        q = _haystack_pipeline_query(attrs["haystack.pipeline.input_data"])
    if not q:
        q = _str_attr(attrs, "gen_ai.retrieval.query.text", problems)
    if not q:
        q = _last_user_message(attrs, problems)
    return q or None


def _root_answer(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    """The request's answer; None for a wrapper, a placeholder (a stream's generator) or an empty
    string, so that assembly takes the last generation's output instead."""
    a = _text_attr(attrs, "output.value", _ANSWER_KEYS, problems)
    if not a:
        a = _text_attr(attrs, "traceloop.entity.output", _ANSWER_KEYS, problems)
    if not a and "haystack.pipeline.output_data" in attrs:
        a = _haystack_pipeline_answer(attrs["haystack.pipeline.output_data"])
    if not a:
        a = _llm_answer(attrs, problems)
    return a or None


def _retriever_query(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    q = _str_attr(attrs, "gen_ai.retrieval.query.text", problems)
    if q is None:
        q = _text_attr(attrs, "input.value", _QUERY_KEYS, problems)
    if q is None:
        q = _text_attr(attrs, "traceloop.entity.input", _QUERY_KEYS, problems)
    return q


def _llm_answer(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    return _messages_text(attrs, problems, "output", _ASSISTANT)


def _last_user_message(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    """The query as the model saw it: only a fallback, since prompts often embed the context."""
    return _messages_text(attrs, problems, "input", _USER)


_USER = frozenset({"user", "human"})
_ASSISTANT = frozenset({"assistant", "ai", "model", "bot"})

# Where each dialect keeps a model call's messages, by direction: OpenInference indexed messages,
# GenAI JSON message lists (current and pre-1.37 names), legacy GenAI indexed prompt/completion.
_MESSAGE_KEYS = {
    "input": ("llm.input_messages.", ("gen_ai.input.messages", "gen_ai.prompt"), "gen_ai.prompt."),
    "output": ("llm.output_messages.", ("gen_ai.output.messages", "gen_ai.completion"), "gen_ai.completion."),
}


def _messages_text(
    attrs: dict[str, Any], problems: list[Reject], direction: str, roles: frozenset[str]
) -> str | None:
    """The last message of the given roles, from whichever dialect the span used."""
    oi_prefix, json_keys, legacy_prefix = _MESSAGE_KEYS[direction]
    if f"{oi_prefix}0.message.content" in attrs or f"{oi_prefix}0.message.role" in attrs:
        text = _last_message(_oi_messages(attrs, oi_prefix, problems), roles)
        if text is not None:
            return text
    for key in json_keys:
        if key in attrs:
            text = _last_message(_json_messages(attrs[key], problems), roles)
            if text is not None:
                return text
    if f"{legacy_prefix}0.content" in attrs:
        return _last_message(
            _indexed_messages(attrs, legacy_prefix, _LEGACY_MESSAGE_SUFFIXES, problems), roles
        )
    return None


def _last_message(messages: list[tuple[str | None, str]], roles: frozenset[str]) -> str | None:
    """Content of the last message in `roles`; messages without a role count as matching."""
    for role, content in reversed(messages):
        if role is None or role.lower() in roles:
            return content
    return None


def _oi_messages(attrs: dict[str, Any], prefix: str, problems: list[Reject]) -> list[tuple[str | None, str]]:
    """OpenInference ``{prefix}{i}.message.role|content`` (or ``.contents.{j}.message_content.text``)."""
    return _indexed_messages(attrs, prefix, _OI_MESSAGE_SUFFIXES, problems, multimodal=True)


def _indexed_messages(
    attrs: dict[str, Any],
    prefix: str,
    suffixes: tuple[str, str],
    problems: list[Reject],
    *,
    multimodal: bool = False,
) -> list[tuple[str | None, str]]:
    """Messages stored one attribute per field, ``{prefix}{i}{suffix}``, indices contiguous from 0."""
    out: list[tuple[str | None, str]] = []
    get = attrs.get
    for role_key, content_key in _key_rows(prefix, suffixes, len(attrs)):
        content = get(content_key)
        role = get(role_key)
        if content is None:
            if role is None:
                break
            if multimodal:
                content = _oi_content_parts(attrs, content_key)
        text = (
            content
            if type(content) is str
            else _scalar_text(content, problems)
            if content is not None
            else None
        )
        if text is not None:
            out.append((role if isinstance(role, str) else None, text))
    return out


def _oi_content_parts(attrs: dict[str, Any], content_key: str) -> str | None:
    """Multimodal OpenInference messages: ``message.contents.{j}.message_content.text``."""
    base = content_key + "s."
    texts = []
    j = 0
    while True:
        t = attrs.get(f"{base}{j}.message_content.text")
        if t is None:
            if f"{base}{j}.message_content.type" not in attrs:
                break
        elif isinstance(t, str):
            texts.append(t)
        j += 1
    return "\n".join(texts) if texts else None


_OI_MESSAGE_SUFFIXES = (".message.role", ".message.content")
_LEGACY_MESSAGE_SUFFIXES = (".role", ".content")
_OI_DOC_SUFFIXES = (".document.id", ".document.content", ".document.score", ".document.metadata")
_KEY_ROWS: dict[str, list[tuple[str, ...]]] = {}
_MAX_INDEX = 4096


def _key_rows(prefix: str, suffixes: tuple[str, ...], n: int) -> list[tuple[str, ...]]:
    """Rows ``(prefix + i + suffix for suffix)`` for i = 0..n at least, built once per prefix.

    Probing then costs dict lookups only. `n` is the span's attribute count: contiguous indices
    cannot go past it, so the caller's loop always meets an empty row and stops.
    """
    rows = _KEY_ROWS.get(prefix)
    if rows is None:
        rows = _KEY_ROWS[prefix] = []
    if len(rows) <= n and len(rows) < _MAX_INDEX:
        rows.extend(
            tuple(f"{prefix}{i}{sfx}" for sfx in suffixes)
            for i in range(len(rows), min(max(n + 1, 2 * len(rows), 16), _MAX_INDEX))
        )
    return rows


def _json_messages(value: Any, problems: list[Reject]) -> list[tuple[str | None, str]]:
    """GenAI messages: ``[{"role", "parts": [{"type": "text", "content"}]}]`` or ``{"role", "content"}``.

    Accepts the JSON string form (span attribute) and the structured form (event attribute).
    """
    msgs = _loads(value)
    if isinstance(msgs, dict):
        msgs = [msgs]
    if not isinstance(msgs, list):
        problems.append(Reject.BAD_ATTRIBUTE)
        return []
    out: list[tuple[str | None, str]] = []
    for m in msgs:
        if isinstance(m, str):
            out.append((None, m))
            continue
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        text = _message_text(m)
        if text is not None:
            out.append((role if isinstance(role, str) else None, text))
    return out


def _message_text(m: dict[str, Any]) -> str | None:
    parts = m.get("parts")
    if isinstance(parts, list):
        texts = [
            p["content"]
            for p in parts
            if isinstance(p, dict) and p.get("type", "text") == "text" and isinstance(p.get("content"), str)
        ]
        if texts:
            return "\n".join(texts)
    content = m.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI-style content parts
        texts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if texts:
            return "\n".join(texts)
    msg = m.get("message")  # gen_ai.choice-like wrapper
    if isinstance(msg, dict):
        return _message_text(msg)
    return None


def _text_attr(attrs: dict[str, Any], key: str, keys: tuple[str, ...], problems: list[Reject]) -> str | None:
    """A free-text attribute that may hold a JSON document wrapping the text we want. A JSON
    document with no text under `keys` (a framework's argument dump, a stream's generator) gives
    None, never the JSON itself: a judge fed `{"outputs": …, "kwargs": …}` as the answer would
    score it like any other."""
    value = attrs.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        head = value.lstrip()[:1]
        if head in ("{", "[", '"') and attrs.get(key.partition(".")[0] + ".mime_type") != "text/plain":
            parsed = _loads(value)
            if parsed is not _NOT_JSON:
                return dig_text(parsed, keys)
        return value
    return _scalar_text(value, problems)


def dig_text(obj: Any, keys: tuple[str, ...], depth: int = 0) -> str | None:
    """First string under one of `keys`, looking through common framework wrappers (a wrapper
    holding a string holds the text itself); placeholders (`<generator object …>`, a Python
    repr) are skipped."""
    if isinstance(obj, str):
        return None if _PLACEHOLDER.match(obj) else obj
    if depth > _MAX_DEPTH:
        return None
    if isinstance(obj, dict):
        for k in keys:
            v = obj.get(k)
            if isinstance(v, str) and not _PLACEHOLDER.match(v):
                return v
        for k in (*keys, *_WRAPPERS):
            v = obj.get(k)
            if isinstance(v, list) and k != "args" and all(isinstance(item, str) for item in v):
                continue  # `{"inputs": [texts]}`: a batch; only positional `args` hold a query
            if isinstance(v, dict | list) or (isinstance(v, str) and k in _WRAPPERS):
                found = dig_text(v, keys, depth + 1)
                if found is not None:
                    return found
        return None
    if isinstance(obj, list):
        # A list of texts is a batch (an index build's documents, an embedding call's inputs), not
        # one request's query or answer; one text inside a wrapper is (`{"args": ["<query>"]}`).
        if not depth or (len(obj) > 1 and all(isinstance(item, str) for item in obj)):
            return None
        for item in obj[:8]:
            found = dig_text(item, keys, depth + 1)
            if found is not None:
                return found
    return None


def _echoed_input(value: Any) -> str | None:
    """`{"outputs": …, "kwargs": {"inputs": "<query>"}}`: the input a LangChain run echoes."""
    doc = _loads(value)
    kwargs = doc.get("kwargs") if isinstance(doc, dict) else None
    inputs = kwargs.get("inputs") if isinstance(kwargs, dict) else None
    return dig_text(inputs, _QUERY_KEYS) if isinstance(inputs, str | dict) else None


# --- chunks -------------------------------------------------------------------------------------


def _retrieved(attrs: dict[str, Any], problems: list[Reject]) -> list[Chunk] | None:
    if _has_oi_docs(attrs, "retrieval.documents."):
        return _oi_documents(attrs, "retrieval.documents.", problems)
    docs = attrs.get("gen_ai.retrieval.documents")
    if docs is not None:
        parsed = _loads(docs)
        if isinstance(parsed, list):
            return chunks_from_items(parsed, problems)
        problems.append(Reject.BAD_ATTRIBUTE)
    return None


def _oi_documents(attrs: dict[str, Any], prefix: str, problems: list[Reject]) -> list[Chunk] | None:
    """``{prefix}{i}.document.id|content|score|metadata``, in index (= rank) order from 0."""
    out: list[Chunk] = []
    get = attrs.get
    for id_key, content_key, score_key, meta_key in _key_rows(prefix, _OI_DOC_SUFFIXES, len(attrs)):
        raw_id = get(id_key)
        content = get(content_key)
        score = get(score_key)
        if raw_id is None and content is None and score is None:
            if meta_key not in attrs:
                break
            continue
        if (
            type(raw_id) is str
            and raw_id
            and type(content) is str
            and type(score) is float
            and math.isfinite(score)
        ):  # the well-formed case, without a call
            out.append(Chunk(raw_id, content, score))
            continue
        if raw_id is None and meta_key in attrs:
            raw_id = _metadata_id(attrs[meta_key])
        chunk = make_chunk(raw_id, content, score, problems)
        if chunk is not None:
            out.append(chunk)
    return out if out or _has_oi_docs(attrs, prefix) else None


def chunks_from_items(items: Iterable[Any], problems: list[Reject]) -> list[Chunk]:
    """Chunks from a JSON list of ``{"id", "content", "score"}`` objects (or bare strings)."""
    out: list[Chunk] = []
    for item in items:
        if isinstance(item, str) and item[:1] == "{":  # a serialised node (OpenLLMetry's LlamaIndex)
            parsed = _loads(item)
            item = parsed if isinstance(parsed, dict) else item
        if isinstance(item, str):
            chunk = make_chunk(None, item, None, problems)
        elif isinstance(item, dict):
            score = item.get("score")
            if isinstance(item.get("node"), dict):  # LlamaIndex NodeWithScore: {"node": {...}, "score"}
                item = item["node"]
            if "kwargs" in item and isinstance(item["kwargs"], dict):  # LangChain serialised Document
                item = item["kwargs"]
            raw_id = _first(item, _ID_KEYS)
            if raw_id is None and "metadata" in item:
                raw_id = _metadata_id(item["metadata"])
            chunk = make_chunk(raw_id, _first(item, _CONTENT_KEYS), score, problems)
        else:
            problems.append(Reject.BAD_ATTRIBUTE)
            continue
        if chunk is not None:
            out.append(chunk)
    return out


def make_chunk(raw_id: Any, content: Any, score: Any, problems: list[Reject]) -> Chunk | None:
    """One chunk; a chunk without a usable id gets a stable id derived from its content."""
    if (
        type(raw_id) is str
        and raw_id
        and (content is None or type(content) is str)
        and (score is None or (type(score) is float and math.isfinite(score)))
    ):
        return Chunk(raw_id, content, score)
    cid: str | None = None
    if raw_id is not None:
        if isinstance(raw_id, str):
            cid = raw_id
        elif isinstance(raw_id, int | float) and not isinstance(raw_id, bool):
            cid = str(raw_id)
        else:
            problems.append(Reject.BAD_ATTRIBUTE)
    text = _scalar_text(content, problems) if content is not None else None
    sc = parse_score(score, problems) if score is not None else None
    if not cid:
        if text is None:
            return None
        cid = content_id(text)
    return Chunk(cid, text, sc)


def content_id(text: str) -> str:
    """Stable id for an id-less chunk, so the same passage keeps one id across requests."""
    return "c-" + hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def parse_score(value: Any, problems: list[Reject]) -> float | None:
    if isinstance(value, bool):
        problems.append(Reject.BAD_ATTRIBUTE)
        return None
    if isinstance(value, int | float):
        f = float(value)
    elif isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            problems.append(Reject.BAD_ATTRIBUTE)
            return None
    else:
        problems.append(Reject.BAD_ATTRIBUTE)
        return None
    if not math.isfinite(f):
        problems.append(Reject.BAD_ATTRIBUTE)
        return None
    return f


def _traceloop_task(facts: SpanFacts, attrs: dict[str, Any], problems: list[Reject]) -> SpanRole:
    """A Traceloop task that names no role: a retriever by its entity's name, or any task whose
    input or output is a list of serialised LangChain Documents (OpenLLMetry 0.40 writes no
    retriever span: the documents show up in the task that formats them)."""
    name = attrs.get("traceloop.entity.name")
    label = name if isinstance(name, str) else facts.name
    chunks = None
    if "retriev" in label.lower() and "traceloop.entity.output" in attrs:
        chunks = _traceloop_documents(attrs["traceloop.entity.output"], problems)
        if chunks is not None:
            facts.query = _text_attr(attrs, "traceloop.entity.input", _QUERY_KEYS, problems)
    if chunks is None:
        for key in ("traceloop.entity.input", "traceloop.entity.output"):
            value = attrs.get(key)
            if isinstance(value, str) and '"Document"' in value:
                chunks = _lc_documents(_loads(value))
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


def _traceloop_documents(value: Any, problems: list[Reject]) -> list[Chunk] | None:
    """A traceloop retriever task's output, when it is recognisably a list of documents."""
    parsed = _loads(value)
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


def _llamaindex_llm(facts: SpanFacts, attrs: dict[str, Any], problems: list[Reject]) -> bool:
    """OpenLLMetry's LlamaIndex model call: a task or workflow (its name the model's class) whose
    output is a serialised `CompletionResponse` (`{"text", "raw", …}`) or `ChatResponse`
    (`{"message": {"content"}, "raw", …}`); the model and usage are the provider's `raw` reply."""
    out = attrs.get("traceloop.entity.output")
    if not isinstance(out, str) or '"raw"' not in out:
        return False
    doc = _loads(out)
    if not isinstance(doc, dict) or "raw" not in doc or not ("text" in doc or "message" in doc):
        return False
    message = doc.get("message")
    text = message.get("content") if isinstance(message, dict) else doc.get("text")
    facts.answer = text if isinstance(text, str) and text else None
    facts.query = _last_user_message(attrs, problems) or _text_attr(
        attrs, "traceloop.entity.input", _QUERY_KEYS, problems
    )
    raw = doc["raw"] if isinstance(doc["raw"], dict) else {}
    model = raw.get("model")
    facts.model = model if isinstance(model, str) and model else _model(attrs, problems)
    usage = raw.get("usage")
    if isinstance(usage, dict):
        facts.input_tokens = _tokens(usage, ("prompt_tokens", "input_tokens"), problems)
        facts.output_tokens = _tokens(usage, ("completion_tokens", "output_tokens"), problems)
    else:
        facts.input_tokens = _tokens(attrs, INPUT_TOKEN_KEYS, problems)
        facts.output_tokens = _tokens(attrs, OUTPUT_TOKEN_KEYS, problems)
    return True


# --- Haystack's own tracer ----------------------------------------------------------------------


def _haystack_component(facts: SpanFacts, attrs: dict[str, Any], problems: list[Reject]) -> SpanRole:
    """A `haystack.component.run` span (or an agent's model call): a retriever when its output
    holds `documents` and its input a query; a generation when its output holds `replies` (a
    generator component, or `haystack.agent.step.llm`: the `LLM` component's model call)."""
    out = attrs.get("haystack.agent.step.llm.output", attrs.get("haystack.component.output"))
    doc = _loads(out)
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
            facts.input_tokens = _tokens(usage, ("prompt_tokens", "input_tokens"), problems)
            facts.output_tokens = _tokens(usage, ("completion_tokens", "output_tokens"), problems)
        return _LLM
    docs = doc.get("documents")
    inp = attrs.get("haystack.component.input")
    if isinstance(docs, list) and isinstance(inp, str) and '"query"' in inp:
        query = _loads(inp)
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


def _haystack_pipeline_query(value: Any) -> str | None:
    """`haystack.pipeline.input_data`, `{"<component>": {"<input>": value}}`: the first
    component input named like a query (the user names the components, not the inputs)."""
    doc = _loads(value)
    if not isinstance(doc, dict):
        return None
    for inputs in doc.values():
        if isinstance(inputs, dict):
            for k in ("query", "question"):
                q = inputs.get(k)
                if isinstance(q, str) and q:
                    return q
    return None


def _haystack_pipeline_answer(value: Any) -> str | None:
    """`haystack.pipeline.output_data`: the last reply of a component that returned `replies`."""
    doc = _loads(value)
    if not isinstance(doc, dict):
        return None
    for outputs in doc.values():
        replies = outputs.get("replies") if isinstance(outputs, dict) else None
        if isinstance(replies, list) and replies:
            return _haystack_reply(replies[-1])
    return None


# --- scalars ------------------------------------------------------------------------------------


def _str_attr(attrs: dict[str, Any], key: str, problems: list[Reject]) -> str | None:
    value = attrs.get(key)
    if value is None:
        return None
    return _scalar_text(value, problems)


def _scalar_text(value: Any, problems: list[Reject]) -> str | None:
    """Text fields accept numbers (converted); containers, bools and bytes are unusable."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    problems.append(Reject.BAD_ATTRIBUTE)
    return None


def _model(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    for key in (
        "llm.model_name",
        "gen_ai.response.model",
        "gen_ai.request.model",
        "llm.response.model",
        "llm.request.model",
    ):
        if key in attrs:
            m = _scalar_text(attrs[key], problems)
            if m:
                return m
    return None


def _tokens(attrs: dict[str, Any], keys: tuple[str, ...], problems: list[Reject]) -> int | None:
    """The first of `keys` present: an int within [0, MAX_TOKENS] (an integral float too, as JSON
    writers may give); anything else (negative, huge, text, bool) is dropped as bad_attribute."""
    for key in keys:
        if key in attrs:
            v = attrs[key]
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_TOKENS:
                return v
            problems.append(Reject.BAD_ATTRIBUTE)
            return None
    return None


def parse_bool(value: Any, problems: list[Reject]) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value == 1
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    problems.append(Reject.BAD_ATTRIBUTE)
    return False


def _first(d: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        v = d.get(k)
        if v is not None:
            return v
    return None


def _metadata_id(metadata: Any) -> Any:
    md = _loads(metadata)
    return _first(md, _ID_KEYS) if isinstance(md, dict) else None


def _metadata_query_type(metadata: Any) -> Any:
    md = _loads(metadata)
    if isinstance(md, dict):
        return md.get("rag.query_type", md.get("query_type"))
    return None


_NOT_JSON: Any = object()


def _loads(text: Any) -> Any:
    """json.loads that never raises (RecursionError included); `_NOT_JSON` when unparsable. A
    value that is not a string (an OTLP kvlist or array, an event's structured attribute) is
    taken as already parsed."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON
