"""What every verdict exporter shares: a pending budget in items and bytes, and its counts.

Each exporter (the OTLP log events, the judgement span, the Phoenix annotations) admits an item
only while fewer than `max_items` items and `max_bytes` bytes are pending (queued, in flight or
waiting for a retry); past either it drops the new item and counts it. So a dead or hung receiver
costs bounded memory and counted drops, never back-pressure on the judge or the Kafka offsets.
Thread-safe: the OTel SDK's export thread settles what the event loop admitted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["OUTCOMES", "PendingBudget", "SinkStats", "attributes_size"]

# The `outcome` label values of ragmon_evaluation_events_total (a closed set).
OUTCOMES = ("exported", "failed", "dropped")


@dataclass(frozen=True, slots=True)
class SinkStats:
    """Item counts since start. ``queued - exported - failed`` is what is still pending."""

    queued: int = 0  # admitted
    exported: int = 0  # acknowledged by the receiver
    failed: int = 0  # given up: retries spent, a refusal, or aborted at shutdown
    dropped: int = 0  # refused at admission: the budget was full, or the sink was closed
    skipped_records: int = 0  # judgements not exported at all: invalid or mismatched ids

    def outcomes(self) -> tuple[int, int, int]:
        """The counts in `OUTCOMES` order."""
        return self.exported, self.failed, self.dropped


def attributes_size(attributes: Mapping[str, object] | None) -> int:
    """Roughly what `attributes` cost in memory and on the wire: keys and values as text. The
    same function prices an item when it is admitted and when it is settled."""
    if not attributes:
        return 0
    total = 0
    for key, value in attributes.items():
        total += len(key) + 8
        if isinstance(value, str):
            total += len(value.encode("utf-8", "replace"))
        elif isinstance(value, Sequence):
            total += sum(len(str(v)) + 2 for v in value)
        else:
            total += 8
    return total


class PendingBudget:
    """Admission and settlement of one exporter's items, by count and by bytes."""

    def __init__(self, sink: str, max_items: int, max_bytes: int) -> None:
        self.sink = sink
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._queued = self._exported = self._failed = self._dropped = self._skipped = 0
        self._bytes = 0
        self._dropping = False
        self._closed = False

    def admit(self, nbytes: int, log: logging.Logger) -> bool:
        """Room for one more item of `nbytes`? Counted either way; one warning per overflow
        episode, not per item."""
        with self._lock:
            pending = self._queued - self._exported - self._failed
            if not self._closed and pending < self._max_items and self._bytes + nbytes <= self._max_bytes:
                self._queued += 1
                self._bytes += nbytes
                self._dropping = False
                return True
            self._dropped += 1
            first, self._dropping = not self._dropping, True
            closed = self._closed
        if first:
            if closed:
                log.warning("%s: verdicts emitted after shutdown are dropped", self.sink)
            else:
                log.warning(
                    "%s: export queue full (%d items or %d bytes pending): dropping",
                    self.sink,
                    self._max_items,
                    self._max_bytes,
                )
        return False

    def settle(self, sizes: Iterable[int], *, ok: bool) -> None:
        """Items that left the queue: acknowledged (`ok`) or given up."""
        sizes = list(sizes)
        with self._lock:
            if ok:
                self._exported += len(sizes)
            else:
                self._failed += len(sizes)
            self._bytes = max(0, self._bytes - sum(sizes))

    def skipped(self) -> None:
        with self._lock:
            self._skipped += 1

    def close(self) -> bool:
        """No more admissions; False if already closed."""
        with self._lock:
            was, self._closed = self._closed, True
        return not was

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    @property
    def pending_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def stats(self) -> SinkStats:
        with self._lock:
            return SinkStats(self._queued, self._exported, self._failed, self._dropped, self._skipped)
