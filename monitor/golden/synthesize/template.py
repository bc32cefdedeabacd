"""`TemplateGenerator`: offline, deterministic questions for tests and air-gapped runs."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from monitor.golden.cost import CostActual, CostEstimate
from monitor.golden.synthesize.corpus import SourceChunk
from monitor.golden.synthesize.tasks import MALFORMED, UNANSWERABLE, Failure, Proposal, Task
from monitor.golden.synthesize.text import phrase

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_NUMBER = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w,])|(?<![\w.,])\d+(?:\.\d+)?(?![\w,])")
_YEAR = re.compile(r"(?<![\w.,])(1[5-9]\d\d|20\d\d)(?![\w,])")
_ENTITY = re.compile(r"(?<![\w'-])[A-Z][\w'-]+(?:\s+(?:of\s+|the\s+|de\s+)?[A-Z][\w'-]+)+")
_FIRST = ("Elsa", "Tomas", "Irena", "Odile", "Marek", "Sunniva", "Davor", "Ilse", "Anselm", "Priya")
_LAST = ("Varkonyi", "Teodorescu", "Haldane-Pryce", "Okonkwo-Lind", "Marvik", "Quell", "Ashdown", "Brevik")
_UNANSWERABLE_FORMS = (
    "What happened to {subject} in {year}?",
    "Who was responsible for {subject} in {year}?",
    "What did {person} say about {subject}?",
    "When did {person} first write about {subject}?",
)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if len(s.split()) >= 6]


def _cloze(sentence: str, span: str, width: int = 6) -> str:
    """`sentence` with `span` blanked, clipped to `width` words either side of the blank."""
    start = sentence.index(span)
    before = sentence[:start].split()[-width:]
    after = sentence[start + len(span) :].split()[:width]
    return " ".join([*before, "___", *after]).strip()


class TemplateGenerator:
    """Offline and deterministic (seeded per task): cloze questions whose answer is a span of the
    chunk — a number (`exact_match`), a multi-word name (`lookup`) — a `comparison` of the years of
    two chunks, and `out_of_corpus` questions on a chunk's subject about a year or a person the
    corpus never mentions. Stiff wording, honest labels: for tests and air-gapped runs."""

    name = "template"
    query_types = ("lookup", "exact_match", "comparison", UNANSWERABLE)

    def __init__(self, chunks: Sequence[SourceChunk]) -> None:
        corpus = "\n".join(phrase(c.text) for c in chunks)
        self._absent_years = [y for y in range(1800, 2100) if f" {y} " not in corpus]
        self._absent_people = [f"{a} {b}" for a in _FIRST for b in _LAST if phrase(f"{a} {b}") not in corpus]

    def chunks_needed(self, query_type: str) -> int:
        return 2 if query_type == "comparison" else 1

    def suitable(self, query_type: str, chunks: tuple[SourceChunk, ...]) -> bool:
        if query_type == "comparison":
            years = [self._spans("comparison", c) for c in chunks]
            titled = len(chunks) == 2 and all(c.title for c in chunks)
            return titled and any(a != b for a, _ in years[0] for b, _ in years[1])
        if query_type == UNANSWERABLE:
            return bool(chunks[0].title) and bool(self._absent_years or self._absent_people)
        return bool(self._spans(query_type, chunks[0]))

    @staticmethod
    def _spans(query_type: str, chunk: SourceChunk) -> list[tuple[str, str]]:
        """(answer span, its sentence) pairs a question of `query_type` can be made from."""
        out = []
        title = phrase(chunk.title)
        for sentence in _sentences(chunk.text):
            if query_type == "lookup":
                found = [m.group(0) for m in _ENTITY.finditer(sentence) if m.start() > 0]
                found = [e for e in found if phrase(e) not in title]
            elif query_type == "exact_match":
                found = [m.group(0) for m in _NUMBER.finditer(sentence)]
            elif query_type == "comparison":
                found = [m.group(0) for m in _YEAR.finditer(sentence)]
            else:
                found = []
            # A span that occurs twice would leave its answer in the cloze.
            out += [(s, sentence) for s in found if sentence.count(s) == 1]
        return out

    async def propose(self, task: Task) -> Proposal | Failure:
        rng = random.Random(f"{task.seed}:{task.query_type}:{':'.join(c.id for c in task.chunks)}")
        if task.query_type == UNANSWERABLE:
            return self._unanswerable(rng, task.chunks[0])
        if task.query_type == "comparison":
            return self._comparison(rng, task.chunks[0], task.chunks[1])
        return self._blank(rng, task.query_type, task.chunks[0])

    def _unanswerable(self, rng: random.Random, chunk: SourceChunk) -> Proposal:
        """On the chunk's subject, about a year or a person the corpus never mentions."""
        forms = [
            f
            for f in _UNANSWERABLE_FORMS
            if ("{year}" not in f or self._absent_years) and ("{person}" not in f or self._absent_people)
        ]
        form = rng.choice(forms)
        year = str(rng.choice(self._absent_years)) if "{year}" in form else ""
        person = rng.choice(self._absent_people) if "{person}" in form else ""
        return Proposal(form.format(subject=chunk.title, year=year, person=person), missing=year or person)

    def _comparison(self, rng: random.Random, first: SourceChunk, second: SourceChunk) -> Proposal | Failure:
        """Which of two facts, one a chunk, each with its year blanked, comes first in time."""
        pairs = [
            (a, b)
            for a in self._spans("comparison", first)
            for b in self._spans("comparison", second)
            if a[0] != b[0]
        ]
        if not pairs:
            return Failure(MALFORMED, "no two different years in the two chunks")
        (ya, sa), (yb, sb) = rng.choice(pairs)
        earlier, later = ((first, ya), (second, yb)) if int(ya) < int(yb) else ((second, yb), (first, ya))
        return Proposal(
            f'Which comes first in time: "{_cloze(sa, ya)}" ({first.title}) or '
            f'"{_cloze(sb, yb)}" ({second.title})?',
            f"{earlier[0].title}: {earlier[1]} (against {later[1]})",
            (sa, sb),
        )

    def _blank(self, rng: random.Random, qtype: str, chunk: SourceChunk) -> Proposal | Failure:
        """A sentence of the chunk with a name (`lookup`) or a number (`exact_match`) blanked."""
        spans = self._spans(qtype, chunk)
        if not spans:
            return Failure(MALFORMED, f"no span for a {qtype} question")
        span, sentence = rng.choice(spans)
        what = "number" if qtype == "exact_match" else "name"
        about = f'About "{chunk.title}": w' if chunk.title else "W"
        return Proposal(
            f'{about}hich {what} fills the blank in "{_cloze(sentence, span)}"?',
            span,
            (sentence,),
        )

    def estimate(self, tasks: Sequence[Task]) -> CostEstimate | None:
        return None

    def actual(self) -> CostActual | None:
        return None

    async def aclose(self) -> None:
        return None
