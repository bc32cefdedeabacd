"""Replay marking: spans opened inside a `replay_scope` carry ``rag.replay=true``, so golden
replays stay out of production's metrics. A context variable, so it follows asyncio tasks."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

REPLAYING: ContextVar[bool] = ContextVar("rag_replay", default=False)


class replay_scope:  # lower case: used like a function, `with replay_scope(is_replay(headers)):`
    """Spans opened inside carry ``rag.replay=true`` when `flag` is true (frameworks without ASGI)."""

    __slots__ = ("_flag", "_token")

    def __init__(self, flag: bool = True) -> None:
        self._flag = flag
        self._token: Any = None

    def __enter__(self) -> None:
        self._token = REPLAYING.set(self._flag)

    def __exit__(self, *exc: object) -> None:
        REPLAYING.reset(self._token)
