"""The review session without the screen: which record is shown, the labels so far, saves, undo,
and adding a record to the golden set. The terminal UI (`monitor.review.app`) only draws it and
maps keys to its methods, so every rule here holds whatever the front end."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from monitor.contracts.results import ChunkLine, ReviewLine
from monitor.golden.production import GoldenAdd, ProductionRowError, append_production_row, production_row
from monitor.plumbing.errors import plural
from monitor.plumbing.files import locked, write_atomic
from monitor.review.labels import ClaimLabel, Labelling, LabelsFile
from monitor.review.queue import QueueRead

CHUNK_KEYS = 10  # the number keys 1-9, 0: one page of chunks


@dataclass
class _Step:
    """One undoable step: the record it was taken on and its labels before it."""

    kind: Literal["edit", "save", "skip", "golden"]
    index: int
    before: Labelling
    selected: int
    page: int  # the ten chunks the number keys were on
    golden: GoldenAdd | None = None  # a golden add: the file before and after it


class ReviewSession:
    """The queue, the labels file and the reviewer's position in the queue."""

    def __init__(
        self,
        queue: QueueRead,
        labels: LabelsFile,
        *,
        golden: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.queue = queue
        self.labels = labels
        self.golden = golden
        self._clock = clock
        self.done, self.labels_bad = labels.labelled()
        self.done_before = sum(1 for line in queue.lines if _key(line) in self.done)
        self.index: int | None = None
        self.current: Labelling | None = None
        self.selected = 0  # the claim the claim keys act on
        self.page = 0  # the ten chunks the number keys act on: 0 for chunks 1-10, 1 for 11-20, ...
        self.golden_added: set[str] = set()
        self._history: list[_Step] = []
        self.advance(start=0)

    # -- position ---------------------------------------------------------------------------------

    @property
    def line(self) -> ReviewLine | None:
        return None if self.index is None else self.queue.lines[self.index]

    @property
    def total(self) -> int:
        return len(self.queue.lines)

    @property
    def labelled(self) -> int:
        return sum(1 for line in self.queue.lines if _key(line) in self.done)

    def advance(self, start: int | None = None) -> None:
        """Show the first unlabelled record from `start` (default: after the current one), wrapping
        round to the ones skipped; none left: no record shown."""
        n = self.total
        first = (self.index + 1 if self.index is not None else 0) if start is None else start
        for step in range(n):
            i = (first + step) % n
            if _key(self.queue.lines[i]) not in self.done:
                self._show(i, Labelling.start(self.queue.lines[i]))
                return
        self.index, self.current = None, None

    def more_arrived(self) -> None:
        """New queue lines were added (the topic): show one when none is shown."""
        if self.index is None:
            self.advance(start=0)

    def _show(self, index: int, labelling: Labelling, selected: int = 0, page: int = 0) -> None:
        self.index, self.current, self.selected, self.page = index, labelling, selected, page

    # -- labelling --------------------------------------------------------------------------------

    def _edit(self) -> Labelling:
        assert self.current is not None and self.index is not None
        self._history.append(_Step("edit", self.index, self.current.copy(), self.selected, self.page))
        return self.current

    def select(self, delta: int) -> None:
        if self.current and self.current.claims:
            self.selected = max(0, min(len(self.current.claims) - 1, self.selected + delta))

    def mark_claim(self, label: ClaimLabel) -> None:
        """Label the selected claim, then select the next one."""
        if self.current is None or not self.current.claims:
            return
        self._edit().claims[self.selected] = label
        self.select(+1)

    def toggle_answerable(self) -> None:
        if self.current is not None:
            cur = self._edit()
            cur.answerable = cur.answerable is not True

    def toggle_refusal_warranted(self) -> None:
        if self.current is not None:
            cur = self._edit()
            cur.refusal_warranted = not cur.refusal_warranted_value

    def toggle_admits(self) -> None:
        if self.current is not None:
            cur = self._edit()
            cur.answer_admits_uncertainty = not cur.answer_admits_uncertainty

    @property
    def chunk_count(self) -> int:
        return 0 if self.line is None else len(chunks_of(self.line))

    def page_range(self) -> tuple[int, int]:
        """The ranks (1-based, inclusive) of the chunks the number keys are on; (0, 0): none."""
        return page_range(self.page, self.chunk_count)

    def turn_page(self, delta: int) -> str:
        """Move the number keys to the next (+1) or previous (-1) ten chunks; what they are on now,
        or why they did not move, for the status line."""
        n = self.chunk_count
        page = self.page + delta
        if page < 0:
            return "1-0 are on the first chunks already"
        if page * CHUNK_KEYS >= n:
            return f"no more chunks: this record has {n}"
        self.page = page
        first, last = self.page_range()
        return f"1-0: chunks {first}-{last} of {n}"

    def toggle_chunk(self, key: int) -> str | None:
        """Mark the chunk on number key `key` (0 for key 1, ..., 9 for key 0; on the ten chunks of
        the page) relevant or not; its id, None if no chunk with an id is there."""
        line = self.line
        if self.current is None or line is None:
            return None
        chunks = chunks_of(line)
        position = self.page * CHUNK_KEYS + key
        if position >= len(chunks) or not chunks[position].id:
            return None
        cid = str(chunks[position].id)
        cur = self._edit()
        if cid in cur.relevant:
            cur.relevant.remove(cid)
        else:
            cur.relevant.append(cid)
        return cid

    def set_note(self, text: str) -> None:
        if self.current is not None:
            self._edit().note = text

    def set_reference(self, text: str) -> None:
        if self.current is not None:
            self._edit().reference_answer = text

    # -- saving, skipping, undo -------------------------------------------------------------------

    def save(self) -> str:
        """Write the record's labels and show the next record; what happened, for the status line."""
        line, cur = self.line, self.current
        if line is None or cur is None or self.index is None:
            return "nothing to save"
        missing = cur.missing()
        if missing:
            return "still to label: " + "; ".join(missing)
        try:
            self.labels.append(cur.to_json_dict(line, self._clock()))
        except OSError as exc:
            return f"error: cannot write {self.labels.path}: {exc.strerror or exc}"
        self._history.append(_Step("save", self.index, cur.copy(), self.selected, self.page))
        self.done.add(_key(line))
        self.advance()
        return f"saved {line.trace_id} ({self.labelled} of {self.total} labelled)"

    def skip(self) -> str:
        """Leave the record unlabelled for now (it comes round again, and after a restart)."""
        if self.index is None or self.current is None:
            return "nothing to skip"
        self._history.append(_Step("skip", self.index, self.current.copy(), self.selected, self.page))
        self.advance()
        return "skipped"

    def undo(self) -> str:
        """Take back the last step: a label, a skip, a save (its line is cut from the file) or a
        golden add (the golden file as it was, if nobody changed it since)."""
        if not self._history:
            return "nothing to undo"
        step = self._history.pop()
        line = self.queue.lines[step.index]
        if step.golden is not None:
            return self._undo_golden(step, line)
        if step.kind == "save":
            try:
                self.labels.undo()
            except OSError as exc:
                self._history.append(step)
                return f"error: cannot undo in {self.labels.path}: {exc.strerror or exc}"
            self.done.discard(_key(line))
            self._show(step.index, step.before, step.selected, step.page)
            return f"unsaved {line.trace_id}: its line is taken out of {self.labels.path}"
        self._show(step.index, step.before, step.selected, step.page)
        return "undone" if step.kind == "edit" else "back to the skipped record"

    # -- the golden set ---------------------------------------------------------------------------

    def add_to_golden(self) -> tuple[bool, str]:
        """The record as a golden row (`golden add`'s code) with the reviewer's relevant chunks and
        reference answer: (added, what happened). Never raises: every failure is a message."""
        line, cur = self.line, self.current
        if line is None or cur is None or self.index is None:
            return False, "no record shown"
        if self.golden is None:
            return False, "no golden file: start with --golden FILE"
        if cur.answerable is None:
            return False, "mark answerable (a) first: an unanswerable row expects a refusal"
        try:
            row, notes = production_row(
                line,
                relevant_chunk_ids=cur.relevant,
                reference_answer=cur.reference(line),
                answerable=cur.answerable,
            )
            added = append_production_row(self.golden, row)
        except ProductionRowError as exc:
            details = "; ".join(str(issue) for issue in exc.errors[:3])
            return False, self._short(f"golden: {exc}" + (f" ({details})" if details else ""))
        except Exception as exc:  # a UI never dies of a row it could not build: say why
            return False, self._short(f"golden: {type(exc).__name__}: {exc}")
        self._history.append(_Step("golden", self.index, cur.copy(), self.selected, self.page, added))
        self.golden_added.add(_key(line))
        extra = [*notes, *(f"content controls: {c}" for c in row.content_controls or ())]
        tail = f"; {'; '.join(extra)}" if extra else ""
        return True, self._short(
            f"golden: row {row.id!r} added to {self.golden} ({plural(len(added.check.rows), 'row')} OK){tail}"
        )

    def _undo_golden(self, step: _Step, line: ReviewLine) -> str:
        """The golden file back to its bytes before the add (removed if the add created it), only
        if it still holds what the add wrote: an edit made since (by hand, another reviewer) is
        never lost. Never raises: every failure is a message."""
        assert step.golden is not None and self.golden is not None
        golden = self.golden
        self._show(step.index, step.before, step.selected, step.page)
        try:
            with locked(golden):  # as `golden add` writes: a concurrent add is never undone away
                return self._undo_golden_locked(step, line, step.golden, golden)
        except OSError as exc:
            self._history.append(step)
            return self._short(f"error: cannot lock {golden}: {exc.strerror or exc}; not undone")

    def _undo_golden_locked(self, step: _Step, line: ReviewLine, added: GoldenAdd, golden: Path) -> str:
        try:
            now: bytes | None = golden.read_bytes()
        except FileNotFoundError:
            now = None
        except OSError as exc:
            self._history.append(step)
            return self._short(f"error: cannot read {golden}: {exc.strerror or exc}; not undone")
        if now != added.after:  # changed: the row stays, and so does its mark; removed: neither
            if now is None:
                self.golden_added.discard(_key(line))
            how = "removed" if now is None else "changed"
            return self._short(
                f"error: {golden} was {how} since the add, so it is left as it is (add not undone)"
            )
        try:
            if added.before is None:
                golden.unlink()
            else:
                write_atomic(golden, added.before)
        except OSError as exc:
            self._history.append(step)
            return self._short(f"error: cannot undo the add in {golden}: {exc.strerror or exc}")
        self.golden_added.discard(_key(line))
        if added.before is None:
            return self._short(f"golden: add undone, {golden} removed (the add had created it)")
        return self._short(f"golden: add undone, {golden} as it was before")

    def _short(self, message: str) -> str:
        """A message for two lines of a narrow terminal: the golden file by its name only."""
        return message if self.golden is None else message.replace(str(self.golden), self.golden.name)


def page_range(page: int, count: int) -> tuple[int, int]:
    """The ranks (1-based, inclusive) of the chunks on `page` of `count`; (0, 0): none."""
    first = page * CHUNK_KEYS + 1
    last = min(first + CHUNK_KEYS - 1, count)
    return (first, last) if last >= first else (0, 0)


def chunks_of(line: ReviewLine) -> list[ChunkLine]:
    """The record's chunks in rank order, as numbered on the screen."""
    return [c for c in line.chunks or () if c is not None]


def _key(line: ReviewLine) -> str:
    return (line.trace_id or "").lower()
