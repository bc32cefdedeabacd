"""Outputs: the results file and topic (the HTTP endpoint is in `monitor.outputs.http`).

A result is written before the offsets behind it may be committed, so the sinks report success
only once the line is with the OS (file) or acknowledged by the broker (topic).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import Counter

from monitor.kafka.producer import KafkaOutput

log = logging.getLogger(__name__)


class ResultSink(Protocol):
    async def write(self, lines: list[tuple[str, bytes]]) -> None:
        """(query type, JSON line) pairs."""

    async def close(self) -> None: ...


def encode_line(result: dict[str, Any]) -> bytes:
    return json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


class FileSink:
    """Appends JSON lines; writes happen in a worker thread so the event loop never waits on disk."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("ab")

    def _write(self, lines: list[tuple[str, bytes]]) -> None:
        self._fh.write(b"".join(line for _, line in lines))
        self._fh.flush()

    async def write(self, lines: list[tuple[str, bytes]]) -> None:
        await asyncio.to_thread(self._write, lines)

    async def close(self) -> None:
        await asyncio.to_thread(self._fh.close)


class TopicSink:
    """A line the topic refuses for its size is left out of it (counted in `dropped`, logged
    once a minute): no retry could send it, and retrying would hold every offset behind it. The
    results file, where configured, still has it."""

    def __init__(self, output: KafkaOutput, topic: str, max_bytes: int, dropped: Counter) -> None:
        self._out = output
        self._topic = topic
        self._max_bytes = max_bytes
        self._dropped = dropped.labels(stream="results", reason="too_large")
        self._warned = -float("inf")

    async def write(self, lines: list[tuple[str, bytes]]) -> None:
        # Keyed by query type: every judgement of a slice in one partition, in one order, which
        # is what gives the drift stage one detector state per slice (monitor/drift/stage.py).
        items: list[tuple[bytes | None, bytes]] = [(qt.encode(), line.rstrip(b"\n")) for qt, line in lines]
        refused = await self._out.send_many(self._topic, items, self._max_bytes)
        if refused:
            self._dropped.inc(len(refused))
            now = time.monotonic()
            if now - self._warned >= 60.0:
                self._warned = now
                log.error(
                    "%d results line(s) of up to %d bytes left out of %s (max %d bytes); counted in"
                    " ragmon_produce_dropped_total",
                    len(refused),
                    max(len(items[i][1]) for i in refused),
                    self._topic,
                    self._max_bytes,
                )

    async def close(self) -> None:
        """The shared producer is closed by its owner."""
