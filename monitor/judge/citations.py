"""Citation accuracy: does each chunk an answer cites support what it is cited for?

Judge-agnostic: the judges give per-claim verdicts with their supporting chunk ids
(`monitor.contracts.model.Claim`); this module reads the answer's citation markers and checks each
against those verdicts, in code. No judge is asked anything more.

Markers understood (each may list several references, separated by ``,``, ``;`` or "and"):

- brackets: ``[1]``, ``[2, 3]``, ``[1-3]``, ``[^1]``, ``[doc-3]``, ``[chunk-id]``, ``[source: 2]``;
- parentheses with a keyword: ``(source: doc-3)``, ``(sources: 1, 2)``, ``(ref 4)``, ``(chunk 2)``;
- malformed: an unclosed ``[`` (``[``, ``[1`` at the end of the answer, ``France [2. Next``),
  counted as one unresolved citation, never an error.

A bracket that lists words rather than references (``[sic]``, ``[citation needed]``, a markdown
link's text) is not a marker: a reference has a digit or a separator (``-_.:/#``) in it, or is a
chunk id of the record.

References map to the record's chunks: a number is a 1-based rank (``[2]`` is the chunk at rank 2;
a number beyond the chunks is matched as an id, else unresolved); anything else is a chunk id,
matched exactly, else by a unique suffix on a separator (``doc-3`` finds ``corpus/doc-3``), else,
for ``doc-3`` / ``source 2`` / ``chunk-4`` forms, the number as a rank; ``1-3`` spans ranks 1 to 3.
What matches nothing (``[99]`` with five chunks, ``[doc-x]``) is `unresolved`.

Attachment: the answer (markers removed) is split into sentences; a marker belongs to the sentence
it sits in, and a marker right after a sentence's full stop (``France.[1]``, ``France. [1] Next``)
to the sentence it follows, the usual style. A claim belongs to the answer sentence(s) its text
comes from: the sentence that contains its text (the lexical judge's claims are the sentences), else
the sentence sharing most of its content words (an LLM judge's claims are "quoted or minimally
paraphrased"), plus any sentence wholly inside it.

Per citation (a cited chunk and the sentence it is attached to, counted once):

- `supported`: the cited chunk is among the supporting chunks of a claim of that sentence;
- `unsupported`: the sentence's claims are decided, and none rests on the cited chunk (they are
  supported by other chunks, or by none);
- `unresolved`: the reference names no chunk of the record;
- `unchecked`: nothing to check it against: the sentence has no decided claim (a refusal, the
  lexical judge's `uncertain`, a sentence the judge left out), or the judge never saw the chunk
  (no content captured, or cut by `max_chunks`).

Citation precision = supported / (supported + unsupported): among the citations that could be
checked, the share that point at a chunk which supports the claim. None when there is none, never
NaN. Citation recall (claims that cite no supporting chunk) is visible per claim (`cited`) but not
scored: an answer may rightly cite once per paragraph.

`without_citations` gives the record the judges see: the markers removed, so that ``[2]`` reads as
neither a number in a claim nor a word to cover; the results line keeps the answer as written.
`read_citations` gives that record and the parsed answer, which `check_citations` then takes as is.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from monitor.contracts.model import NOTE_NOT_JUDGED, Chunk, Claim, Judgement, RagRecord, Verdict
from monitor.judge.evidence import content_words, normalise
from monitor.judge.lexical import SENTENCE_END

__all__ = [
    "MAX_CITATIONS",
    "Citation",
    "CitationReport",
    "CitationVerdict",
    "CitedAnswer",
    "check_citations",
    "parse_citations",
    "read_citations",
    "resolve",
    "without_citations",
]

MAX_CITATIONS = 100  # per answer: what a results line lists (the counts stay exact up to it)
_MAX_RANGE = 10  # "[1-3]" spans ranks; a wider span is not a citation range
_ALIGNED = 0.5  # share of a claim's content words its sentence must hold


class CitationVerdict(StrEnum):
    """The `verdict` label of ragmon_citations_total: a closed set."""

    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    UNRESOLVED = "unresolved"
    UNCHECKED = "unchecked"


# -- parsing --------------------------------------------------------------------------------------

_ITEM = r"[A-Za-z0-9](?:[\w.:/#@+\-–]*\w)?"
_PREFIXED = r"(?:doc(?:ument)?|chunk|source|passage|ref(?:erence)?|context|result)s?\s+\d+"
_REF = rf"(?:{_PREFIXED}|{_ITEM})"
_LIST = rf"{_REF}(?:\s*(?:[,;]|\band\b)\s*{_REF})*"
_KEYWORD = r"(?:sources?|refs?|references?|citations?|cited?|see|chunks?|docs?|documents?|passages?)"
_BRACKET = rf"\[\^?\s*(?:{_KEYWORD}\s*[:#]?\s*)?(?P<b>{_LIST})\s*\]"
_PAREN = rf"\(\s*{_KEYWORD}\s*[:#]?\s*(?P<p>{_LIST})\s*\)"
_MARKER = re.compile(rf"{_BRACKET}|{_PAREN}", re.IGNORECASE)
# An unclosed bracket: at the end of the answer, or references then a sentence end.
_MALFORMED = re.compile(rf"\[\^?\s*(?:(?P<m>{_LIST})\s*[,;]?\s*(?=[.!?]?(?:\s|$))|$)", re.IGNORECASE)
_SPLIT_REFS = re.compile(r"\s*(?:[,;]|\band\b)\s*", re.IGNORECASE)
_CITATION_LIKE = re.compile(r"\d|[-_.:/#–]")
_PREFIX_NUMBER = re.compile(
    r"^(?:doc(?:ument)?|chunk|source|passage|ref(?:erence)?|context|result|src)s?[\s_\-#:]*(\d+)$",
    re.IGNORECASE,
)
_RANGE = re.compile(r"^(\d+)\s*[-–]\s*(\d+)$")
# The lexical judge's sentence ends, and a line break (a list item, a paragraph).
_SENTENCE_END = re.compile(SENTENCE_END.pattern + r"|\s*\n\s*")


@dataclass(frozen=True, slots=True)
class _Ref:
    text: str  # the reference as written ("2", "doc-3"), or the whole marker when malformed
    offset: int  # where its marker was, in the answer without markers
    malformed: bool = False


@dataclass(frozen=True, slots=True)
class CitedAnswer:
    """An answer read for citations: its text without markers, that text's sentences (start, end),
    and each reference with the sentence it is attached to."""

    text: str
    sentences: tuple[tuple[int, int], ...]
    refs: tuple[tuple[str, int, bool], ...]  # (reference, sentence index, malformed)

    def sentence(self, i: int) -> str:
        start, end = self.sentences[i]
        return self.text[start:end]


def _citation_like(ref: str, ids: frozenset[str]) -> bool:
    return ref in ids or _CITATION_LIKE.search(ref) is not None


def _markers(answer: str, ids: frozenset[str]) -> list[tuple[int, int, list[str], bool]]:
    """(start, end, references, malformed) of every marker, in order."""
    found: list[tuple[int, int, list[str], bool]] = []
    taken: list[tuple[int, int]] = []
    for m in _MARKER.finditer(answer):
        refs = [r for r in _SPLIT_REFS.split(m["b"] or m["p"]) if r]
        if refs and all(_citation_like(r, ids) for r in refs):
            found.append((m.start(), m.end(), refs, False))
            taken.append((m.start(), m.end()))
    for m in _MALFORMED.finditer(answer):
        if any(a <= m.start() < b for a, b in taken):
            continue
        listed = [r for r in _SPLIT_REFS.split(m["m"] or "") if r]
        if listed and not all(_citation_like(r, ids) for r in listed):
            continue
        found.append((m.start(), m.end(), [m.group().strip()], True))
    found.sort()
    return found


def _sentences(text: str) -> tuple[tuple[int, int], ...]:
    spans = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        if m.start() > start:
            spans.append((start, m.start()))
        start = m.end()
    if start < len(text) or not spans:
        spans.append((start, len(text)))
    return tuple(spans)


def parse_citations(answer: str, chunk_ids: Sequence[str] = ()) -> CitedAnswer:
    """The answer's markers removed (with the space before each), its sentences, and each
    reference attached to its sentence. `chunk_ids` only decides whether a word in brackets is a
    reference (an id of the record) or prose (``[sic]``)."""
    ids = frozenset(chunk_ids)
    parts: list[str] = []
    refs: list[_Ref] = []
    pos = length = 0
    spaced = False  # a space was removed before the last marker(s)

    def keep(text: str) -> None:
        nonlocal length, spaced
        if not text:
            return
        if spaced and not text[0].isspace() and text[0] not in ".,;:!?)]":
            parts.append(" ")  # "France [1]Berlin": a space stays between the words
            length += 1
        parts.append(text)
        length += len(text)
        spaced = False

    for start, end, listed, malformed in _markers(answer, ids):
        if start < pos:
            continue  # overlapping (a malformed bracket inside a marker): the first one stands
        before = answer[pos:start]
        kept = before.rstrip()
        keep(kept)
        spaced = spaced or kept != before or kept[-1:].isalnum()  # "Paris[1]is": two words
        refs.extend(_Ref(r, length, malformed) for r in listed)
        pos = end
    keep(answer[pos:])
    raw = "".join(parts)
    text = raw.strip()
    shift = len(raw) - len(raw.lstrip())
    spans = _sentences(text)
    attached = []
    for ref in refs[: 4 * MAX_CITATIONS]:
        at = max(0, ref.offset - shift)
        index = next((i for i, (_, end) in enumerate(spans) if at <= end), len(spans) - 1)
        attached.append((ref.text, index, ref.malformed))
    return CitedAnswer(text, spans, tuple(attached))


def read_citations(record: RagRecord) -> tuple[RagRecord, CitedAnswer]:
    """`without_citations(record)` and its answer as parsed: pass the latter to `check_citations`
    so that the answer is parsed once."""
    parsed = parse_citations(record.answer, [c.id for c in record.chunks])
    if not parsed.refs:
        return record, parsed
    return dataclasses.replace(record, answer=parsed.text), parsed


def without_citations(record: RagRecord) -> RagRecord:
    """`record` with its answer's citation markers removed (the same object when it has none)."""
    return read_citations(record)[0]


def resolve(ref: str, chunk_ids: Sequence[str]) -> list[str]:
    """The chunk ids a reference names (empty: unresolved). See the module docstring."""
    k = len(chunk_ids)
    ids = set(chunk_ids)
    if ref.isdigit():
        n = int(ref)
        if 1 <= n <= k:
            return [chunk_ids[n - 1]]
        return [ref] if ref in ids else []
    if ref in ids:
        return [ref]
    suffixed = [c for c in chunk_ids if c.endswith(ref) and not c[-len(ref) - 1].isalnum()]
    if len(set(suffixed)) == 1:
        return [suffixed[0]]
    prefixed = _PREFIX_NUMBER.match(ref)
    if prefixed and 1 <= int(prefixed[1]) <= k:
        return [chunk_ids[int(prefixed[1]) - 1]]
    span = _RANGE.match(ref)
    if span:
        a, b = int(span[1]), int(span[2])
        if 1 <= a < b <= k and b - a < _MAX_RANGE:
            return list(chunk_ids[a - 1 : b])
    return []


# -- checking -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Citation:
    """One cited chunk in one sentence (or one unresolved reference)."""

    ref: str  # as written: "2", "doc-3", or a malformed marker ("[1")
    chunk_id: str | None  # None: unresolved
    sentence: int  # index of the answer sentence it is attached to
    verdict: CitationVerdict

    def as_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "chunk_id": self.chunk_id,
            "sentence": self.sentence,
            "verdict": self.verdict.value,
        }


@dataclass(frozen=True, slots=True)
class CitationReport:
    """The citations of one judged answer. `cited[i]`: the chunk ids cited in the sentence(s) of
    claim i (the judgement's claims, in order; empty when its sentences cite nothing)."""

    citations: tuple[Citation, ...]
    cited: tuple[tuple[str, ...], ...]

    def count(self, verdict: CitationVerdict) -> int:
        return sum(c.verdict is verdict for c in self.citations)

    @property
    def precision(self) -> float | None:
        """Supported / checked citations (supported + unsupported); None when none was checked."""
        supported = self.count(CitationVerdict.SUPPORTED)
        checked = supported + self.count(CitationVerdict.UNSUPPORTED)
        return supported / checked if checked else None

    def counts(self) -> dict[str, int]:
        return {v.value: self.count(v) for v in CitationVerdict}

    def to_json_dict(self) -> dict[str, Any]:
        """The `citations` object of a results line (docs/contract.md, Judgement output; docs/judges.md,
        "Citation accuracy")."""
        return {
            "count": len(self.citations),
            **self.counts(),
            "precision": self.precision,
            "items": [c.as_dict() for c in self.citations[:MAX_CITATIONS]],
        }


def _key(text: str) -> str:
    return normalise(text).rstrip(".!?;: ")


def _claim_sentences(claim: str, keys: Sequence[str], words_of: Sequence[set[str]]) -> set[int]:
    """Indices of the answer sentences a claim's text comes from (empty: none found). `keys` and
    `words_of`: each sentence's `_key` and content words."""
    # A marker starts with "[" or "(": a claim without either has none to remove.
    key = _key(parse_citations(claim).text if "[" in claim or "(" in claim else claim.strip())
    if not key:
        return set()
    found = {i for i, s in enumerate(keys) if s and (key in s or s in key)}
    if found:
        return found
    words = content_words(key)
    if not words:
        return set()
    best, share = -1, 0.0
    for i, sentence_words in enumerate(words_of):
        overlap = len(words & sentence_words) / len(words)
        if overlap > share:
            best, share = i, overlap
    return {best} if share >= _ALIGNED else set()


def _decided(claim: Claim) -> bool:
    return claim.verdict is not Verdict.UNCERTAIN and claim.note != NOTE_NOT_JUDGED


def check_citations(
    chunks: Sequence[Chunk], answer: str | CitedAnswer, judgement: Judgement
) -> CitationReport | None:
    """Each citation of `answer` checked against `judgement`'s claims (see the module docstring).
    `answer` as written, or as `read_citations` parsed it for these chunks (not parsed again).
    None when the answer cites nothing, or the judgement failed (no claims to check against)."""
    ids = [c.id for c in chunks]
    parsed = parse_citations(answer, ids) if isinstance(answer, str) else answer
    if not parsed.refs or not judgement.ok:
        return None
    sentences = [parsed.sentence(i) for i in range(len(parsed.sentences))]
    keys = [_key(s) for s in sentences]
    words_of = [content_words(s) for s in sentences]
    by_sentence: dict[int, list[int]] = {}
    for ci, claim in enumerate(judgement.claims):
        for si in _claim_sentences(claim.text, keys, words_of):
            by_sentence.setdefault(si, []).append(ci)
    visible = {c.id for c in chunks if c.content}
    if judgement.chunk_relevance is not None:  # an LLM judge rates every chunk it was shown
        visible &= {cid for cid, _ in judgement.chunk_relevance}
    citations: list[Citation] = []
    seen: set[tuple[str, int, bool]] = set()
    cited: dict[int, list[str]] = {}
    for ref, si, malformed in parsed.refs:
        resolved = [] if malformed else resolve(ref, ids)
        if not resolved:
            if (ref, si, False) not in seen:
                seen.add((ref, si, False))
                citations.append(Citation(ref, None, si, CitationVerdict.UNRESOLVED))
            continue
        claims = [judgement.claims[i] for i in by_sentence.get(si, ())]
        for chunk_id in resolved:
            if (chunk_id, si, True) in seen:
                continue
            seen.add((chunk_id, si, True))
            cited.setdefault(si, []).append(chunk_id)
            if any(chunk_id in c.chunk_ids for c in claims):
                verdict = CitationVerdict.SUPPORTED
            elif chunk_id not in visible or not any(_decided(c) for c in claims):
                verdict = CitationVerdict.UNCHECKED
            else:
                verdict = CitationVerdict.UNSUPPORTED
            citations.append(Citation(ref, chunk_id, si, verdict))
    per_claim: list[tuple[str, ...]] = []
    for ci in range(len(judgement.claims)):
        ordered: dict[str, None] = {}
        for si in sorted(si for si, members in by_sentence.items() if ci in members):
            ordered.update(dict.fromkeys(cited.get(si, ())))
        per_claim.append(tuple(ordered))
    return CitationReport(tuple(citations), tuple(per_claim))
