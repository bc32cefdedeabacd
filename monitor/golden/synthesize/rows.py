"""What a kept proposal becomes: an ordinary golden row marked `source: synthetic` (`golden_row`),
written as JSONL (`write_rows`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from monitor.golden.schema import ChunkText, GoldenRow
from monitor.golden.synthesize.tasks import SYNTHETIC, UNANSWERABLE, Proposal, Task
from monitor.plumbing.files import write_atomic


def golden_row(task: Task, p: Proposal) -> GoldenRow:
    """The row, its id a digest of its type and question; an answerable row names its source
    chunks (with their text) and their licences."""
    answerable = task.query_type != UNANSWERABLE
    digest = hashlib.sha256(f"{task.query_type}\n{p.query}".encode()).hexdigest()[:12]
    licences = sorted({c.license for c in task.chunks if c.license})
    return GoldenRow(
        id=f"synthetic:{digest}",
        query=p.query,
        query_type=task.query_type,
        relevant_chunk_ids=[c.id for c in task.chunks] if answerable else [],
        relevant_chunks=[ChunkText(id=c.id, content=c.text) for c in task.chunks] if answerable else None,
        reference_answer=p.reference_answer if answerable else "",
        answerable=answerable,
        source=SYNTHETIC,
        license=" AND ".join(licences) or None,
    )


def write_rows(path: Path, rows: Sequence[GoldenRow]) -> None:
    """The rows as JSONL, written via a temporary file and renamed (never half a file)."""
    write_atomic(
        path,
        "".join(
            json.dumps(row.model_dump(mode="json", exclude_none=True), ensure_ascii=False) + "\n"
            for row in rows
        ),
    )
