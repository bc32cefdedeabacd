"""Outputs: the results file and topic (the HTTP endpoint is in `monitor.outputs.http`).

A result is written before the offsets behind it may be committed, so the sinks report success
only once the line is with the OS (file) or acknowledged by the broker (topic).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Protocol

from monitor.kafka.producer import KafkaOutput


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
    def __init__(self, output: KafkaOutput, topic: str) -> None:
        self._out = output
        self._topic = topic

    async def write(self, lines: list[tuple[str, bytes]]) -> None:
        # Keyed by query type: every judgement of a slice in one partition, in one order, which
        # is what gives the drift stage one detector state per slice (monitor/drift/stage.py).
        items: list[tuple[bytes | None, bytes]] = [(qt.encode(), line.rstrip(b"\n")) for qt, line in lines]
        await self._out.send_many(self._topic, items)

    async def close(self) -> None:
        """The shared producer is closed by its owner."""
