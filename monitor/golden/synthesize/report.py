"""What a synthesis kept and dropped, per query type and reason (`SynthesisReport`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from monitor.golden.schema import GoldenRow
from monitor.golden.synthesize.corpus import CorpusRead
from monitor.golden.synthesize.filters import Rejection
from monitor.golden.synthesize.rows import golden_row
from monitor.golden.synthesize.tasks import REASONS, Proposal, Task


@dataclass(frozen=True, slots=True)
class Drop:
    """A proposal dropped: the first filter it failed (`reason`) and why."""

    query_type: str
    reason: str
    query: str
    chunk_ids: tuple[str, ...]
    detail: str

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "query_type": self.query_type,
            "reason": self.reason,
            "query": self.query,
            "chunk_ids": list(self.chunk_ids),
            "detail": self.detail,
        }


@dataclass(slots=True)
class TypeCounts:
    """One query type's rows: wanted, planned (tasks), generated, kept and dropped by reason."""

    wanted: int
    planned: int
    generated: int = 0
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "wanted": self.wanted,
            "planned": self.planned,
            "generated": self.generated,
            "kept": self.kept,
            "dropped": dict(self.dropped),
        }


@dataclass(slots=True)
class SynthesisReport:
    """What a synthesis kept and dropped, per type and reason; `cost` is set by the caller."""

    generator: str
    target: str
    k: int
    by_type: dict[str, TypeCounts]
    rows: list[GoldenRow] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    cost: dict[str, Any] | None = None

    @property
    def generated(self) -> int:
        return sum(t.generated for t in self.by_type.values())

    @property
    def kept(self) -> int:
        return len(self.rows)

    @property
    def dropped(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for t in self.by_type.values():
            total.update(t.dropped)
        return total

    def dropped_by_reason(self) -> dict[str, int]:
        """The drops per reason, in the order the filters check them, reasons with none left out."""
        dropped = self.dropped
        return {r: dropped[r] for r in REASONS if dropped[r]}

    def drop(self, task: Task, why: Rejection) -> None:
        self.by_type[task.query_type].dropped[why.reason] += 1
        chunk_ids = tuple(c.id for c in task.chunks)
        self.drops.append(Drop(task.query_type, why.reason, why.query, chunk_ids, why.detail))

    def keep(self, task: Task, p: Proposal) -> None:
        self.rows.append(golden_row(task, p))
        self.by_type[task.query_type].kept += 1

    def to_json_dict(self, corpus: CorpusRead | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "generator": self.generator,
            "target": self.target,
            "k": self.k,
            "generated": self.generated,
            "kept": self.kept,
            "dropped": self.dropped_by_reason(),
            "by_type": {t: c.to_json_dict() for t, c in self.by_type.items()},
            "drops": [d.to_json_dict() for d in self.drops],
        }
        if corpus is not None:
            out["corpus"] = corpus.to_json_dict()
        if self.cost is not None:
            out["cost"] = self.cost
        return out
