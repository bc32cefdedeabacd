"""Where golden queries are replayed: an HTTP RAG endpoint or an in-process Python callable.

Both turn one query into a `TargetResponse` (answer + ranked chunks) or raise `TargetError` with a
message that names the row and what was wrong, because a replay that silently scores a broken
response as "no chunks retrieved" would look like a retrieval regression and send people to the
wrong half of the pipeline.

HTTP default (docs/contract.md, Replay HTTP contract): ``POST {url}`` with ``{"query": str, "k":
int}`` → ``{"answer": str, "chunks": [{"id", "content", "score"}]}``, header ``X-RAG-Replay:
t=…,sig=…`` (an HMAC with the shared replay secret, `monitor.plumbing.replay_mark`) so that the instrumented
service marks its spans ``rag.replay=true`` and production metrics exclude them; with no secret the
requests go unmarked (counted as production, and a warning says so). Other shapes:
`request_template` (a JSON value whose strings may hold ``{query}``, ``{k}``, ``{query_type}``,
``{id}``; a string that is exactly one placeholder keeps the value's type) and `ResponseMapping`
(dotted paths).

Given context (the oracle and no-context baselines): ``ask(..., context=[...])`` puts
``[{"id", "content"}]`` (``[]``: no context) at `ContextMapping.field` of the request body, and the
target answers from those chunks instead of retrieving. Absent: normal retrieval. A target that
cannot take it (`supports_context` False: no field configured, a callable without a ``context``
parameter) is never asked to; one that ignores it is caught by the caller, which compares the
chunks that come back with those given.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import inspect
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from monitor.contracts.model import Chunk
from monitor.golden.config import ContextMapping, HttpTargetConfig, ResponseMapping
from monitor.plumbing import replay_mark

__all__ = [
    "REPLAY_HEADER",
    "CallableTarget",
    "ContextChunk",
    "ContextMapping",
    "HttpTarget",
    "HttpTargetConfig",
    "ResponseMapping",
    "Target",
    "TargetError",
    "TargetResponse",
    "make_target",
]

log = logging.getLogger(__name__)

REPLAY_HEADER = replay_mark.HEADER
_UNMARKED_WARNED: set[str] = set()  # targets already warned about: once per process
_PLACEHOLDER = re.compile(r"\{(query|k|query_type|id)\}")
_RETRY_STATUS = frozenset((408, 425, 429, 500, 502, 503, 504))


class TargetError(Exception):
    """The target could not give a usable answer for a row (after retries): bad input, exit 2."""


@dataclass(frozen=True, slots=True)
class TargetResponse:
    answer: str
    chunks: list[Chunk]


@dataclass(frozen=True, slots=True)
class ContextChunk:
    """A chunk the target is told to answer from, instead of retrieving (oracle baseline)."""

    id: str
    content: str


class Target(Protocol):
    """Replays one golden query. Raises `TargetError`; never returns a half-parsed response.

    `context` None: retrieve as usual; a list (possibly empty): answer from exactly those chunks.
    Only passed when `supports_context` is True."""

    @property
    def description(self) -> str: ...

    @property
    def supports_context(self) -> bool: ...

    async def ask(
        self,
        *,
        row_id: str,
        query: str,
        query_type: str,
        k: int,
        context: list[ContextChunk] | None = None,
    ) -> TargetResponse: ...

    async def aclose(self) -> None: ...


_MISSING = object()


def _path(data: Any, path: str) -> Any:
    cur = data
    for part in path.split(".") if path else []:
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return _MISSING
    return cur


def parse_response(data: Any, mapping: ResponseMapping, where: str) -> TargetResponse:
    """A response mapped onto (answer, chunks), or TargetError naming the missing/bad field."""
    answer = _path(data, mapping.answer)
    if answer is _MISSING:
        raise TargetError(f"{where}: response has no {mapping.answer!r} field")
    if answer is None:
        answer = ""
    if not isinstance(answer, str):
        raise TargetError(f"{where}: {mapping.answer!r} is {type(answer).__name__}, expected a string")
    raw_chunks = _path(data, mapping.chunks)
    if raw_chunks is _MISSING:
        raise TargetError(f"{where}: response has no {mapping.chunks!r} field")
    if not isinstance(raw_chunks, list):
        raise TargetError(f"{where}: {mapping.chunks!r} is {type(raw_chunks).__name__}, expected a list")
    chunks = []
    for i, c in enumerate(raw_chunks):
        cid = _path(c, mapping.chunk_id)
        if isinstance(cid, bool) or not isinstance(cid, str | int) or cid == "":
            raise TargetError(f"{where}: chunk {i} has no usable {mapping.chunk_id!r}")
        content = _path(c, mapping.chunk_content) if mapping.chunk_content else None
        if content is not _MISSING and content is not None and not isinstance(content, str):
            raise TargetError(f"{where}: chunk {i} {mapping.chunk_content!r} is not a string")
        score = _path(c, mapping.chunk_score) if mapping.chunk_score else None
        if (
            score is not _MISSING
            and score is not None
            and (isinstance(score, bool) or not isinstance(score, int | float))
        ):
            raise TargetError(f"{where}: chunk {i} {mapping.chunk_score!r} is not a number")
        chunks.append(
            Chunk(
                str(cid),
                content if isinstance(content, str) else None,
                float(score) if isinstance(score, int | float) else None,
            )
        )
    return TargetResponse(answer, chunks)


def _put(body: Any, path: str, value: Any, where: str) -> Any:
    """`body` with `value` set at dotted `path` (intermediate objects made as needed)."""
    if not isinstance(body, dict):
        raise TargetError(f"{where}: the request body is not a JSON object: cannot add the context field")
    parts = path.split(".")
    cur = body
    for part in parts[:-1]:
        nxt = cur.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise TargetError(f"{where}: request field {part!r} is not an object: cannot add {path!r}")
        cur = nxt
    cur[parts[-1]] = value
    return body


def render_template(template: Any, values: Mapping[str, Any]) -> Any:
    """Fill ``{query}``-style placeholders; a string that is one placeholder keeps its type."""
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole:
            return values[whole.group(1)]
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
    if isinstance(template, list):
        return [render_template(t, values) for t in template]
    if isinstance(template, dict):
        return {k: render_template(v, values) for k, v in template.items()}
    return template


class HttpTarget:
    """An HTTP RAG endpoint behind one pooled `httpx.AsyncClient` (keep-alive across rows)."""

    def __init__(
        self, config: HttpTargetConfig, *, concurrency: int = 8, replay_secret: bytes | None = None
    ) -> None:
        """`replay_secret` signs the replay mark; None: `config.replay_secret_file`, else the env
        var `config.replay_secret_env`; with none, requests go unmarked (a warning says so)."""
        if not config.url.startswith(("http://", "https://")):
            raise ValueError(f"target URL must start with http:// or https://, got {config.url!r}")
        if replay_secret is None:
            replay_secret = replay_mark.load_secret(
                config.replay_secret_file, os.environ.get(config.replay_secret_env), "replay secret"
            )
        if replay_secret is None and config.url not in _UNMARKED_WARNED:
            _UNMARKED_WARNED.add(config.url)
            log.warning(
                "no replay secret (target.replay_secret_file or $%s): requests to %s go unmarked and "
                "the service counts them as production traffic",
                config.replay_secret_env,
                _safe_url(config.url),
            )
        self._secret = replay_secret
        headers = {k: v for k, v in config.headers.items() if k.lower() != REPLAY_HEADER.lower()}
        headers["Content-Type"] = "application/json"
        if config.auth_env:
            secret = os.environ.get(config.auth_env)
            if not secret:
                raise ValueError(f"environment variable {config.auth_env} (auth_env) is not set")
            headers[config.auth_header] = f"{config.auth_scheme} {secret}" if config.auth_scheme else secret
        self.config = config
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(config.timeout_seconds),
            limits=httpx.Limits(
                max_connections=max(concurrency, 1), max_keepalive_connections=max(concurrency, 1)
            ),
        )

    @property
    def description(self) -> str:
        return self.config.url

    @property
    def supports_context(self) -> bool:
        return bool(self.config.context.field)

    async def ask(
        self,
        *,
        row_id: str,
        query: str,
        query_type: str,
        k: int,
        context: list[ContextChunk] | None = None,
    ) -> TargetResponse:
        cfg = self.config
        body = render_template(
            cfg.request_template, {"query": query, "k": k, "query_type": query_type, "id": row_id}
        )
        where = f"row {row_id!r}"
        if context is not None:
            cm = cfg.context
            if not cm.field:
                raise TargetError(
                    f"{where}: target {cfg.url} takes no context (target.context.field is null)"
                )
            given = [{cm.chunk_id: c.id, cm.chunk_content: c.content} for c in context]
            body = _put(body, cm.field, given, where)
        last = ""
        for attempt in range(cfg.retries + 1):
            if attempt:
                await asyncio.sleep(cfg.backoff_seconds * 2 ** (attempt - 1))
            content = json.dumps(body).encode()
            marks = {}
            if self._secret is not None:  # signed per attempt: the mark's timestamp must be fresh
                marks[REPLAY_HEADER] = replay_mark.sign(self._secret, cfg.method, content)
            try:
                r = await self._client.request(cfg.method, cfg.url, content=content, headers=marks)
            except httpx.TimeoutException:
                last = f"timed out after {cfg.timeout_seconds:g} s"
                continue
            except httpx.TransportError as exc:
                last = f"connection failed ({exc.__class__.__name__}: {exc})"
                continue
            if r.status_code in _RETRY_STATUS:
                last = f"HTTP {r.status_code}"
                continue
            if r.status_code >= 400:
                raise TargetError(
                    f"{where}: target {cfg.url} returned HTTP {r.status_code}: {r.text[:200]!r}"
                )
            try:
                data = r.json()
            except ValueError:
                raise TargetError(
                    f"{where}: target {cfg.url} returned malformed JSON "
                    f"(HTTP {r.status_code}): {r.text[:120]!r}"
                ) from None
            return parse_response(data, cfg.response, f"{where}: target {cfg.url}")
        raise TargetError(f"{where}: target {cfg.url} {last} ({cfg.retries + 1} attempts)")

    async def aclose(self) -> None:
        await self._client.aclose()


class CallableTarget:
    """``module:function`` called as ``fn(query, k)`` (sync functions run in a thread), returning
    the default response shape as a mapping (or an object with `answer` and `chunks`)."""

    def __init__(self, spec: str, mapping: ResponseMapping | None = None) -> None:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise ValueError(f"callable target must be 'module:function', got {spec!r}")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot import target {spec!r}: {exc}") from None
        if not callable(obj):
            raise ValueError(f"target {spec!r} is not callable")
        self._fn: Callable[..., Any] = obj
        try:
            self._takes_context = "context" in inspect.signature(obj).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            self._takes_context = False
        self._spec = spec
        self._mapping = mapping or ResponseMapping()

    @property
    def description(self) -> str:
        return self._spec

    @property
    def supports_context(self) -> bool:
        """A function with a ``context`` parameter is called with ``context=[{"id", "content"}]``."""
        return self._takes_context

    async def ask(
        self,
        *,
        row_id: str,
        query: str,
        query_type: str,
        k: int,
        context: list[ContextChunk] | None = None,
    ) -> TargetResponse:
        where = f"row {row_id!r}: target {self._spec}"
        kwargs: dict[str, Any] = {}
        if context is not None:
            if not self._takes_context:
                raise TargetError(f"{where} takes no context parameter")
            kwargs["context"] = [{"id": c.id, "content": c.content} for c in context]
        try:
            if inspect.iscoroutinefunction(self._fn):
                result = await self._fn(query, k, **kwargs)
            else:
                result = await asyncio.to_thread(self._fn, query, k, **kwargs)
                if inspect.isawaitable(result):
                    result = await _await(result)
        except Exception as exc:
            raise TargetError(f"{where} raised {exc.__class__.__name__}: {exc}") from exc
        if not isinstance(result, Mapping):  # a dataclass or plain object: go through JSON
            try:
                result = json.loads(json.dumps(result, default=_plain))
            except (TypeError, ValueError) as exc:
                raise TargetError(f"{where} returned {type(result).__name__}: {exc}") from None
        return parse_response(result, self._mapping, where)

    async def aclose(self) -> None:
        return None


def _safe_url(url: str) -> str:
    """The URL without credentials or query, for a log line."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "__dict__"):
        return vars(obj)
    raise TypeError(f"cannot read a response from {type(obj).__name__}")


async def _await(value: Awaitable[Any]) -> Any:
    return await value


def make_target(
    spec: str | HttpTargetConfig,
    *,
    concurrency: int = 8,
    config: HttpTargetConfig | None = None,
    replay_secret: bytes | None = None,
) -> Target:
    """An HTTP target for an ``http(s)://`` URL (settings from `config`), else a ``module:function``.
    `replay_secret` signs an HTTP target's replay mark (None: from its config or the environment)."""
    if isinstance(spec, HttpTargetConfig):
        return HttpTarget(spec, concurrency=concurrency, replay_secret=replay_secret)
    if spec.startswith(("http://", "https://")):
        base = config or HttpTargetConfig()
        return HttpTarget(
            base.model_copy(update={"url": spec}), concurrency=concurrency, replay_secret=replay_secret
        )
    return CallableTarget(spec, config.response if config else None)
