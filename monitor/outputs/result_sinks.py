"""The sinks of the results lines (`monitor.contracts.results`): the results file and topic (the HTTP
endpoint is in `monitor.outputs.http`), and the review queue's file and topic, which carry results
lines too.

A result is written before the offsets behind it may be committed, so the sinks report success
only once the line is on disk (file, fsynced) or acknowledged by the broker (topic).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import threading
import time
import weakref
from pathlib import Path
from typing import Protocol

from prometheus_client import Counter

from monitor.kafka.producer import KafkaOutput

log = logging.getLogger(__name__)


class ResultSink(Protocol):
    async def write(self, lines: list[tuple[str, bytes]]) -> None:
        """(key, JSON line) pairs: the topic's message key (the results: the query type)."""

    async def close(self) -> None: ...


class FileSink:
    """Appends JSON lines to a file that stays whole and bounded whatever the disk does.

    - Whole lines only: a batch that fails part-way (ENOSPC, EIO) is truncated back to where it
      began before the error is raised, so the stage's retry writes it once; a torn tail left by a
      crash is cut back to the last newline when the file is (re)opened.
    - Durable: each batch is fsynced before `write` returns, since the stage commits the offsets
      behind a result once it is written.
    - Bounded: past `max_bytes` the file is rotated to `path.1` (then `.2` … up to `keep`, the
      oldest deleted), as logrotate and lumberjack name them; `max_bytes=0` never rotates.
    - Rotated by another tool: a file renamed or deleted away (its inode no longer at `path`) or
      truncated in place is noticed at the next write; `reopen()` (SIGHUP) forces a reopen.
    - Failures are counted in `errors{reason}` (`no_space`, `io_error`, `torn_tail`).

    All file work runs in a worker thread so the event loop never waits on the disk.
    """

    def __init__(self, path: Path, max_bytes: int = 0, keep: int = 0, errors: Counter | None = None) -> None:
        self.path = path
        self._max_bytes = max_bytes
        self._keep = keep
        self._errors = errors
        self._lock = threading.Lock()
        self._fd = -1
        self._ino = (0, 0)  # (st_dev, st_ino) of the open file
        self._size = 0  # the file's length up to the last whole line this sink knows of
        self._dirty = False  # a failed write may have left bytes after `_size`
        self._reopen = False
        path.parent.mkdir(parents=True, exist_ok=True)
        self._open()  # fails start-up on an unwritable path, as before
        _OPEN.add(self)

    # -- the event loop's side -------------------------------------------------------------

    async def write(self, lines: list[tuple[str, bytes]]) -> None:
        data = b"".join(line for _, line in lines)
        if data:
            await asyncio.to_thread(self._write, data)

    async def close(self) -> None:
        _OPEN.discard(self)
        await asyncio.to_thread(self._close)

    def reopen(self) -> None:
        """Reopen `path` before the next write (after logrotate moved it away: SIGHUP)."""
        self._reopen = True

    # -- the worker thread's side ----------------------------------------------------------

    def _count(self, reason: str) -> None:
        if self._errors is not None:
            self._errors.labels(reason=reason).inc()

    def _open(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            st = os.fstat(fd)
            size = _whole_lines_end(fd, st.st_size)
            if size != st.st_size:
                os.ftruncate(fd, size)
                os.fsync(fd)
                self._count("torn_tail")
                log.warning(
                    "results file %s ended in a torn line (%d bytes): cut back to the last whole line",
                    self.path,
                    st.st_size - size,
                )
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._ino, self._size, self._dirty = fd, (st.st_dev, st.st_ino), size, False

    def _close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _moved_away(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return True
        return (st.st_dev, st.st_ino) != self._ino

    def _reopen_now(self) -> None:
        if self._dirty:  # a failed batch's bytes stay out of the old file too
            os.ftruncate(self._fd, self._size)
            self._dirty = False
        os.close(self._fd)
        self._fd = -1
        self._open()

    def _rotate(self) -> None:
        """path.(keep-1) → path.keep … path → path.1, then a new empty path."""
        os.close(self._fd)
        self._fd = -1
        if self._keep == 0:
            self.path.unlink(missing_ok=True)
        else:
            for i in range(self._keep - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{i}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self._open()
        _fsync_dir(self.path.parent)

    def _write(self, data: bytes) -> None:
        with self._lock:
            try:
                self._prepare(len(data))
                self._append(data)
            except OSError as exc:
                self._count("no_space" if exc.errno in _NO_SPACE else "io_error")
                raise

    def _prepare(self, incoming: int) -> None:
        """An open file at `path`, holding whole lines only, with room for `incoming` bytes."""
        if self._fd < 0:
            self._open()  # a reopen or rotation failed part-way: again
        elif self._reopen or self._moved_away():
            self._reopen = False
            self._reopen_now()
        if self._dirty:
            os.ftruncate(self._fd, self._size)  # what a failed batch left, before its retry
            self._dirty = False
        actual = os.fstat(self._fd).st_size
        if actual < self._size:  # truncated in place (logrotate's copytruncate)
            self._size = _whole_lines_end(self._fd, actual)
        if self._max_bytes and self._size and self._size + incoming > self._max_bytes:
            self._rotate()

    def _append(self, data: bytes) -> None:
        start = self._size
        self._dirty = True
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError:
            with contextlib.suppress(OSError):  # else left dirty: cut before the next attempt
                os.ftruncate(self._fd, start)
                self._dirty = False
            raise
        self._size = start + len(data)
        self._dirty = False


# ENOSPC, and EDQUOT (a quota is a full disk to this writer).
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})

# Open file sinks, for the SIGHUP handler (weak: a closed sink goes away on its own).
_OPEN: weakref.WeakSet[FileSink] = weakref.WeakSet()


def reopen_files() -> None:
    """Reopen every open results file at its next write: the SIGHUP handler (logrotate's
    `postrotate kill -HUP`)."""
    for sink in list(_OPEN):
        sink.reopen()


def reopen_on_sighup() -> None:
    """SIGHUP reopens the results files (as for nginx or rsyslog after logrotate), when this is
    the main thread's running loop (elsewhere signals cannot be handled: the inode check alone)."""
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reopen_files)


def _whole_lines_end(fd: int, size: int) -> int:
    """The offset just past the last newline in the first `size` bytes of `fd` (0 if none)."""
    end = size
    while end > 0:
        start = max(0, end - 65536)
        chunk = os.pread(fd, end - start, start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        end = start
    return 0


def _fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (POSIX wants the directory fsynced too)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TopicSink:
    """A line the topic refuses for its size is left out of it (counted in `dropped`, logged
    once a minute): no retry could send it, and retrying would hold every offset behind it. The
    results file, where configured, still has it."""

    def __init__(
        self, output: KafkaOutput, topic: str, max_bytes: int, dropped: Counter, stream: str = "results"
    ) -> None:
        self._out = output
        self._topic = topic
        self._max_bytes = max_bytes
        self._stream = stream
        self._dropped = dropped.labels(stream=stream, reason="too_large")
        self._warned = -float("inf")

    async def write(self, lines: list[tuple[str, bytes]]) -> None:
        # Keyed by the pair's first item. The results topic: by query type, every judgement of a
        # slice in one partition, in one order, which is what gives the drift stage one detector
        # state per slice (monitor/drift/stage.py). The review queue: by trace id.
        items: list[tuple[bytes | None, bytes]] = [(qt.encode(), line.rstrip(b"\n")) for qt, line in lines]
        refused = await self._out.send_many(self._topic, items, self._max_bytes)
        if refused:
            self._dropped.inc(len(refused))
            now = time.monotonic()
            if now - self._warned >= 60.0:
                self._warned = now
                log.error(
                    "%d %s line(s) of up to %d bytes left out of %s (max %d bytes); counted in"
                    " ragmon_produce_dropped_total",
                    len(refused),
                    self._stream,
                    max(len(items[i][1]) for i in refused),
                    self._topic,
                    self._max_bytes,
                )

    async def close(self) -> None:
        """The shared producer is closed by its owner."""
