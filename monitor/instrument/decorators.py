"""The public decorators: a RAG service's request, retriever and generator functions, each turned
into its OpenInference span by `spans.wrap_traced` and the kind's spec."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, TypeVar, overload

from monitor.instrument.extract import DocumentExtractor, default_answer, default_document, retrieved_items
from monitor.instrument.spans import wrap_traced
from monitor.instrument.specs import GeneratorSpec, QueryArg, RequestSpec, RetrieverSpec, query_getter

P = ParamSpec("P")
R = TypeVar("R")


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
        getter = query_getter(f, query_arg, fallback_first=True)
        return wrap_traced(f, RequestSpec(name or f.__qualname__, getter, query_type, answer))

    return deco(fn) if fn is not None else deco


@overload
def trace_retriever(fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def trace_retriever(
    *,
    name: str | None = None,
    query_arg: QueryArg = None,
    extract: DocumentExtractor = default_document,
    documents: Callable[[Any], Iterable[Any]] = retrieved_items,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def trace_retriever(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    query_arg: QueryArg = None,
    extract: DocumentExtractor = default_document,
    documents: Callable[[Any], Iterable[Any]] = retrieved_items,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """A retrieval call (RETRIEVER span): the query in, the ranked documents out, best first.

    The result is a list (or a dict/object with ``documents``/``chunks``/``hits``) of items that
    `extract` maps to (id, content, score); the default understands dicts, objects, LangChain
    Documents and ``(id, content, score)`` / ``(doc, score)`` tuples.
    """

    def deco(f: Callable[P, R]) -> Callable[P, R]:
        getter = query_getter(f, query_arg, fallback_first=True)
        return wrap_traced(f, RetrieverSpec(name or f.__qualname__, getter, extract, documents))

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
        getter = query_getter(f, query_arg, fallback_first=False) if query_arg is not None else None
        return wrap_traced(f, GeneratorSpec(name or f.__qualname__, getter, model, answer))

    return deco(fn) if fn is not None else deco
