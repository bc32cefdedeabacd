"""Replay marking for web services: requests with ``X-RAG-Replay: 1`` produce ``rag.replay=true`` spans.

The golden-set replayer sends that header so the monitor can keep replay traffic out of production
metrics. `ReplayMiddleware` is plain ASGI (Starlette, FastAPI, Quart, Litestar…), so this module
imports no web framework; for anything else, ``with replay_scope(is_replay(request.headers)):``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any

from monitor.instrument.spans import _REPLAY, replay_scope

__all__ = ["REPLAY_HEADER", "ReplayMiddleware", "is_replay", "replay_scope"]

REPLAY_HEADER = "x-rag-replay"
_TRUE = frozenset({"1", "true", "yes", "on"})

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _truthy(value: str | bytes) -> bool:
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value.strip().lower() in _TRUE


def is_replay(
    headers: Mapping[str, str] | Iterable[tuple[str | bytes, str | bytes]], header: str = REPLAY_HEADER
) -> bool:
    """True when the replay header says so (``1``/``true``/``yes``/``on``), whatever its case.

    Accepts a mapping (case-insensitive ones like Starlette's or requests' included, and plain
    dicts) or a sequence of (name, value) pairs (ASGI raw ``bytes`` headers, WSGI-style lists).
    """
    name = header.lower()
    if isinstance(headers, Mapping):
        v = headers.get(name)
        if v is None:
            v = headers.get(header)
        if v is None:
            for k, val in headers.items():
                if isinstance(k, str) and k.lower() == name:
                    v = val
                    break
        return v is not None and _truthy(v)
    bname = name.encode("latin-1")
    for k, val in headers:
        key = k.lower()
        if key in (name, bname):
            return _truthy(val)
    return False


class ReplayMiddleware:
    """ASGI middleware: ``app.add_middleware(ReplayMiddleware)``. Sets the replay flag for the
    request's context, so spans the handler opens (in its task and tasks it starts) are marked."""

    def __init__(self, app: ASGIApp, header: str = REPLAY_HEADER) -> None:
        self.app = app
        self.header = header.lower().encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        flag = False
        for k, v in scope.get("headers") or ():
            if k.lower() == self.header:
                flag = _truthy(v)
                break
        if not flag:
            await self.app(scope, receive, send)
            return
        token = _REPLAY.set(True)
        try:
            await self.app(scope, receive, send)
        finally:
            _REPLAY.reset(token)
