"""Kafka responses read off a connection as the chunks the socket delivered, joined once a frame.

aiokafka reads each response with asyncio's `StreamReader.readexactly(size)`, which gathers what
the socket delivers (256 KiB a read) in one bytearray, regrown as each read is appended, then
copies the response out of it. `install()` has aiokafka's connections keep the chunks in a list
instead and join a frame's bytes once: on the production mix (5.7 MB fetch responses) 4.3 µs a
message less CPU outside the stage, 1.11x the messages a second (`python bench/ingest.py
--workload mix --sampling off,on,streams`, bench/RESULTS.md, issue 40). It also raises the
reader's limit (`conn.READER_LIMIT`, 64 KiB): past twice the limit buffered, asyncio paused the
socket and `readexactly` resumed it at once, since a response is read whole (~45 pauses for one
such response, two `epoll_ctl` calls and a loop turn each). The buffer holds a response either
way, so memory does not grow.

The reader is asyncio's own, its class changed to `_ChunkedReader` when aiokafka's protocol for
the connection is made: waiting, end of stream, exceptions and the transport's pausing stay
asyncio's; only where the bytes are kept differs. It overrides what aiokafka calls
(`readexactly`, `at_eof`) and what feeds it (`feed_data`). `RAGMON_KAFKA_RESPONSES=aiokafka`
leaves the connections as aiokafka makes them (bench/ingest.py's `streams` variant; a way back).
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import Any

from aiokafka import conn

_READER_LIMIT = 4 * 1024 * 1024  # a connection's reader pauses its socket past twice this


class _ChunkedReader(asyncio.StreamReader):
    """asyncio's reader, its bytes kept as the chunks received (see the module docstring). The
    state it shares with asyncio's methods (`_eof`, `_exception`, `_paused`, `_transport`,
    `_limit`) is asyncio's private state, read through `st: Any`: typeshed does not declare it."""

    _chunks: deque[bytes | memoryview]
    _held: int  # bytes in `_chunks`

    @classmethod
    def adopt(cls, reader: asyncio.StreamReader) -> None:
        """Make a new, still empty asyncio reader this kind."""
        st: Any = reader
        if type(reader) is not asyncio.StreamReader or st._buffer:
            return
        st.__class__ = cls
        st._chunks = deque()
        st._held = 0

    def feed_data(self, data: Any) -> None:
        st: Any = self
        assert not st._eof, "feed_data after feed_eof"
        if not data:
            return
        self._chunks.append(data)
        self._held += len(data)
        st._wakeup_waiter()
        if st._transport is not None and not st._paused and self._held > 2 * st._limit:
            try:
                st._transport.pause_reading()
            except NotImplementedError:
                st._transport = None
            else:
                st._paused = True

    def _maybe_resume_transport(self) -> None:
        st: Any = self
        if st._paused and self._held <= st._limit:
            st._paused = False
            st._transport.resume_reading()

    def at_eof(self) -> bool:
        st: Any = self
        return bool(st._eof) and not self._held

    async def readexactly(self, n: int) -> bytes:
        st: Any = self
        if n < 0:
            raise ValueError("readexactly size can not be less than zero")
        if st._exception is not None:
            raise st._exception
        if n == 0:
            return b""
        while self._held < n:
            if st._eof:
                partial = self._take(self._held)
                raise asyncio.IncompleteReadError(partial, n)
            await st._wait_for_data("readexactly")
        data = self._take(n)
        self._maybe_resume_transport()
        return data

    def _take(self, n: int) -> bytes:
        """The next `n` held bytes (n <= held), one copy at most."""
        if not n:
            return b""
        chunks = self._chunks
        self._held -= n
        parts: list[bytes | memoryview] = []
        while n:
            chunk = chunks[0]
            if len(chunk) <= n:
                chunks.popleft()
                parts.append(chunk)
                n -= len(chunk)
            else:
                view = memoryview(chunk)
                parts.append(view[:n])
                chunks[0] = view[n:]
                n = 0
        first = parts[0]
        if len(parts) == 1 and type(first) is bytes:
            return first
        return b"".join(parts)


class _Protocol(conn.AIOKafkaProtocol):  # type: ignore[misc]
    """aiokafka's connection protocol, its reader made a `_ChunkedReader`."""

    def __init__(self, closed_fut: Any, reader: asyncio.StreamReader, *args: Any, **kwargs: Any) -> None:
        _ChunkedReader.adopt(reader)
        super().__init__(closed_fut, reader, *args, **kwargs)


def install() -> None:
    """For connections made from now on (idempotent)."""
    if os.environ.get("RAGMON_KAFKA_RESPONSES", "") == "aiokafka":
        return
    conn.READER_LIMIT = max(conn.READER_LIMIT, _READER_LIMIT)
    conn.AIOKafkaProtocol = _Protocol
