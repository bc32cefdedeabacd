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
from collections.abc import Iterable
from typing import Any

from monitor.model import Chunk, Reject, SpanFacts, SpanRole

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
    "chat": _LLM,
    "text_completion": _LLM,
    "generate_content": _LLM,
    "invoke_agent": _ROOT,
}
_TRACELOOP_ROLES = {"workflow": _ROOT, "agent": _ROOT}

_QUERY_KEYS = ("query", "question", "input", "text")
_ANSWER_KEYS = ("answer", "output", "text", "result", "content")
# Containers that frameworks wrap the interesting value in ({"inputs": {...}}, {"args": [...]}).
_WRAPPERS = ("inputs", "outputs", "kwargs", "args", "data", "response", "choices", "message")

_ID_KEYS = ("id", "doc_id", "document_id", "chunk_id")
_CONTENT_KEYS = ("content", "page_content", "text")


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

    if role is _ROOT:
        facts.query = _root_query(attrs, problems)
        facts.answer = _root_answer(attrs, problems)
        facts.model = _model(attrs, problems)
        if _has_oi_docs(attrs, "retrieval.documents.") or "gen_ai.retrieval.documents" in attrs:
            facts.chunks = _retrieved(attrs, problems)
    elif role is _RETRIEVER:
        facts.query = _retriever_query(attrs, problems)
        facts.chunks = _retrieved(attrs, problems)
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
    elif _is_traceloop_retriever(facts.name, attrs):
        chunks = _traceloop_documents(attrs.get("traceloop.entity.output"), problems)
        if chunks is not None:
            role = _RETRIEVER
            facts.chunks = chunks
            facts.query = _text_attr(attrs, "traceloop.entity.input", _QUERY_KEYS, problems)
    facts.role = role

    qt = attrs.get("rag.query_type")
    if qt is None and "metadata" in attrs:
        qt = _metadata_query_type(attrs["metadata"])
    if qt is not None:
        facts.query_type = _scalar_text(qt, problems)
    rp = attrs.get("rag.replay")
    if rp is not None:
        facts.replay = parse_bool(rp, problems)


def is_inert(facts: SpanFacts) -> bool:
    """`apply` found nothing a record can use: role OTHER, and no query, answer, chunks, query type
    or replay. The HTTP, database and cache spans around a RAG request; assembly only counts them."""
    return facts.role is _OTHER and not (
        facts.query or facts.answer or facts.chunks or facts.query_type or facts.replay
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
        return _TRACELOOP_ROLES.get(tl.lower(), _OTHER)
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
    q = _text_attr(attrs, "input.value", _QUERY_KEYS, problems)
    if q is None:
        q = _text_attr(attrs, "traceloop.entity.input", _QUERY_KEYS, problems)
    if q is None:
        q = _str_attr(attrs, "gen_ai.retrieval.query.text", problems)
    if q is None:
        q = _last_user_message(attrs, problems)
    return q


def _root_answer(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    a = _text_attr(attrs, "output.value", _ANSWER_KEYS, problems)
    if a is None:
        a = _text_attr(attrs, "traceloop.entity.output", _ANSWER_KEYS, problems)
    if a is None:
        a = _llm_answer(attrs, problems)
    return a


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
    msgs = _loads(value) if isinstance(value, str) else value
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
    """A free-text attribute that may hold a JSON document wrapping the text we want."""
    value = attrs.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        head = value.lstrip()[:1]
        if head in ("{", "[", '"') and attrs.get(key.partition(".")[0] + ".mime_type") != "text/plain":
            parsed = _loads(value)
            if parsed is not _NOT_JSON:
                found = dig_text(parsed, keys)
                if found is not None:
                    return found
        return value
    return _scalar_text(value, problems)


def dig_text(obj: Any, keys: tuple[str, ...], depth: int = 0) -> str | None:
    """First string under one of `keys`, looking through common framework wrappers."""
    if isinstance(obj, str):
        return obj
    if depth > _MAX_DEPTH:
        return None
    if isinstance(obj, dict):
        for k in keys:
            v = obj.get(k)
            if isinstance(v, str):
                return v
        for k in (*keys, *_WRAPPERS):
            v = obj.get(k)
            if isinstance(v, dict | list):
                found = dig_text(v, keys, depth + 1)
                if found is not None:
                    return found
        return None
    if isinstance(obj, list):
        for item in obj[:8]:
            found = dig_text(item, keys, depth + 1)
            if found is not None:
                return found
    return None


# --- chunks -------------------------------------------------------------------------------------


def _retrieved(attrs: dict[str, Any], problems: list[Reject]) -> list[Chunk] | None:
    if _has_oi_docs(attrs, "retrieval.documents."):
        return _oi_documents(attrs, "retrieval.documents.", problems)
    docs = attrs.get("gen_ai.retrieval.documents")
    if docs is not None:
        parsed = _loads(docs) if isinstance(docs, str) else docs
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
        if isinstance(item, str):
            chunk = make_chunk(None, item, None, problems)
        elif isinstance(item, dict):
            if "kwargs" in item and isinstance(item["kwargs"], dict):  # LangChain serialised Document
                item = item["kwargs"]
            raw_id = _first(item, _ID_KEYS)
            if raw_id is None and "metadata" in item:
                raw_id = _metadata_id(item["metadata"])
            chunk = make_chunk(raw_id, _first(item, _CONTENT_KEYS), item.get("score"), problems)
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


def _is_traceloop_retriever(name: str, attrs: dict[str, Any]) -> bool:
    if "traceloop.entity.output" not in attrs:
        return False
    entity = attrs.get("traceloop.entity.name")
    label = entity if isinstance(entity, str) else name
    return "retriev" in label.lower()


def _traceloop_documents(value: Any, problems: list[Reject]) -> list[Chunk] | None:
    """A traceloop retriever task's output, when it is recognisably a list of documents."""
    parsed = _loads(value) if isinstance(value, str) else value
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
    md = _loads(metadata) if isinstance(metadata, str) else metadata
    return _first(md, _ID_KEYS) if isinstance(md, dict) else None


def _metadata_query_type(metadata: Any) -> Any:
    md = _loads(metadata) if isinstance(metadata, str) else metadata
    if isinstance(md, dict):
        return md.get("rag.query_type", md.get("query_type"))
    return None


_NOT_JSON: Any = object()


def _loads(text: str) -> Any:
    """json.loads that never raises (RecursionError included); `_NOT_JSON` when unparsable."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON
