"""What a reviewer says about one queued record, and the labels file it goes to.

One JSON line per labelled record, in the format `rag-monitor calibrate` reads
(`monitor.judge.calibrate`): `record` (the RagRecord fields), `labels` and `reviewed_at`; the rest
is for people and the calibration's weighting:

- `labels.faithful`: one boolean per claim *of the judge's claim split*, in order (supported or
  not): per-claim agreement with the judge. Absent when the judge split the answer into no claims.
- `labels.answerable`: whether the retrieved context could answer the question.
- `labels.hallucinated`: derived, the judge's own definition applied to the reviewer's labels: the
  context could not answer (`answerable` false) and the answer did not admit it (it neither
  refused nor hedged: `answer_admits_uncertainty` false). The reviewer sets the latter (its
  default is the judge's reading of the answer, shown as such), so a reviewer never has to label
  the same thing twice and `hallucinated` cannot contradict the other two labels.
- `claims`: `[{text, label, judge}]`, the reviewer's label (`supported | contradicted |
  not_in_context`) next to the judge's verdict;
- `refusal_warranted` (default: not answerable, unless the reviewer said otherwise),
  `answer_admits_uncertainty`, `relevant_chunk_ids`, `note`;
- `trace_id`, and the queue line's `review` object (`reasons`, `uniform`, `weight`): calibration
  weights the uniform share by it and leaves the rest out of unbiased estimates.

The file is append-only; the last line written in a session can be taken back (undo), which
truncates the file to where that line started.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from monitor.contracts.results import ReviewLine

# The RagRecord fields of a results line (`RagRecord.to_json_dict`): the record calibrate re-judges.
RECORD_FIELDS = (
    "trace_id", "span_id", "service", "query", "query_type", "chunks", "answer", "model",
    "start", "end", "replay", "release",
)  # fmt: skip


class ClaimLabel(StrEnum):
    SUPPORTED = "supported"
    CONTRADICTED = "contradicted"
    NOT_IN_CONTEXT = "not_in_context"


@dataclass
class Labelling:
    """The reviewer's labels of one record so far (the UI copies it before each change: undo)."""

    claims: list[ClaimLabel | None]
    answer_admits_uncertainty: bool
    answerable: bool | None = None
    refusal_warranted: bool | None = None  # None: follows `answerable`
    note: str = ""
    relevant: list[str] = field(default_factory=list)  # chunk ids, in the order marked
    reference_answer: str | None = None  # None: the default (`default_reference`)

    @classmethod
    def start(cls, line: ReviewLine) -> Labelling:
        """Nothing labelled yet; whether the answer admits uncertainty starts at the judge's reading."""
        admits = line.answer_admits_uncertainty
        if admits is None:
            admits = line.refusal
        return cls(claims=[None] * len(line.claims or ()), answer_admits_uncertainty=bool(admits))

    def copy(self) -> Labelling:
        return Labelling(
            list(self.claims), self.answer_admits_uncertainty, self.answerable, self.refusal_warranted,
            self.note, list(self.relevant), self.reference_answer,
        )  # fmt: skip

    @property
    def refusal_warranted_value(self) -> bool | None:
        if self.refusal_warranted is not None:
            return self.refusal_warranted
        return None if self.answerable is None else not self.answerable

    @property
    def hallucinated(self) -> bool | None:
        """Not answerable from the context, and the answer did not admit it (module docstring)."""
        if self.answerable is None:
            return None
        return not self.answerable and not self.answer_admits_uncertainty

    def missing(self) -> list[str]:
        """What must still be labelled before the record can be saved."""
        out = []
        unlabelled = [str(i + 1) for i, c in enumerate(self.claims) if c is None]
        if unlabelled:
            out.append(f"claim {', '.join(unlabelled)}")
        if self.answerable is None:
            out.append("answerable")
        return out

    def default_reference(self, line: ReviewLine) -> str:
        """The answer when every claim is labelled supported and the question answerable, else ''."""
        if (
            self.answerable is not False
            and self.claims
            and all(c == ClaimLabel.SUPPORTED for c in self.claims)
        ):
            return line.answer or ""
        return ""

    def reference(self, line: ReviewLine) -> str:
        return self.default_reference(line) if self.reference_answer is None else self.reference_answer

    def to_json_dict(self, line: ReviewLine, reviewed_at: float) -> dict[str, Any]:
        """The labels line of the record (module docstring)."""
        labels: dict[str, Any] = {}
        if self.claims:
            labels["faithful"] = [c == ClaimLabel.SUPPORTED for c in self.claims]
        labels["hallucinated"] = self.hallucinated
        labels["answerable"] = self.answerable
        doc = line.model_dump(mode="json", include=set(RECORD_FIELDS), exclude_none=True)
        judge_claims = line.claims or []
        out: dict[str, Any] = {
            "trace_id": line.trace_id,
            "record": doc,
            "labels": labels,
            "claims": [
                {"text": c.text, "label": None if label is None else str(label), "judge": c.verdict}
                for c, label in zip(judge_claims, self.claims, strict=True)
            ],
            "refusal_warranted": self.refusal_warranted_value,
            "answer_admits_uncertainty": self.answer_admits_uncertainty,
            "relevant_chunk_ids": list(self.relevant),
            "note": self.note,
            "review": None if line.review is None else line.review.model_dump(mode="json", exclude_none=True),
            "judge": None if line.judge is None else line.judge.model_dump(mode="json", exclude_none=True),
            "reviewed_at": reviewed_at,
        }
        return out


class LabelsFile:
    """The labels file: the trace ids already labelled (resume), appends, and undo of this session's
    appends (each remembered by the offset it started at)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._starts: list[tuple[int, str]] = []  # (offset before the append, trace id)

    def labelled(self) -> tuple[set[str], int]:
        """Trace ids with a labels line already (lower case), and how many lines could not be read."""
        done: set[str] = set()
        bad = 0
        if not self.path.exists():
            return done, bad
        with self.path.open(encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except ValueError:
                    bad += 1
                    continue
                trace = _trace_of(obj)
                if trace is None:
                    bad += 1
                else:
                    done.add(trace.lower())
        return done, bad

    def append(self, doc: dict[str, Any]) -> None:
        """One line, flushed to disk before returning (a crash after a save keeps it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = (json.dumps(doc, ensure_ascii=False) + "\n").encode()
        with self.path.open("ab") as fh:
            start = fh.tell()
            if start > 0 and not _ends_with_newline(self.path, start):
                data = b"\n" + data
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        self._starts.append((start, str(doc.get("trace_id") or "")))

    @property
    def can_undo(self) -> bool:
        return bool(self._starts)

    def undo(self) -> str:
        """Take back this session's last line: the file is cut where it started. Its trace id."""
        start, trace = self._starts.pop()
        with self.path.open("r+b") as fh:
            fh.truncate(start)
            fh.flush()
            os.fsync(fh.fileno())
        return trace


def _ends_with_newline(path: Path, size: int) -> bool:
    with path.open("rb") as fh:
        fh.seek(size - 1)
        return fh.read(1) == b"\n"


def _trace_of(obj: Any) -> str | None:
    """A labels line's trace id: top level, else its record's (hand-made files may have either)."""
    if not isinstance(obj, dict):
        return None
    for holder in (obj, obj.get("record")):
        if isinstance(holder, dict) and isinstance(holder.get("trace_id"), str) and holder["trace_id"]:
            return str(holder["trace_id"])
    return None
