"""Whether a stage is making progress: what `/readyz`, `/healthz` and `ragmon_stage_stalled` say.

Broker contact alone says nothing of a stage stuck on a produce that never completes or a loop
blocked by a judge: it still holds its partitions, and silence on the quality dashboards would
look like health. So each stage marks its progress (input consumed, a send or a write completed)
and whether work is waiting (lag, queued output). Both are plain attributes, set on the event loop
and read on the HTTP server's thread: a loop that is blocked stops marking, and the reader, which
does not need the loop, sees it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class Progress:
    """One part of a stage (its input, or its output): when it last moved, and whether anything
    waits for it. A part with nothing waiting is idle, never stalled."""

    part: str  # for the readiness text: "input", "samples", "writer"...
    moved_at: float = field(default_factory=time.monotonic)
    waiting: bool = False

    def moved(self) -> None:
        self.moved_at = time.monotonic()

    def wait(self, waiting: bool) -> None:
        """Work is (still) waiting. Waiting that starts restarts the clock: what was idle did
        not stall."""
        if waiting and not self.waiting:
            self.moved_at = time.monotonic()
        self.waiting = waiting

    def stalled_for(self, now: float) -> float:
        return now - self.moved_at if self.waiting else 0.0


@dataclass(frozen=True, slots=True)
class StageProgress:
    """A stage's parts; stalled for as long as its most stalled part."""

    stage: str
    parts: tuple[Progress, ...]

    def stalled(self, now: float) -> tuple[float, str]:
        """Seconds stalled (0: making progress or idle) and the part that is."""
        worst = max(self.parts, key=lambda p: p.stalled_for(now))
        return worst.stalled_for(now), worst.part
