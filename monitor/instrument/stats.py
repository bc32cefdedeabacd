"""Counters of what happened to the spans a service produced: the instrumentation's own health."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["SpanStats"]


@dataclass(slots=True)
class SpanStats:
    """Thread-safe span counters, shared by the processor and the exporter of one configuration.

    `exported`: acknowledged by the destination (Kafka ack, OTLP 2xx). `dropped`: never sent because
    a bounded queue was full or the exporter was shut down: the price of never blocking the service.
    `failed`: sent but not acknowledged (broker error, timeout, HTTP error).
    """

    exported: int = 0
    dropped: int = 0
    failed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, *, exported: int = 0, dropped: int = 0, failed: int = 0) -> None:
        with self._lock:
            self.exported += exported
            self.dropped += dropped
            self.failed += failed

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {"exported": self.exported, "dropped": self.dropped, "failed": self.failed}
