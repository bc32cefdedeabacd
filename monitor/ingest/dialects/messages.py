"""Query and answer text: free-text attributes that may wrap it in a framework's JSON, and a model
call's messages in each dialect's shape (OpenInference indexed messages, GenAI JSON message lists,
the legacy indexed prompt and completion)."""

from __future__ import annotations

import re
from typing import Any

from monitor.contracts.model import Reject
from monitor.ingest.dialects.haystack import haystack_pipeline_answer, haystack_pipeline_query
from monitor.ingest.dialects.scalars import NOT_JSON, key_rows, loads, scalar_text, str_attr

# The keys a framework's JSON input or output holds the query or the answer under, most specific
# first: LlamaIndex (`str_or_query_bundle`, `query_bundle.query_str`, a chat engine's `message`),
# LangChain/OpenLLMetry (`inputs`/`outputs`), DSPy (`question`/`answer`), Haystack (`replies`).
QUERY_KEYS = ("query", "question", "input", "text", "query_str", "str_or_query_bundle", "message")
ANSWER_KEYS = ("answer", "output", "text", "result", "content", "response")
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
# What frameworks write where a value could not be serialised: `<generator object …>`,
# `<NodeWithScore(…)>`, a Python repr such as `ChatMessage(_role=…)` or `Document(id=…, …)`. Never a
# query or an answer: the reading falls back to the retriever's query or the generation's output.
_PLACEHOLDER = re.compile(r"<[^<>]*(?:object|\(|\bat 0x)[^<>]*>|[A-Za-z_][\w.]*\((?:_?[a-z_]\w*=)", re.ASCII)

_MAX_DEPTH = 6


def root_query(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    """The request's query; None when the root holds only a wrapper, a placeholder or an empty
    string, so that assembly takes the retriever's query instead."""
    q = text_attr(attrs, "input.value", QUERY_KEYS, problems)
    if not q:
        q = text_attr(attrs, "traceloop.entity.input", QUERY_KEYS, problems)
    if not q and "traceloop.entity.output" in attrs:
        # LangChain under OpenLLMetry, streamed: the input is `{"input": ""}`, the query is echoed
        # in the output's `kwargs.inputs`
        q = _echoed_input(attrs["traceloop.entity.output"])
    if not q and "haystack.pipeline.input_data" in attrs:
        q = haystack_pipeline_query(attrs["haystack.pipeline.input_data"])
    if not q:
        q = str_attr(attrs, "gen_ai.retrieval.query.text", problems)
    if not q:
        q = last_user_message(attrs, problems)
    return q or None


def root_answer(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    """The request's answer; None for a wrapper, a placeholder (a stream's generator) or an empty
    string, so that assembly takes the last generation's output instead."""
    a = text_attr(attrs, "output.value", ANSWER_KEYS, problems)
    if not a:
        a = text_attr(attrs, "traceloop.entity.output", ANSWER_KEYS, problems)
    if not a and "haystack.pipeline.output_data" in attrs:
        a = haystack_pipeline_answer(attrs["haystack.pipeline.output_data"])
    if not a:
        a = llm_answer(attrs, problems)
    return a or None


def retriever_query(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    q = str_attr(attrs, "gen_ai.retrieval.query.text", problems)
    if q is None:
        q = text_attr(attrs, "input.value", QUERY_KEYS, problems)
    if q is None:
        q = text_attr(attrs, "traceloop.entity.input", QUERY_KEYS, problems)
    return q


def llm_answer(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    return _messages_text(attrs, problems, "output", _ASSISTANT)


def last_user_message(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
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
    for role_key, content_key in key_rows(prefix, suffixes, len(attrs)):
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
            else scalar_text(content, problems)
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


def _json_messages(value: Any, problems: list[Reject]) -> list[tuple[str | None, str]]:
    """GenAI messages: ``[{"role", "parts": [{"type": "text", "content"}]}]`` or ``{"role", "content"}``.

    Accepts the JSON string form (span attribute) and the structured form (event attribute).
    """
    msgs = loads(value)
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


def text_attr(attrs: dict[str, Any], key: str, keys: tuple[str, ...], problems: list[Reject]) -> str | None:
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
            parsed = loads(value)
            if parsed is not NOT_JSON:
                return dig_text(parsed, keys)
        return value
    return scalar_text(value, problems)


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
    doc = loads(value)
    kwargs = doc.get("kwargs") if isinstance(doc, dict) else None
    inputs = kwargs.get("inputs") if isinstance(kwargs, dict) else None
    return dig_text(inputs, QUERY_KEYS) if isinstance(inputs, str | dict) else None
