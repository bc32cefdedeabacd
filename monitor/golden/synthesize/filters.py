"""The filters a proposal passes to be kept, in order (the package docstring): 1–5 on the proposal
and the corpus (`Filters.check`), 6 against the target's retrieval (`Filters.retrieval`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from monitor.golden.schema import GoldenRow
from monitor.golden.synthesize.corpus import SourceChunk
from monitor.golden.synthesize.tasks import (
    ANSWER_IN_CORPUS,
    ANSWER_IN_QUESTION,
    ANSWER_IN_RETRIEVAL,
    ANSWER_NOT_IN_SOURCE,
    DUPLICATE,
    MALFORMED,
    MAX_QUESTION_CHARS,
    NOT_RETRIEVED,
    TARGET_ERROR,
    UNANSWERABLE,
    Failure,
    Proposal,
    Task,
)
from monitor.golden.synthesize.text import contains, content_words, jaccard, phrase, words
from monitor.golden.targets import Target, TargetError

DUPLICATE_OVERLAP = 0.8  # Jaccard of content words at which two questions are one


@dataclass(frozen=True)
class Key:
    """What a question is compared by for duplicates: its content words and its `phrase`."""

    words: frozenset[str]
    exact: str

    @classmethod
    def of(cls, query: str) -> Key:
        return cls(content_words(query), phrase(query))


@dataclass(frozen=True, slots=True)
class Rejection:
    """The first filter a proposal failed (`reason`), its question and why."""

    reason: str
    query: str
    detail: str


class Filters:
    """The filters of one run, and the questions it has taken (kept, pending or existing): a
    question like one of them is a duplicate."""

    def __init__(
        self, chunks: Sequence[SourceChunk], target: Target, k: int, existing: Iterable[GoldenRow]
    ) -> None:
        self.target = target
        self.k = k
        self.corpus = "\n".join(phrase(c.text) for c in chunks)
        self.taken: list[frozenset[str]] = []
        self.taken_exact: set[str] = set()
        for r in existing:
            self.take(Key.of(r.query))

    def take(self, key: Key) -> None:
        """Count `key`'s question as taken: later proposals like it are duplicates."""
        self.taken.append(key.words)
        self.taken_exact.add(key.exact)

    def release(self, key: Key) -> None:
        """Undo `take(key)`: a later rewording may pass where this question failed."""
        self.taken.remove(key.words)
        self.taken_exact.discard(key.exact)

    def is_taken(self, key: Key) -> bool:
        return key.exact in self.taken_exact or any(
            jaccard(key.words, t) >= DUPLICATE_OVERLAP for t in self.taken
        )

    def check(self, task: Task, p: Proposal | Failure) -> Key | Rejection:
        """Filters 1–5 (no target involved): the first `p` fails, or its question's key, now taken
        (`release` it if the target drops `p`)."""
        if isinstance(p, Failure):
            return Rejection(p.reason, "", p.detail)
        problem = _malformed(task, p)
        if problem:
            return Rejection(MALFORMED, p.query, problem)
        key = Key.of(p.query)
        if self.is_taken(key):
            return Rejection(DUPLICATE, p.query, "same question as a kept or existing row")
        rejected = _unsourced(task, p, key) if task.query_type != UNANSWERABLE else self._in_corpus(p)
        if rejected is not None:
            return rejected
        self.take(key)
        return key

    def _in_corpus(self, p: Proposal) -> Rejection | None:
        """Filter 5 (an unanswerable row): what it asks for is in the corpus after all."""
        if contains(self.corpus, phrase(p.missing)):
            return Rejection(ANSWER_IN_CORPUS, p.query, f"the corpus mentions {p.missing!r}")
        return None

    async def retrieval(self, task: Task, p: Proposal) -> Rejection | None:
        """Filter 6 against the target, or None to keep."""
        try:
            response = await self.target.ask(
                row_id="synthetic", query=p.query, query_type=task.query_type, k=self.k
            )
        except TargetError as exc:
            return Rejection(TARGET_ERROR, p.query, str(exc)[:300])
        ids = [c.id for c in response.chunks[: self.k]]
        if task.query_type == UNANSWERABLE:
            missing = phrase(p.missing)
            holder = next(
                (c.id for c in response.chunks if c.content and contains(phrase(c.content), missing)), None
            )
            if holder:
                return Rejection(
                    ANSWER_IN_RETRIEVAL, p.query, f"retrieved chunk {holder} mentions {p.missing!r}"
                )
            return None
        absent = [c.id for c in task.chunks if c.id not in ids]
        if absent:
            return Rejection(
                NOT_RETRIEVED, p.query, f"{', '.join(absent)} not in the target's top {self.k}: {ids}"
            )
        return None


def _malformed(task: Task, p: Proposal) -> str:
    """Filter 1: what makes the proposal unusable ("" when nothing does)."""
    answerable = task.query_type != UNANSWERABLE
    if not p.query.strip():
        return "empty question"
    if len(p.query) > MAX_QUESTION_CHARS:
        return f"question over {MAX_QUESTION_CHARS} characters"
    if answerable and not p.reference_answer.strip():
        return "no reference answer"
    if answerable and not p.evidence:
        return "no evidence quoted"
    if not answerable and not words(p.missing):
        return "no 'missing' (what the corpus does not hold)"
    return ""


def _unsourced(task: Task, p: Proposal, key: Key) -> Rejection | None:
    """Filters 3 and 4 (an answerable row): the question gives its answer away, or an evidence
    quote (or an exact-match answer) is not in the source chunks."""
    if contains(key.exact, phrase(p.reference_answer)):
        return Rejection(ANSWER_IN_QUESTION, p.query, f"answer {p.reference_answer!r}")
    sources = [phrase(c.text) for c in task.chunks]
    unsourced = [q for q in p.evidence if not any(contains(s, phrase(q)) for s in sources)]
    if task.query_type == "exact_match" and not any(contains(s, phrase(p.reference_answer)) for s in sources):
        unsourced.insert(0, p.reference_answer)
    if unsourced:
        return Rejection(ANSWER_NOT_IN_SOURCE, p.query, f"not in the source chunks: {unsourced[0][:200]!r}")
    return None
