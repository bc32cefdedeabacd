"""The tracing runtime behind the decorators (`monitor.instrument.decorators`) and `rag_span`: the
state `configure` installs, the span lifecycle every wrapper shares, and the context manager. The
state is read per call as this module's global, beside the wrappers that read it.

The attributes are exactly those `monitor.ingest.dialects` decodes (CHAIN / RETRIEVER / LLM spans,
``input.value``, ``output.value``, ``retrieval.documents.{i}.document.*``, ``llm.*``,
``rag.query_type``, ``rag.replay``), so the sidecar builds a record from them with no mapping.

Rules that hold for every wrapper (the decorators and `rag_span`):

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
from collections.abc import Callable, Iterable
from contextvars import Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar

from opentelemetry import trace as trace_api
from opentelemetry.context import Context, attach, detach
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from monitor.instrument.attributes import (
    DOC_PREFIX,
    IN_CONTENT,
    IN_ROLE,
    INPUT,
    INPUT_MIME,
    KIND,
    MODEL,
    OI_KIND,
    OUT_CONTENT,
    OUT_ROLE,
    OUTPUT,
    OUTPUT_MIME,
    QUERY_TYPE,
    REPLAY,
    document_attrs,
    put_text,
)
from monitor.instrument.content import ContentPolicy
from monitor.instrument.extract import DocumentExtractor, default_document, query_text
from monitor.instrument.replay import REPLAYING

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

SpanKindName = Literal["request", "retriever", "reranker", "generator"]

# --------------------------------------------------------------------------------------------
# State


@dataclass(frozen=True, slots=True)
class InstrumentState:
    enabled: bool
    tracer: Tracer | None = None
    policy: ContentPolicy = field(default_factory=ContentPolicy)


_DISABLED = InstrumentState(False)
_state: InstrumentState = _DISABLED
_internal_errors = [0]


def _install(tracer: Tracer | None, policy: ContentPolicy) -> None:
    """Swap the global state in one assignment: calls in flight keep the state they started with."""
    global _state
    _state = InstrumentState(True, tracer, policy) if tracer is not None else _DISABLED


def internal_errors() -> int:
    """How often the instrumentation itself failed (and stayed out of the service's way)."""
    return _internal_errors[0]


def count_internal_error(what: str) -> None:
    _internal_errors[0] += 1
    log.debug("rag instrumentation: %s failed", what, exc_info=True)


def set_query_type(query_type: str) -> None:
    """Set ``rag.query_type`` from inside a traced function, once the service knows it.

    It goes on the current span: the sidecar takes the query type from any span of the trace.
    """
    if _state.enabled:
        trace_api.get_current_span().set_attribute(QUERY_TYPE, query_type)


# --------------------------------------------------------------------------------------------
# What every decorated function's spec answers (its kinds: `monitor.instrument.specs`)


class SpanSpec:
    """How one decorated function maps to span attributes: before the call and from its result."""

    kind: SpanKindName = "request"

    def __init__(self, name: str, query: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None) -> None:
        self.name = name
        self.query = query

    def before(self, st: InstrumentState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        return {KIND: OI_KIND[self.kind]}

    def after(self, st: InstrumentState, result: Any) -> dict[str, Any] | None:
        return None

    def _query_text(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        return query_text(self.query(args, kwargs)) if self.query is not None else None


# --------------------------------------------------------------------------------------------
# Span lifecycle shared by decorators and rag_span


def _open(st: InstrumentState, name: str, attrs: dict[str, Any]) -> tuple[Span, Token[Context]]:
    if REPLAYING.get():
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


def _close_error(st: InstrumentState, span: Span, token: Token[Context], exc: BaseException) -> None:
    try:
        detach(token)
        attrs = _exception_attrs(st.policy, exc)
        span.add_event("exception", attrs)
        desc = f"{attrs['exception.type']}: {attrs['exception.message']}"
        span.set_status(Status(StatusCode.ERROR, desc[:512]))
    except Exception:
        count_internal_error("recording an exception")
    span.end()


def _close_ok(st: InstrumentState, spec: SpanSpec, span: Span, token: Token[Context], result: Any) -> None:
    try:
        detach(token)
        attrs = spec.after(st, result)
        if attrs:
            span.set_attributes(attrs)
    except Exception:
        count_internal_error(f"recording the result of {spec.name}")
    span.end()


def _begin(
    st: InstrumentState, spec: SpanSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Span, Token[Context]] | None:
    try:
        return _open(st, spec.name, spec.before(st, args, kwargs))
    except Exception:
        count_internal_error(f"starting a span for {spec.name}")
        return None


def wrap_traced(fn: Callable[P, R], spec: SpanSpec) -> Callable[P, R]:
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
# Context manager


class RagSpan:
    """A RAG span around a block of code; `rag_span` returns one. Also the handle used inside the
    block to record what the block found. With tracing off every method does nothing."""

    __slots__ = ("_kind", "_name", "_pending", "_span", "_st", "_token")

    def __init__(
        self, st: InstrumentState | None, kind: SpanKindName, name: str, attrs: dict[str, Any]
    ) -> None:
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
                count_internal_error(f"starting span {self._name}")
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
            count_internal_error(f"ending span {self._name}")
        span.end()

    def _set(self, attrs: dict[str, Any]) -> None:
        if self._span is not None:
            try:
                self._span.set_attributes(attrs)
            except Exception:
                count_internal_error("setting attributes")

    def set_query(self, query: str) -> None:
        st = self._st
        if self._span is None or st is None or not st.policy.capture_query:
            return
        attrs: dict[str, Any] = {}
        if self._kind == "generator":
            attrs[IN_ROLE] = "user"
            attrs[IN_CONTENT] = st.policy.clean(query)
        else:
            put_text(attrs, INPUT, INPUT_MIME, query, st.policy)
        self._set(attrs)

    def set_answer(self, answer: str) -> None:
        st = self._st
        if self._span is None or st is None or not st.policy.capture_answer:
            return
        if self._kind == "generator":
            self._set({OUT_ROLE: "assistant", OUT_CONTENT: st.policy.clean(answer)})
        else:
            attrs: dict[str, Any] = {}
            put_text(attrs, OUTPUT, OUTPUT_MIME, answer, st.policy)
            self._set(attrs)

    def set_documents(self, items: Iterable[Any], extract: DocumentExtractor = default_document) -> None:
        """Ranked documents, best first (retriever and reranker spans)."""
        st = self._st
        if self._span is None or st is None:
            return
        prefix = DOC_PREFIX.get(self._kind, "retrieval.documents.")
        try:
            attrs = document_attrs(st.policy, prefix, items, extract)
        except Exception:
            count_internal_error("extracting documents")
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
    attrs: dict[str, Any] = {KIND: OI_KIND[kind]}
    if query is not None and st.policy.capture_query:
        if kind == "generator":
            attrs[IN_ROLE] = "user"
            attrs[IN_CONTENT] = st.policy.clean(query)
        else:
            put_text(attrs, INPUT, INPUT_MIME, query, st.policy)
    if query_type:
        attrs[QUERY_TYPE] = query_type
    if model:
        attrs[MODEL] = model
    return RagSpan(st, kind, name or f"rag.{kind}", attrs)
