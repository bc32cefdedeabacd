"""A change event that triggers a golden replay out of schedule: a deploy, a corpus re-index, a
prompt or a model change.

`kind` is a closed set because it becomes the `kind` label of
`ragmon_golden_last_change_timestamp_seconds` (dashboards annotate it); `ref` is free text (a
version, a commit, an index name) and goes only to the report and the log, never to a label. An
unknown kind is an error rather than `other`: a typo in a CI job should fail loudly, not file every
deploy under `other`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

__all__ = ["CHANGE_KINDS", "Change", "ChangeKind", "parse_change"]

ChangeKind = Literal["deploy", "reindex", "prompt", "model", "other"]
CHANGE_KINDS: tuple[ChangeKind, ...] = get_args(ChangeKind)
MAX_REF = 200


@dataclass(frozen=True, slots=True)
class Change:
    kind: ChangeKind
    ref: str = ""
    at: float = field(default_factory=time.time)  # when it was received (Unix time)

    def __str__(self) -> str:
        return f"{self.kind}:{self.ref}" if self.ref else self.kind

    def to_json_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "ref": self.ref, "at": datetime.fromtimestamp(self.at, UTC).isoformat()}


def _kind(value: str) -> ChangeKind:
    for kind in CHANGE_KINDS:
        if value == kind:
            return kind
    raise ValueError(f"unknown change kind {value!r}: expected one of {', '.join(CHANGE_KINDS)}")


def parse_change(text: str | None = None, *, kind: str | None = None, ref: str | None = None) -> Change:
    """`deploy:v1.2.3` (or `kind`/`ref` given apart) → a Change; ValueError naming what is wrong.
    The ref keeps printable characters only (it ends up in logs) and at most 200 of them."""
    if text is not None:
        kind, _, ref = text.partition(":")
    value = (kind or "").strip().lower()
    ref = (ref or "").strip()
    if len(ref) > MAX_REF:
        raise ValueError(f"change ref is {len(ref)} characters long: at most {MAX_REF}")
    if not ref.isprintable():
        raise ValueError("change ref must be printable text (no control characters or newlines)")
    return Change(_kind(value), ref)
