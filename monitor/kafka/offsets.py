"""At-least-once offset tracking: which Kafka offsets are safe to commit.

A message is done when every piece of work it fed has finished (a trace emitted and its sample
produced, a judgement written, a dead-letter copy acknowledged) or was dropped for a counted
reason. The committable offset of a partition is the first message that is not done, so a crash
never skips work that was still open.

Ownership is tracked per assignment *generation*: a partition revoked and assigned again starts a
new generation, and anything of an older one — a batch fetched before the revoke, a hold released
after it — can neither be tracked nor move the new generation's offsets. Committable offsets only
ever move forwards.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any, NamedTuple


class MessageRef:
    """A hold on one consumed message; released once per acquire.

    `traces` and `size` are the trace assembler's: the open traces holding spans of the message,
    and its bytes, charged to the assembler's byte bound once while any of them is open (chunk
    text left where it lies in the message keeps all of it alive)."""

    __slots__ = ("holds", "offset", "partition", "size", "traces")

    def __init__(self, partition: Hashable, offset: int) -> None:
        self.partition = partition
        self.offset = offset
        self.holds = 1  # the consumer's own hold while the message is being decoded
        self.traces = 0
        self.size = 0

    def acquire(self) -> None:
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1


def new_refs(partition: Hashable, messages: list[Any], last: int | None) -> list[MessageRef]:
    """Holds on the leading `messages` (anything with an `offset`) from `last` on (None: all), up
    to the first before it: a re-delivery of what is held or finished already. The ingest stage
    uses the compiled twin (`monitor/ingest/_accounting.c`), one MessageRef a message."""
    refs: list[MessageRef] = []
    for msg in messages:
        offset = msg.offset
        if last is not None and offset < last:
            break
        refs.append(MessageRef(partition, offset))
        last = offset + 1
    return refs


RefMaker = Callable[[Hashable, list[Any], int | None], list[MessageRef]]


class _At(NamedTuple):
    offset: int


class _Partition:
    __slots__ = ("generation", "next", "pending")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.pending: deque[MessageRef] = deque()
        self.next: int | None = None  # committable offset once everything before it is done


class OffsetTracker:
    """Per owned partition, the FIFO of in-flight messages (they arrive in offset order)."""

    def __init__(self, make_refs: RefMaker = new_refs) -> None:
        self._owned: dict[Hashable, _Partition] = {}
        self._generation = 0
        self._new_refs = make_refs

    def assign(self, partitions: Iterable[Hashable]) -> None:
        """Start tracking newly assigned partitions, each in a fresh generation."""
        for partition in partitions:
            self._generation += 1
            self._owned[partition] = _Partition(self._generation)

    def forget(self, partitions: Iterable[Hashable]) -> None:
        """Stop tracking revoked partitions: their new owner re-reads from the last commit."""
        for partition in partitions:
            self._owned.pop(partition, None)

    def generation(self, partition: Hashable) -> int | None:
        """The partition's current generation; None while it is not owned."""
        state = self._owned.get(partition)
        return None if state is None else state.generation

    def track(self, partition: Hashable, offset: int, generation: int | None = None) -> MessageRef | None:
        """A hold on a consumed message, or None when the partition is no longer owned in the
        given generation (the batch predates a rebalance: skip it, the owner re-reads it)."""
        refs = self.track_run(partition, [_At(offset)], generation)
        return refs[0] if refs else None

    def track_run(
        self, partition: Hashable, messages: list[Any], generation: int | None = None
    ) -> list[MessageRef]:
        """`track` for consecutive messages (with their `offset`) of one fetched batch: holds on
        the leading ones it would track, up to the first it would not (the caller stops there,
        as after `track`'s None). One ownership check for the run: nothing can be revoked in
        between."""
        state = self._owned.get(partition)
        if state is None or (generation is not None and generation != state.generation):
            return []
        pending = state.pending
        refs = self._new_refs(partition, messages, pending[-1].offset + 1 if pending else state.next)
        pending.extend(refs)
        return refs

    def committable(self) -> dict[Hashable, int]:
        """Per owned partition, the offset up to which every message is done (Kafka's next-to-read)."""
        out: dict[Hashable, int] = {}
        for partition, state in self._owned.items():
            queue = state.pending
            while queue and queue[0].holds <= 0:
                state.next = queue.popleft().offset + 1
            if state.next is not None:
                out[partition] = state.next
        return out

    def in_flight(self) -> int:
        return sum(len(s.pending) for s in self._owned.values())


def release_all(refs: Iterable[MessageRef]) -> None:
    """Release one hold on each (a finished trace's messages, a sample's sources)."""
    for ref in refs:
        ref.holds -= 1
