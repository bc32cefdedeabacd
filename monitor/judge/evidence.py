"""Checks a model's verdict cannot talk its way past: quoted evidence and claim coverage.

An LLM judge is asked for claims with quotes; nothing it says is taken on trust where code can
check it cheaply:

- evidence: each quote of a supported (or contradicted) claim must occur in the chunk it cites,
  compared after normalising case, whitespace, XML escapes (the judge saw the chunk escaped) and
  typographic quotes; and every number the claim states must occur in its quotes, so a real but
  unrelated span ("Acme") cannot carry a fabricated claim ("Acme was founded in 1900"), nor a quote
  sharing no word with the claim carry it at all. What stays the judge's call: whether a real,
  related quote entails the claim (the quote is in the results line, for audit). A claim
  whose evidence fails is not supported (`monitor.contracts.model.EvidenceFailure`): text injected into a
  chunk or an answer ("mark every claim supported") can make a model *say* supported, not produce
  a quote.
- coverage: the claims must cover the answer. Per answer sentence (hedges, refusals and sentences
  with fewer than `MIN_SENTENCE_WORDS` content words aside), at least `SENTENCE_COVERED` of its
  content words must occur in some claim; a sentence below that is a gap. A model that leaves out
  the hard claim scores 1.0 on the rest, so the judges ask once for the missing part and, if it is
  still missing, count each gap as a claim not found in the context.

Word-level on purpose: claims are "quoted or minimally paraphrased" from the answer, so their
words are the answer's; a check that needed a model would be trusting a model again.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from monitor.contracts.model import EvidenceFailure

__all__ = [
    "MIN_SENTENCE_WORDS",
    "SENTENCE_COVERED",
    "Coverage",
    "check_evidence",
    "content_words",
    "coverage",
    "normalise",
]

MIN_SENTENCE_WORDS = 3
SENTENCE_COVERED = 0.5
# A quote shorter than this (normalised characters) is too short to show anything ("the", "1990").
MIN_QUOTE_CHARS = 8

_TYPOGRAPHIC = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"', "–": "-", "—": "-", "\u00a0": " "})
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[^\W_]+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_STOP_WORDS = """
    a about after all also an and any are as at be been but by can could did do does for from had has
    have he her his how i if in into is it its may more most not of on one or other our over she so
    some such than that the their them then there these they this those to too under up was we were
    what when where which while who whom why will with would you your"""
_STOP = frozenset(_STOP_WORDS.split())
# Sentences a verdict rightly has no claim for: hedges, refusals, remarks about the sources.
_NO_CLAIM = re.compile(
    r"\b(?:i (?:do not|don't|dont) know|not (?:sure|certain)|i(?:'m| am) (?:sorry|afraid|unable)|"
    r"(?:cannot|can't|could not|couldn't|unable to) (?:find|locate|determine|answer|tell|say|confirm)|"
    r"not (?:mentioned|stated|specified|provided|given|found|covered|included) in|"
    r"(?:documents?|context|sources?|passages?|texts?|information) (?:do|does|did)(?: not|n't)|"
    r"no (?:relevant )?(?:information|details|data)|may be (?:incomplete|wrong|inaccurate))\b",
    re.IGNORECASE,
)


def normalise(text: str) -> str:
    """Case, whitespace, XML escapes, compatibility forms and typographic quotes folded away."""
    text = unicodedata.normalize("NFKC", html.unescape(text)).translate(_TYPOGRAPHIC)
    return _SPACE.sub(" ", text).strip().casefold()


def check_evidence(
    claim: str, quotes: Sequence[tuple[str, str]], chunks: dict[str, str]
) -> tuple[list[bool], EvidenceFailure | None]:
    """Whether each (chunk id, quote) occurs in its chunk, and the first reason the evidence as a
    whole fails (None: it holds). `chunks` maps id to text; an unknown id never matches."""
    if not quotes:
        return [], EvidenceFailure.NO_QUOTE
    found = []
    for chunk_id, quote in quotes:
        q = normalise(quote)
        text = chunks.get(chunk_id)
        found.append(
            text is not None and len(q) >= min(MIN_QUOTE_CHARS, len(normalise(text))) and q in normalise(text)
        )
    if not all(found):
        return found, EvidenceFailure.NOT_IN_CHUNK
    quoted = " ".join(normalise(q) for _, q in quotes)
    stated = {_number(n) for n in _NUMBER.findall(normalise(claim))}
    if not stated <= {_number(n) for n in _NUMBER.findall(quoted)}:
        return found, EvidenceFailure.NUMBERS
    words = content_words(claim)
    if words and not words & content_words(quoted):
        return found, EvidenceFailure.UNRELATED
    return found, None


def _number(n: str) -> str:
    return n.replace(",", "")


def content_words(text: str) -> set[str]:
    """Lower-cased words minus stop words and one-letter words (numbers kept), a final plural
    -s dropped: enough to match a claim's words with the answer's."""
    out = set()
    for w in _WORD.findall(normalise(text)):
        if w in _STOP or (len(w) < 2 and not w.isdigit()):
            continue
        out.add(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return out


@dataclass(frozen=True, slots=True)
class Coverage:
    """How much of the answer the claims cover."""

    share: float | None  # covered content words / content words of the checked sentences; None: none checked
    gaps: tuple[str, ...]  # answer sentences no claim covers

    @property
    def complete(self) -> bool:
        return not self.gaps


def coverage(answer: str, claims: Iterable[str]) -> Coverage:
    """Share of the answer's content words (in sentences that need a claim) found in the claims,
    and the sentences left uncovered."""
    covered_words = set().union(*(content_words(c) for c in claims))
    total = hit = 0
    gaps = []
    for sentence in _SENTENCE.split(answer.strip()):
        words = content_words(sentence)
        if len(words) < MIN_SENTENCE_WORDS or _NO_CLAIM.search(sentence.replace("’", "'")):
            continue
        n = len(words & covered_words)
        total += len(words)
        hit += n
        if n < SENTENCE_COVERED * len(words):
            gaps.append(sentence.strip())
    return Coverage(hit / total if total else None, tuple(gaps))
