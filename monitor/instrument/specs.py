"""What each kind of decorated function records: where its query sits in the call's arguments,
the attributes before the call and those taken from its result."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from monitor.instrument.attributes import (
    IN_CONTENT,
    IN_ROLE,
    INPUT,
    INPUT_MIME,
    KIND,
    MODEL,
    OUT_CONTENT,
    OUT_ROLE,
    OUTPUT,
    OUTPUT_MIME,
    QUERY_TYPE,
    document_attrs,
    put_text,
)
from monitor.instrument.extract import DocumentExtractor
from monitor.instrument.spans import InstrumentState, SpanKindName, SpanSpec, count_internal_error

QueryArg = str | int | Callable[..., Any] | None


def query_getter(
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


class RequestSpec(SpanSpec):
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

    def before(self, st: InstrumentState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {KIND: "CHAIN"}
        q = self._query_text(args, kwargs)
        if q is not None and st.policy.capture_query:
            put_text(attrs, INPUT, INPUT_MIME, q, st.policy)
        qt = self.query_type
        if qt is not None:
            if callable(qt):
                try:
                    qt = qt(q or "")
                except Exception:
                    count_internal_error("query_type classifier")
                    qt = None
            if isinstance(qt, str) and qt:
                attrs[QUERY_TYPE] = qt
        return attrs

    def after(self, st: InstrumentState, result: Any) -> dict[str, Any] | None:
        if not st.policy.capture_answer:
            return None
        a = self.answer(result)
        if a is None:
            return None
        attrs: dict[str, Any] = {}
        put_text(attrs, OUTPUT, OUTPUT_MIME, a, st.policy)
        return attrs


class RetrieverSpec(SpanSpec):
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

    def before(self, st: InstrumentState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {KIND: "RETRIEVER"}
        q = self._query_text(args, kwargs)
        if q is not None and st.policy.capture_query:
            put_text(attrs, INPUT, INPUT_MIME, q, st.policy)
        return attrs

    def after(self, st: InstrumentState, result: Any) -> dict[str, Any] | None:
        return document_attrs(st.policy, "retrieval.documents.", self.documents(result), self.extract)


class GeneratorSpec(SpanSpec):
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

    def before(self, st: InstrumentState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {KIND: "LLM"}
        if self.model:
            attrs[MODEL] = self.model
        q = self._query_text(args, kwargs)
        if q is not None and st.policy.capture_query:
            attrs[IN_ROLE] = "user"
            attrs[IN_CONTENT] = st.policy.clean(q)
        return attrs

    def after(self, st: InstrumentState, result: Any) -> dict[str, Any] | None:
        if not st.policy.capture_answer:
            return None
        a = self.answer(result)
        if a is None:
            return None
        return {OUT_ROLE: "assistant", OUT_CONTENT: st.policy.clean(a)}
