"""Text, answers and documents pulled out of whatever a RAG service's functions take and return
(strings, dicts, objects, LangChain Documents, OpenAI-style responses), so a decorator needs no
mapping for the common shapes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

Document = tuple[str | None, str | None, float | None]  # (id, content, score)
DocumentExtractor = Callable[[Any], Document]


def query_text(value: Any) -> str | None:
    """A query-ish value as text: a string, or a request object/dict holding one."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        for key in ("query", "question", "input", "text"):
            v = value.get(key)
            if isinstance(v, str):
                return v
        return None
    for key in ("query", "question", "input", "text"):
        v = getattr(value, key, None)
        if isinstance(v, str):
            return v
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def default_answer(result: Any) -> str | None:
    """The answer text in a result: a string, ``{"answer": ...}``, ``.answer`` / ``.content`` (chat
    messages), or an OpenAI-style ``.choices[0].message.content``. None when there is none."""
    if result is None or isinstance(result, str):
        return result
    if isinstance(result, Mapping):
        for key in ("answer", "output", "text", "content", "result"):
            v = result.get(key)
            if isinstance(v, str):
                return v
        return None
    for key in ("answer", "content", "text", "output"):
        v = getattr(result, key, None)
        if isinstance(v, str):
            return v
    choices = getattr(result, "choices", None)
    if isinstance(choices, list | tuple) and choices:
        c = choices[0]
        msg = getattr(c, "message", None)
        v = getattr(msg, "content", None) if msg is not None else getattr(c, "text", None)
        if isinstance(v, str):
            return v
    return None


_ID_KEYS = ("id", "doc_id", "document_id", "chunk_id")
_CONTENT_KEYS = ("content", "page_content", "text")


def _pick(get: Callable[[str], Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        v = get(k)
        if v is not None:
            return v
    return None


def _score(value: Any) -> float | None:
    if isinstance(value, float):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    try:  # numpy scalars and the like
        return float(value) if value is not None and not isinstance(value, str | bool) else None
    except (TypeError, ValueError):
        return None


def default_document(item: Any) -> Document:
    """(id, content, score) of one retrieved item.

    Understands dicts and objects with ``id``/``doc_id``/``chunk_id``, ``content``/``page_content``/
    ``text`` and ``score`` (LangChain Documents included: ``metadata["id"]``/``["score"]``), tuples
    ``(id, content, score)`` and ``(document, score)``, and bare strings.
    """
    t = type(item)
    if t is dict:  # the common case first, without ABC checks
        raw_id = item.get("id")
        content = item.get("content")
        score = item.get("score")
        if raw_id is None or content is None:
            return _document_slow(item)
    elif t is tuple and len(item) == 3:
        raw_id, content, score = item
    elif isinstance(item, str):
        return None, item, None
    else:
        return _document_slow(item)
    return (
        raw_id if type(raw_id) is str else None if raw_id is None else str(raw_id),
        content if type(content) is str else None,
        score if type(score) is float else _score(score),
    )


def _document_slow(item: Any) -> Document:
    if isinstance(item, tuple | list):
        if len(item) == 3:
            i, c, s = item
            return (None if i is None else str(i)), (c if isinstance(c, str) else None), _score(s)
        if len(item) == 2:
            did, content, _ = default_document(item[0])
            return did, content, _score(item[1])
        return None, None, None
    if isinstance(item, Mapping):
        get: Callable[[str], Any] = item.get
    else:
        obj = item

        def get(key: str) -> Any:
            return getattr(obj, key, None)

    raw_id = _pick(get, _ID_KEYS)
    content = _pick(get, _CONTENT_KEYS)
    score = get("score")
    meta = get("metadata")
    if isinstance(meta, Mapping):
        if raw_id is None:
            raw_id = _pick(meta.get, _ID_KEYS)
        if score is None:
            score = meta.get("score")
    return (
        None if raw_id is None else str(raw_id),
        content if isinstance(content, str) else None,
        _score(score),
    )


def retrieved_items(result: Any) -> Iterable[Any]:
    """The list of retrieved items in a retriever's result (the result itself, or a field of it)."""
    if isinstance(result, Mapping):
        for key in ("documents", "chunks", "hits", "results"):
            v = result.get(key)
            if isinstance(v, list | tuple):
                return v
        return ()
    if isinstance(result, list | tuple):
        return result
    for key in ("documents", "chunks", "hits"):
        v = getattr(result, key, None)
        if isinstance(v, list | tuple):
            return v
    return ()  # never iterate anything else: consuming a generator would change the result
