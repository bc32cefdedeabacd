"""At-least-once offset tracking: which Kafka offsets are safe to commit.

A message is done when every trace it fed has been emitted and written (or dropped for a counted
reason). The committable offset of a partition is the first message that is not done, so a crash
never skips spans that were still open in the assembler or records still being judged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable


class MessageRef:
    """A hold on one consumed message; released once per acquire."""

    __slots__ = ("holds", "offset", "partition")

    def __init__(self, partition: Hashable, offset: int) -> None:
        self.partition = partition
        self.offset = offset
        self.holds = 1  # the consumer's own hold while the message is being decoded

    def acquire(self) -> None:
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1


class OffsetTracker:
    """Per-partition FIFO of in-flight messages; messages arrive in offset order per partition."""

    def __init__(self) -> None:
        self._pending: dict[Hashable, deque[MessageRef]] = {}
        self._next: dict[Hashable, int] = {}  # committable offset once everything before is done

    def track(self, partition: Hashable, offset: int) -> MessageRef:
        ref = MessageRef(partition, offset)
        self._pending.setdefault(partition, deque()).append(ref)
        return ref

    def committable(self) -> dict[Hashable, int]:
        """Per partition, the offset up to which every message is done (Kafka's next-to-read)."""
        for partition, queue in self._pending.items():
            while queue and queue[0].holds <= 0:
                self._next[partition] = queue.popleft().offset + 1
        return dict(self._next)

    def in_flight(self) -> int:
        return sum(len(q) for q in self._pending.values())

    def forget(self, partitions: list[Hashable]) -> None:
        """Drop state of partitions this consumer no longer owns; their new owner re-reads them."""
        for partition in partitions:
            self._pending.pop(partition, None)
            self._next.pop(partition, None)
