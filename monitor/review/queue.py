"""Reading the review queue: `ReviewLine`s from a file (or a topic's messages), bad lines counted.

A queue line is keyed by its trace id: a line without one cannot be resumed or labelled twice-safe,
so it is counted as bad like a line that does not parse or has another `v`. The first line of a
trace wins (the judge stage deduplicates by trace; a file concatenated twice should not show a
record twice).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from monitor.contracts.results import ReviewLine, unreadable_reason

NO_TRACE_ID = "no trace id"


def parse_queue_line(raw: str | bytes) -> ReviewLine | str:
    """One queue line, or why it cannot be reviewed (a short reason: a count's key)."""
    try:
        line = ReviewLine.model_validate_json(raw)
    except ValidationError as exc:
        return unreadable_reason(exc)
    if not line.trace_id:
        return NO_TRACE_ID
    return line


@dataclass
class QueueRead:
    """The queue as read so far: reviewable lines in order, and bad lines by reason."""

    lines: list[ReviewLine] = field(default_factory=list)
    bad: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    _seen: set[str] = field(default_factory=set, repr=False)

    def add(self, raw: str | bytes) -> ReviewLine | None:
        """Take one raw line: the new reviewable line, or None (bad, blank or a trace seen before)."""
        if not raw.strip():
            return None
        parsed = parse_queue_line(raw)
        if isinstance(parsed, str):
            self.bad[parsed] += 1
            return None
        key = (parsed.trace_id or "").lower()
        if key in self._seen:
            self.duplicates += 1
            return None
        self._seen.add(key)
        self.lines.append(parsed)
        return parsed

    @property
    def bad_total(self) -> int:
        return sum(self.bad.values())


def read_queue(path: Path) -> QueueRead:
    """Every line of a queue file (OSError: the file itself cannot be read)."""
    queue = QueueRead()
    with path.open(encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            queue.add(raw)
    return queue
