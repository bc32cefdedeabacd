"""Counters of what happened to the spans a service produced: the instrumentation's own health."""

from __future__ import annotations

import threading

__all__ = ["SpanStats"]


class SpanStats:
    """Thread-safe span counters, shared by the processor and the exporter of one configuration.

    `exported`: acknowledged by the destination (Kafka ack, OTLP 2xx). `dropped`: never sent because
    a bounded queue was full or the exporter was shut down: the price of never blocking the service.
    `failed`: sent but not acknowledged (broker error, timeout, HTTP error).
    """

    __slots__ = ("_dropped", "_exported", "_failed", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._exported = 0
        self._dropped = 0
        self._failed = 0

    def add(self, *, exported: int = 0, dropped: int = 0, failed: int = 0) -> None:
        with self._lock:
            self._exported += exported
            self._dropped += dropped
            self._failed += failed

    @property
    def exported(self) -> int:
        return self._exported

    @property
    def failed(self) -> int:
        return self._failed

    @property
    def dropped(self) -> int:
        return self._dropped

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            exported, dropped, failed = self._exported, self._dropped, self._failed
        return {
            "exported": exported,
            "dropped": dropped,
            "failed": failed,
        }

    def reset_after_fork(self) -> None:
        """A forked child counts its own spans, with a lock no parent thread can be holding."""
        self._lock = threading.Lock()
        self._exported = self._dropped = self._failed = 0

    def __repr__(self) -> str:
        return f"SpanStats({self.snapshot()})"
