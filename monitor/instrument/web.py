"""Replay marking for web services: requests with a valid ``X-RAG-Replay`` mark produce
``rag.replay=true`` spans, which the monitor keeps out of production metrics.

The mark is an HMAC with a shared secret (`monitor.plumbing.replay_mark`: timestamp, method, body), so an
ordinary client cannot hide its traffic by sending ``X-RAG-Replay: 1``: a missing, forged, stale or
unverifiable mark leaves the request counted as production. The secret is the ``secret`` argument,
else ``RAGMON_REPLAY_SECRET_FILE`` / ``RAGMON_REPLAY_SECRET``; with none, nothing is marked.

`ReplayMiddleware` is plain ASGI (Starlette, FastAPI, Quart, Litestar…), so this module imports no
web framework; for anything else,
``with replay_scope(is_replay(request.headers, method=request.method, body=request.get_data())):``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any

from monitor.instrument.replay import replay_scope
from monitor.plumbing.replay_mark import MAX_AGE_SECONDS, body_digest, check, secret_from_env

__all__ = ["REPLAY_HEADER", "ReplayMiddleware", "is_replay", "replay_scope"]

log = logging.getLogger(__name__)

REPLAY_HEADER = "x-rag-replay"
MAX_SIGNED_BODY = 16 * 1024 * 1024  # a larger body is not hashed: the request counts as production

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _header(
    headers: Mapping[str, str] | Iterable[tuple[str | bytes, str | bytes]], header: str
) -> str | bytes | None:
    name = header.lower()
    if isinstance(headers, Mapping):
        v = headers.get(name)
        if v is None:
            v = headers.get(header)
        if v is None:
            for k, val in headers.items():
                if isinstance(k, str) and k.lower() == name:
                    return val
        return v
    bname = name.encode("latin-1")
    for k, val in headers:
        if k.lower() in (name, bname):
            return val
    return None


class _Rejections:
    """Marks refused, by reason; each reason logged once (a flood of forged headers is one line)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def add(self, reason: str) -> None:
        with self._lock:
            first = reason not in self.counts
            self.counts[reason] = self.counts.get(reason, 0) + 1
        if first:
            log.warning("X-RAG-Replay mark refused (%s): the request counts as production traffic", reason)


_REFUSED = _Rejections()


def is_replay(
    headers: Mapping[str, str] | Iterable[tuple[str | bytes, str | bytes]],
    *,
    method: str,
    body: bytes,
    secret: bytes | str | None = None,
    header: str = REPLAY_HEADER,
    max_age_seconds: float = MAX_AGE_SECONDS,
) -> bool:
    """True when the request carries a valid replay mark for `method` and `body`.

    Accepts a mapping (case-insensitive ones like Starlette's or requests', and plain dicts) or a
    sequence of (name, value) pairs (ASGI raw ``bytes`` headers, WSGI-style lists). `secret` None:
    from the environment, read on each call (pass it when calling per request).
    """
    mark = _header(headers, header)
    if mark is None:
        return False
    key = secret.encode() if isinstance(secret, str) else secret
    if key is None:
        key = secret_from_env()
    if key is None:
        _REFUSED.add("no replay secret configured")
        return False
    reason = check(key, mark, method, body_digest(body), max_age=max_age_seconds)
    if reason is not None:
        _REFUSED.add(reason)
    return reason is None


class ReplayMiddleware:
    """ASGI middleware: ``app.add_middleware(ReplayMiddleware)`` (or ``secret=...``). Sets the replay
    flag for the request's context when its mark verifies, so spans the handler opens (in its task
    and tasks it starts) are marked.

    Only a request carrying the header is read ahead (to hash its body; at most 16 MiB, beyond it
    counts as production), and its body is then handed to the app unchanged. `refused` counts the
    marks refused, by reason (``malformed``, ``stale``, ``bad_signature``, ``body_too_large``,
    ``no replay secret configured``)."""

    def __init__(
        self,
        app: ASGIApp,
        header: str = REPLAY_HEADER,
        *,
        secret: bytes | str | None = None,
        max_age_seconds: float = MAX_AGE_SECONDS,
    ) -> None:
        self.app = app
        self.header = header.lower().encode("latin-1")
        key = secret.encode() if isinstance(secret, str) else secret
        self._secret = key if key is not None else secret_from_env()
        self._max_age = max_age_seconds
        self._refused = _Rejections()

    @property
    def refused(self) -> dict[str, int]:
        return dict(self._refused.counts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        mark: bytes | None = None
        for k, v in scope.get("headers") or ():
            if k.lower() == self.header:
                mark = v
                break
        if mark is None:
            await self.app(scope, receive, send)
            return
        if self._secret is None:
            self._refused.add("no replay secret configured")
            await self.app(scope, receive, send)
            return
        held, digest, whole = await self._read_body(receive)
        if whole is None:
            self._refused.add("body_too_large")
            flag = False
        else:
            reason = check(self._secret, mark, str(scope.get("method", "")), digest, max_age=self._max_age)
            if reason is not None:
                self._refused.add(reason)
            flag = reason is None

        async def replayed() -> Message:
            return held.pop(0) if held else await receive()

        if not flag:
            await self.app(scope, replayed, send)
            return
        with replay_scope():
            await self.app(scope, replayed, send)

    async def _read_body(self, receive: Receive) -> tuple[list[Message], bytes, bool | None]:
        """The body's messages (to hand on), its SHA-256, and True when it was read whole (None:
        too large or the client left; the messages read so far are still handed on)."""
        held: list[Message] = []
        h = hashlib.sha256()
        size = 0
        while True:
            msg = await receive()
            held.append(msg)
            if msg.get("type") != "http.request":
                return held, h.digest(), None
            chunk = msg.get("body", b"")
            size += len(chunk)
            h.update(chunk)
            if not msg.get("more_body", False):
                return held, h.digest(), True
            if size > MAX_SIGNED_BODY:
                return held, h.digest(), None
