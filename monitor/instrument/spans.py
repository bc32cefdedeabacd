"""Decorators and a context manager that turn a RAG service's own functions into OpenInference spans.

The attributes are exactly those `monitor.ingest.dialects` decodes (CHAIN / RETRIEVER / LLM spans,
``input.value``, ``output.value``, ``retrieval.documents.{i}.document.*``, ``llm.*``,
``rag.query_type``, ``rag.replay``), so the sidecar builds a record from them with no mapping.

Rules that hold for every wrapper here:

- Success leaves the span status UNSET (what the OpenTelemetry spec asks of instrumentations).
- The wrapped function's result and exceptions are never changed. An exception is recorded on the
  span (redacted like any other text), the span gets ERROR status, and the same exception object is
  re-raised. A failure inside the instrumentation itself is swallowed and counted (`internal_errors`).
- When tracing is off (`configure` never called, or `enabled=False`) a call costs one attribute
  read and a branch: the state is looked up per call, so functions decorated at import time start
  tracing when `configure` runs later.
- Spans are made current with OpenTelemetry's context (contextvars), so asyncio tasks started
  inside a traced coroutine (``asyncio.gather``, ``create_task``) get the right parent.
"""

from __future__ import annotations

import functools
import inspect
import logging
import traceback
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar, overload

from opentelemetry import trace as trace_api
from opentelemetry.context import Context, attach, detach
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from monitor.instrument.content import ContentPolicy

__all__ = [
    "Document",
    "DocumentExtractor",
    "RagSpan",
    "SpanKindName",
    "default_answer",
    "default_document",
    "internal_errors",
    "rag_span",
    "replay_scope",
    "set_query_type",
    "trace_generator",
    "trace_request",
    "trace_retriever",
]

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

Document = tuple[str | None, str | None, float | None]  # (id, content, score)
DocumentExtractor = Callable[[Any], Document]
SpanKindName = Literal["request", "retriever", "reranker", "generator"]

KIND = "openinference.span.kind"
INPUT = "input.value"
INPUT_MIME = "input.mime_type"
OUTPUT = "output.value"
OUTPUT_MIME = "output.mime_type"
MODEL = "llm.model_name"
IN_ROLE = "llm.input_messages.0.message.role"
IN_CONTENT = "llm.input_messages.0.message.content"
OUT_ROLE = "llm.output_messages.0.message.role"
OUT_CONTENT = "llm.output_messages.0.message.content"
QUERY_TYPE = "rag.query_type"
REPLAY = "rag.replay"

_OI_KIND = {"request": "CHAIN", "retriever": "RETRIEVER", "reranker": "RERANKER", "generator": "LLM"}
_DOC_PREFIX = {"retriever": "retrieval.documents.", "reranker": "reranker.output_documents."}
_JSONISH = frozenset('{["')

# --------------------------------------------------------------------------------------------
# State


@dataclass(frozen=True, slots=True)
class _State:
    enabled: bool
    tracer: Tracer | None = None
    policy: ContentPolicy = field(default_factory=ContentPolicy)


_DISABLED = _State(False)
_state: _State = _DISABLED
_REPLAY: ContextVar[bool] = ContextVar("rag_replay", default=False)
_internal_errors = [0]


def _install(tracer: Tracer | None, policy: ContentPolicy) -> None:
    """Swap the global state in one assignment: calls in flight keep the state they started with."""
    global _state
    _state = _State(True, tracer, policy) if tracer is not None else _DISABLED


def internal_errors() -> int:
    """How often the instrumentation itself failed (and stayed out of the service's way)."""
    return _internal_errors[0]


def _oops(what: str) -> None:
    _internal_errors[0] += 1
    log.debug("rag instrumentation: %s failed", what, exc_info=True)


# --------------------------------------------------------------------------------------------
# Replay marking


class replay_scope:  # lower case: used like a function, `with replay_scope(is_replay(headers)):`
    """Spans opened inside carry ``rag.replay=true`` when `flag` is true (frameworks without ASGI)."""

    __slots__ = ("_flag", "_token")

    def __init__(self, flag: bool = True) -> None:
        self._flag = flag
        self._token: Any = None

    def __enter__(self) -> None:
        self._token = _REPLAY.set(self._flag)

    def __exit__(self, *exc: object) -> None:
        _REPLAY.reset(self._token)


def set_query_type(query_type: str) -> None:
    """Set ``rag.query_type`` from inside a traced function, once the service knows it.

    It goes on the current span: the sidecar takes the query type from any span of the trace.
    """
    if _state.enabled:
        trace_api.get_current_span().set_attribute(QUERY_TYPE, query_type)


# --------------------------------------------------------------------------------------------
# Extraction of text, answers and documents from arbitrary values


def _text(value: Any) -> str | None:
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


def _documents(result: Any) -> Iterable[Any]:
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


_DOC_KEYS: dict[str, list[tuple[str, str, str]]] = {}


def _doc_keys(prefix: str, n: int) -> list[tuple[str, str, str]]:
    keys = _DOC_KEYS.get(prefix)
    if keys is None:
        keys = _DOC_KEYS[prefix] = []
    while len(keys) < n:
        i = len(keys)
        base = f"{prefix}{i}.document."
        keys.append((base + "id", base + "content", base + "score"))
    return keys


def _document_attrs(
    policy: ContentPolicy, prefix: str, items: Iterable[Any], extract: DocumentExtractor
) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    limit = policy.max_documents
    if not limit:
        return attrs
    contexts = policy.capture_contexts
    clean = policy.clean
    i = 0
    keys = _doc_keys(prefix, 16)
    for item in items:
        if i >= limit:
            break
        did, content, score = extract(item)
        if i >= len(keys):
            keys = _doc_keys(prefix, 2 * len(keys))
        kid, kcontent, kscore = keys[i]
        if did is not None:
            attrs[kid] = did
        if content is not None and contexts:
            attrs[kcontent] = clean(content)
        if score is not None:
            attrs[kscore] = score
        if did is None and (content is None or not contexts) and score is None:
            continue  # an empty slot would end the decoder's contiguous index scan early
        i += 1
    return attrs


# --------------------------------------------------------------------------------------------
# What each kind of span records


QueryArg = str | int | Callable[..., Any] | None


def _query_getter(
    fn: Callable[..., Any], query_arg: QueryArg, *, fallback_first: bool
) -> Callable[[tuple[Any, ...], dict[str, Any]], Any] | None:
    """Resolve, once at decoration time, where the query sits in a call's arguments."""
    if callable(query_arg):
        f = query_arg
        return lambda args, kwargs: f(*args, **kwargs)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    name: str | None = None
    index: int | None = None
    if isinstance(query_arg, int):
        index = query_arg
        name = positional[index].name if index < len(positional) else None
    elif isinstance(query_arg, str):
        name = query_arg
        if not any(p.name == name for p in params) and not any(p.kind == p.VAR_KEYWORD for p in params):
            raise TypeError(f"{fn.__qualname__} has no parameter {name!r} (query_arg)")
    else:
        names = {p.name for p in params}
        name = next((n for n in ("query", "question", "q") if n in names), None)
        if name is None and fallback_first:
            first = [p for p in positional if p.name not in ("self", "cls")]
            if not first:
                return None
            name = first[0].name
        if name is None:
            return None
    if index is None and name is not None:
        index = next((i for i, p in enumerate(positional) if p.name == name), None)
    if index is None:
        key = name
        return lambda args, kwargs: kwargs.get(key) if key is not None else None
    idx, key = index, name

    def get(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if idx < len(args):
            return args[idx]
        return kwargs.get(key) if key is not None else None

    return get


def _put_text(
    attrs: dict[str, Any], key: str, mime_key: str | None, text: str, policy: ContentPolicy
) -> None:
    value = policy.clean(text)
    attrs[key] = value
    # Text that looks like JSON would be parsed by readers: say it is plain text.
    if mime_key is not None and value[:1] in _JSONISH:
        attrs[mime_key] = "text/plain"


class _Spec:
    """How one decorated function maps to span attributes: before the call and from its result."""

    kind: SpanKindName = "request"

    def __init__(self, name: str, query: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None) -> None:
        self.name = name
        self.query = query

    def before(self, st: _State, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        return {KIND: _OI_KIND[self.kind]}

    def after(self, st: _State, result: Any) -> dict[str, Any] | None:
        return None

    def _query_text(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        return _text(self.query(args, kwargs)) if self.query is not None else None


class _RequestSpec(_Spec):
    kind: SpanKindName = "request"

    def __init__(
        self,
        name: str,
        query: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None,
        query_type: str | Callable[[str], str | None] | None,
        answer: Callable[[Any], str | None],
    ) -> None:
        super().__init__(name, query)
        self.query_type = query_type
        self.answer = answer

    def before(self, st: _State, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {KIND: "CHAIN"}
        q = self._query_text(args, kwargs)
        if q is not None and st.policy.capture_query:
            _put_text(attrs, INPUT, INPUT_MIME, q, st.policy)
        qt = self.query_type
        if qt is not None:
            if callable(qt):
                try:
                    qt = qt(q or "")
                except Exception:
                    _oops("query_type classifier")
                    qt = None
            if isinstance(qt, str) and qt:
                attrs[QUERY_TYPE] = qt
        return attrs

    def after(self, st: _State, result: Any) -> dict[str, Any] | None:
        if not st.policy.capture_answer:
            return None
        a = self.answer(result)
        if a is None:
            return None
        attrs: dict[str, Any] = {}
        _put_text(attrs, OUTPUT, OUTPUT_MIME, a, st.policy)
        return attrs


class _RetrieverSpec(_Spec):
    kind: SpanKindName = "retriever"

    def __init__(
        self,
        name: str,
        query: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None,
        extract: DocumentExtractor,
        documents: Callable[[Any], Iterable[Any]],
    ) -> None:
        super().__init__(name, query)
        self.extract = extract
        self.documents = documents

    def before(self, st: _State, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {KIND: "RETRIEVER"}
        q = self._query_text(args, kwargs)
        if q is not None and st.policy.capture_query:
            _put_text(attrs, INPUT, INPUT_MIME, q, st.policy)
        return attrs

    def after(self, st: _State, result: Any) -> dict[str, Any] | None:
        return _document_attrs(st.policy, "retrieval.documents.", self.documents(result), self.extract)


class _GeneratorSpec(_Spec):
    kind: SpanKindName = "generator"

    def __init__(
        self,
        name: str,
        query: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None,
        model: str | None,
        answer: Callable[[Any], str | None],
    ) -> None:
        super().__init__(name, query)
        self.model = model
        self.answer = answer

    def before(self, st: _State, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {KIND: "LLM"}
        if self.model:
            attrs[MODEL] = self.model
        q = self._query_text(args, kwargs)
        if q is not None and st.policy.capture_query:
            attrs[IN_ROLE] = "user"
            attrs[IN_CONTENT] = st.policy.clean(q)
        return attrs

    def after(self, st: _State, result: Any) -> dict[str, Any] | None:
        if not st.policy.capture_answer:
            return None
        a = self.answer(result)
        if a is None:
            return None
        return {OUT_ROLE: "assistant", OUT_CONTENT: st.policy.clean(a)}


# --------------------------------------------------------------------------------------------
# Span lifecycle shared by decorators and rag_span


def _open(st: _State, name: str, attrs: dict[str, Any]) -> tuple[Span, Token[Context]]:
    if _REPLAY.get():
        attrs[REPLAY] = True
    assert st.tracer is not None
    span = st.tracer.start_span(name, attributes=attrs)
    return span, attach(trace_api.set_span_in_context(span))


def _exception_attrs(policy: ContentPolicy, exc: BaseException) -> dict[str, Any]:
    """The OpenTelemetry exception event, with message and stack trace redacted like any text."""
    message = str(exc)
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "exception.type": type(exc).__qualname__,
        "exception.message": policy.clean(message),
        "exception.stacktrace": policy.clean(stack),
        "exception.escaped": "True",
    }


def _close_error(st: _State, span: Span, token: Token[Context], exc: BaseException) -> None:
    try:
        detach(token)
        attrs = _exception_attrs(st.policy, exc)
        span.add_event("exception", attrs)
        desc = f"{attrs['exception.type']}: {attrs['exception.message']}"
        span.set_status(Status(StatusCode.ERROR, desc[:512]))
    except Exception:
        _oops("recording an exception")
    span.end()


def _close_ok(st: _State, spec: _Spec, span: Span, token: Token[Context], result: Any) -> None:
    try:
        detach(token)
        attrs = spec.after(st, result)
        if attrs:
            span.set_attributes(attrs)
    except Exception:
        _oops(f"recording the result of {spec.name}")
    span.end()


def _begin(
    st: _State, spec: _Spec, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Span, Token[Context]] | None:
    try:
        return _open(st, spec.name, spec.before(st, args, kwargs))
    except Exception:
        _oops(f"starting a span for {spec.name}")
        return None


def _wrap(fn: Callable[P, R], spec: _Spec) -> Callable[P, R]:
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"{fn.__qualname__} is a generator: its span would end before the stream does; "
            "wrap the consuming code in `with rag_span(...) as s:` and call s.set_answer(...)"
        )
    if inspect.iscoroutinefunction(fn):
        afn: Any = fn

        @functools.wraps(fn)
        async def awrapper(*args: Any, **kwargs: Any) -> Any:
            st = _state
            if not st.enabled:
                return await afn(*args, **kwargs)
            opened = _begin(st, spec, args, kwargs)
            if opened is None:
                return await afn(*args, **kwargs)
            span, token = opened
            try:
                result = await afn(*args, **kwargs)
            except BaseException as exc:
                _close_error(st, span, token, exc)
                raise
            _close_ok(st, spec, span, token, result)
            return result

        out: Any = awrapper
        return out  # type: ignore[no-any-return]

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        st = _state
        if not st.enabled:
            return fn(*args, **kwargs)
        opened = _begin(st, spec, args, kwargs)
        if opened is None:
            return fn(*args, **kwargs)
        span, token = opened
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            _close_error(st, span, token, exc)
            raise
        _close_ok(st, spec, span, token, result)
        return result

    return wrapper


# --------------------------------------------------------------------------------------------
# Public decorators


@overload
def trace_request(fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def trace_request(
    *,
    name: str | None = None,
    query_arg: QueryArg = None,
    query_type: str | Callable[[str], str | None] | None = None,
    answer: Callable[[Any], str | None] = default_answer,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def trace_request(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    query_arg: QueryArg = None,
    query_type: str | Callable[[str], str | None] | None = None,
    answer: Callable[[Any], str | None] = default_answer,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """The RAG request (OpenInference CHAIN span): the query in, the final answer out.

    `query_arg`: parameter name or position holding the query (a string, or an object/dict with a
    ``query`` field), or a callable taking the call's arguments; default: a parameter named
    ``query``/``question``/``q``, else the first one. `query_type`: a fixed slice name, or a
    classifier called with the query text. `answer`: pulls the answer text from the result.
    """

    def deco(f: Callable[P, R]) -> Callable[P, R]:
        getter = _query_getter(f, query_arg, fallback_first=True)
        return _wrap(f, _RequestSpec(name or f.__qualname__, getter, query_type, answer))

    return deco(fn) if fn is not None else deco


@overload
def trace_retriever(fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def trace_retriever(
    *,
    name: str | None = None,
    query_arg: QueryArg = None,
    extract: DocumentExtractor = default_document,
    documents: Callable[[Any], Iterable[Any]] = _documents,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def trace_retriever(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    query_arg: QueryArg = None,
    extract: DocumentExtractor = default_document,
    documents: Callable[[Any], Iterable[Any]] = _documents,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """A retrieval call (RETRIEVER span): the query in, the ranked documents out, best first.

    The result is a list (or a dict/object with ``documents``/``chunks``/``hits``) of items that
    `extract` maps to (id, content, score); the default understands dicts, objects, LangChain
    Documents and ``(id, content, score)`` / ``(doc, score)`` tuples.
    """

    def deco(f: Callable[P, R]) -> Callable[P, R]:
        getter = _query_getter(f, query_arg, fallback_first=True)
        return _wrap(f, _RetrieverSpec(name or f.__qualname__, getter, extract, documents))

    return deco(fn) if fn is not None else deco


@overload
def trace_generator(fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def trace_generator(
    *,
    model: str | None = None,
    name: str | None = None,
    query_arg: QueryArg = None,
    answer: Callable[[Any], str | None] = default_answer,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def trace_generator(
    fn: Callable[P, R] | None = None,
    /,
    *,
    model: str | None = None,
    name: str | None = None,
    query_arg: QueryArg = None,
    answer: Callable[[Any], str | None] = default_answer,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """The generation call (LLM span): the model name and the answer message.

    The user message (``llm.input_messages.0``) is recorded only when `query_arg` names it: the
    request span already carries the query, and a generator's arguments are often the whole prompt.
    """

    def deco(f: Callable[P, R]) -> Callable[P, R]:
        getter = _query_getter(f, query_arg, fallback_first=False) if query_arg is not None else None
        return _wrap(f, _GeneratorSpec(name or f.__qualname__, getter, model, answer))

    return deco(fn) if fn is not None else deco


# --------------------------------------------------------------------------------------------
# Context manager


class RagSpan:
    """A RAG span around a block of code; `rag_span` returns one. Also the handle used inside the
    block to record what the block found. With tracing off every method does nothing."""

    __slots__ = ("_kind", "_name", "_pending", "_span", "_st", "_token")

    def __init__(self, st: _State | None, kind: SpanKindName, name: str, attrs: dict[str, Any]) -> None:
        self._st = st
        self._kind = kind
        self._name = name
        self._pending = attrs
        self._span: Span | None = None
        self._token: Token[Context] | None = None

    @property
    def recording(self) -> bool:
        return self._span is not None

    def __enter__(self) -> RagSpan:
        st = self._st
        if st is not None and st.enabled:
            try:
                self._span, self._token = _open(st, self._name, self._pending)
            except Exception:
                _oops(f"starting span {self._name}")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        span, st = self._span, self._st
        if span is None or st is None:
            return
        self._span = None
        if exc is not None and self._token is not None:
            _close_error(st, span, self._token, exc)
            return
        try:
            if self._token is not None:
                detach(self._token)
        except Exception:
            _oops(f"ending span {self._name}")
        span.end()

    def _set(self, attrs: dict[str, Any]) -> None:
        if self._span is not None:
            try:
                self._span.set_attributes(attrs)
            except Exception:
                _oops("setting attributes")

    def set_query(self, query: str) -> None:
        st = self._st
        if self._span is None or st is None or not st.policy.capture_query:
            return
        attrs: dict[str, Any] = {}
        if self._kind == "generator":
            attrs[IN_ROLE] = "user"
            attrs[IN_CONTENT] = st.policy.clean(query)
        else:
            _put_text(attrs, INPUT, INPUT_MIME, query, st.policy)
        self._set(attrs)

    def set_answer(self, answer: str) -> None:
        st = self._st
        if self._span is None or st is None or not st.policy.capture_answer:
            return
        if self._kind == "generator":
            self._set({OUT_ROLE: "assistant", OUT_CONTENT: st.policy.clean(answer)})
        else:
            attrs: dict[str, Any] = {}
            _put_text(attrs, OUTPUT, OUTPUT_MIME, answer, st.policy)
            self._set(attrs)

    def set_documents(self, items: Iterable[Any], extract: DocumentExtractor = default_document) -> None:
        """Ranked documents, best first (retriever and reranker spans)."""
        st = self._st
        if self._span is None or st is None:
            return
        prefix = _DOC_PREFIX.get(self._kind, "retrieval.documents.")
        try:
            attrs = _document_attrs(st.policy, prefix, items, extract)
        except Exception:
            _oops("extracting documents")
            return
        self._set(attrs)

    def set_model(self, model: str) -> None:
        self._set({MODEL: model})

    def set_query_type(self, query_type: str) -> None:
        self._set({QUERY_TYPE: query_type})

    def set_attribute(self, key: str, value: Any) -> None:
        self._set({key: value})


_NOOP = RagSpan(None, "request", "", {})


def rag_span(
    kind: SpanKindName,
    name: str | None = None,
    *,
    query: str | None = None,
    query_type: str | None = None,
    model: str | None = None,
) -> RagSpan:
    """``with rag_span("retriever") as s: ...; s.set_documents(hits)`` for code that is not a function
    (a streamed answer, an inline retrieval). Exceptions are recorded and propagate unchanged."""
    st = _state
    if not st.enabled:
        return _NOOP
    attrs: dict[str, Any] = {KIND: _OI_KIND[kind]}
    if query is not None and st.policy.capture_query:
        if kind == "generator":
            attrs[IN_ROLE] = "user"
            attrs[IN_CONTENT] = st.policy.clean(query)
        else:
            _put_text(attrs, INPUT, INPUT_MIME, query, st.policy)
    if query_type:
        attrs[QUERY_TYPE] = query_type
    if model:
        attrs[MODEL] = model
    return RagSpan(st, kind, name or f"rag.{kind}", attrs)
