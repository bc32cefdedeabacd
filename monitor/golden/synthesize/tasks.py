"""What generators are given (`Task`) and give back (`Proposal`, `Failure`), the `Generator`
interface, and the drop reasons every run reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from monitor.golden.cost import CostActual, CostEstimate
from monitor.golden.synthesize.corpus import SourceChunk

SYNTHETIC = "synthetic"  # the `source` of every generated row
UNANSWERABLE = "out_of_corpus"  # the query type whose rows expect a refusal

MALFORMED = "malformed"
BACKEND_ERROR = "backend_error"
DUPLICATE = "duplicate"
ANSWER_IN_QUESTION = "answer_in_question"
ANSWER_NOT_IN_SOURCE = "answer_not_in_source"
ANSWER_IN_CORPUS = "answer_in_corpus"
TARGET_ERROR = "target_error"
NOT_RETRIEVED = "not_retrieved"
ANSWER_IN_RETRIEVAL = "answer_in_retrieval"
REASONS = (  # a dropped proposal's reasons, in the order the filters check them
    MALFORMED,
    BACKEND_ERROR,
    DUPLICATE,
    ANSWER_IN_QUESTION,
    ANSWER_NOT_IN_SOURCE,
    ANSWER_IN_CORPUS,
    TARGET_ERROR,
    NOT_RETRIEVED,
    ANSWER_IN_RETRIEVAL,
)

MAX_QUESTION_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Task:
    """One question to write: of `query_type`, from `chunks` (two for comparison and multi-hop)."""

    query_type: str
    chunks: tuple[SourceChunk, ...]
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Proposal:
    """A generated question. `missing` (unanswerable rows only): what it asks for that the
    corpus does not hold — checked against the corpus and the target's retrieval."""

    query: str
    reference_answer: str = ""
    evidence: tuple[str, ...] = ()
    missing: str = ""


@dataclass(frozen=True, slots=True)
class Failure:
    """No usable proposal: `reason` is `malformed` or `backend_error`."""

    reason: str
    detail: str


class Generator(Protocol):
    """Proposes golden questions; never raises for a bad chunk or a failed call (a `Failure`)."""

    @property
    def name(self) -> str: ...

    @property
    def query_types(self) -> tuple[str, ...]:
        """The types it can write, in round-robin order."""
        ...

    def chunks_needed(self, query_type: str) -> int: ...

    def suitable(self, query_type: str, chunks: tuple[SourceChunk, ...]) -> bool:
        """Whether it can write a question of `query_type` from `chunks` (planning skips the rest)."""
        ...

    async def propose(self, task: Task) -> Proposal | Failure: ...

    def estimate(self, tasks: Sequence[Task]) -> CostEstimate | None:
        """What running `tasks` costs at most; None: nothing is billed."""
        ...

    def actual(self) -> CostActual | None:
        """What the calls so far were billed; None: nothing is billed."""
        ...

    async def aclose(self) -> None: ...
