"""The corpus a synthesis writes questions from: the chunk rows of a JSONL file, and what was
skipped in it and why (never a crash)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from monitor.golden.schema import Issue
from monitor.golden.synthesize.text import problems


class _ChunkIn(BaseModel):
    """A corpus line of kind "chunk" (monitor/data/corpus.jsonl's shape); other keys ignored."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    title: str = ""
    license: str | None = None


@dataclass(frozen=True, slots=True)
class SourceChunk:
    id: str
    title: str
    text: str
    license: str | None = None


@dataclass(slots=True)
class CorpusRead:
    """The chunks of a corpus file, and what was skipped in it and why (never a crash)."""

    chunks: list[SourceChunk] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> lines
    other_rows: int = 0  # rows of another kind (the corpus's questions): not chunks, not errors

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "chunks": len(self.chunks),
            "other_rows": self.other_rows,
            "skipped_lines": dict(self.skipped),
            "issues": [str(i) for i in self.issues[:50]],
        }

    def skip(self, n: int, reason: str, problem: str) -> None:
        """Line `n` skipped: counted under `reason`, and `problem` listed."""
        self.skipped[reason] += 1
        self.issues.append(Issue(f"line {n}", problem))


def read_corpus(path: Path) -> CorpusRead:
    """Chunk rows of a JSONL corpus (`{"kind": "chunk", "id", "text", "title"?, "license"?}`; rows
    without `kind` are taken as chunks). Broken lines are counted by reason and listed."""
    out = CorpusRead()
    seen: set[str] = set()
    text = path.read_text(encoding="utf-8", errors="replace")
    for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): JSON holds U+2028 raw
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            out.skip(n, "invalid_json", f"invalid JSON: {exc}")
            continue
        if not isinstance(data, dict):
            out.skip(n, "not_an_object", f"a row must be an object, got {type(data).__name__}")
            continue
        if data.get("kind", "chunk") != "chunk":
            out.other_rows += 1
            continue
        try:
            row = _ChunkIn.model_validate(data)
        except ValidationError as exc:
            out.skip(n, "bad_chunk", problems(exc))
            continue
        if row.id in seen:
            out.skip(n, "duplicate_id", f"duplicate chunk id {row.id!r}")
            continue
        seen.add(row.id)
        out.chunks.append(SourceChunk(row.id, row.title, row.text, row.license))
    return out
