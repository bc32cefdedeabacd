"""Sentences as the lexical judge reads them: where one ends, what a sentence holds (`Sentence`,
`Passage`), refusals, and the caches of what is worked out per distinct text (`CACHES`)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Generic, TypeVar

from monitor.judge.lexical.words import NEGATION_SCOPE, Token, token_of

# Full stops that end no sentence (Dr., e.g., initials): lookbehinds for a sentence-end pattern.
ABBREVIATIONS = r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bJr\.)(?<!\bSr\.)(?<!\bNo\.)"
ABBREVIATIONS += (
    r"(?<!\bvs\.)(?<!\bProf\.)(?<!\bInc\.)(?<!\bLtd\.)(?<!\bCo\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\b[A-Z]\.)"
)
# Where one sentence ends and the next begins (`split_claims`; `monitor.judge.citations` adds line breaks).
SENTENCE_END = re.compile(r"(?<=[.!?])" + ABBREVIATIONS + r"[\"'”’)\]]*\s+(?=[\"'“‘(\[`]?[A-Z0-9])")
LEAD_IN = re.compile(
    r"^(?:(?:according to|based on|as (?:stated|mentioned|described|shown) in|per|from)\s+(?:the\s+)?"
    r"(?:provided\s+|retrieved\s+|given\s+|available\s+|above\s+)?"
    r"(?:documents?|context|sources?|passages?|information|texts?|chunks?)\s*,?\s*)",
    re.IGNORECASE,
)
_REFUSAL = re.compile(
    r"|".join(
        (
            r"\bi (?:really )?(?:don't|do not|dont) know\b",
            r"\bi(?:'m| am) (?:not (?:sure|certain|able)|unable|afraid)\b",
            r"\b(?:cannot|can't|can not|couldn't|could not|unable to|wasn't able to|was not able to|"
            r"am not able to) (?:find|locate|determine|answer|tell|say|identify|confirm)\b",
            r"\bnot (?:mentioned|stated|specified|covered|included|found|provided|available|addressed|"
            r"given|present) in (?:the |any of the )?(?:provided |given |available |retrieved |supplied )?"
            r"(?:documents?|context|sources?|passages?|texts?|information|materials?)\b",
            r"\b(?:documents?|context|sources?|passages?|texts?|information)\b[^.]{0,40}?"
            r"\b(?:do|does|did)(?: not|n't) (?:contain|include|provide|mention|specify|say|state|cover|"
            r"have|address|answer)\b",
            r"\b(?:no|not enough|insufficient) (?:relevant )?(?:information|details|data|mention)\b",
            r"\bi (?:have no|don't have|do not have) (?:enough )?(?:information|data|access)\b",
        )
    ),
)

_ANTECEDENT_SENTENCES = 1  # an anaphor refers to the previous sentence's names (or the chunk's first)

EMPTY: frozenset[str] = frozenset()

_K = TypeVar("_K")
_V = TypeVar("_V")


class Memo(Generic[_K, _V]):
    """The results of a pure function per key, shared by every judge and thread, about `bound`
    entries at most: past that it starts again with a new dict, not `clear()`, so that a caller in
    another thread keeps a valid one."""

    __slots__ = ("_table", "bound")

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._table: dict[_K, _V] = {}

    def table(self) -> dict[_K, _V]:
        """The dict to read and fill: a new one once the current holds more than `bound`."""
        if len(self._table) > self.bound:
            self._table = {}
        return self._table

    def clear(self) -> None:
        self._table = {}

    def __len__(self) -> int:
        return len(self._table)


# Per word of a sentence, the positions it stands at; per position, the clause breaks before it.
Places = tuple[dict[str, tuple[int, ...]], tuple[int, ...]]


class SentenceCaches:
    """What the judge works out once per distinct text, for every judge in the process (production
    retrievers return the same popular chunks again and again): a raw token's `Token`, a
    sentence's `places`, its runs of words of a kind and a name's type there (`slots.runs`,
    `slots.type_of`), and per chunk text its sentences (`sentences_of`, an LRU of its own)."""

    def __init__(self, bound: int = 200_000) -> None:
        self.tokens: Memo[str, Token] = Memo(bound)
        self.places: Memo[str, Places] = Memo(bound)
        self.runs: Memo[tuple[str, str], tuple[tuple[int, ...], ...]] = Memo(bound)
        self.types: Memo[tuple[str, int], str | None] = Memo(bound)

    def clear(self) -> None:
        for memo in (self.tokens, self.places, self.runs, self.types):
            memo.clear()
        sentences_of.cache_clear()


CACHES = SentenceCaches()


def tokens(text: str) -> list[Token]:
    """The text's raw (whitespace-separated) tokens, each analysed once per process."""
    cache = CACHES.tokens.table()
    out = []
    for raw in text.split():
        t = cache.get(raw)
        if t is None:
            t = cache[raw] = token_of(raw)
        out.append(t)
    return out


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence (of a chunk or of an answer), analysed once."""

    text: str
    words: frozenset[str]
    names: frozenset[str]  # capitalised stems and numbers (in a claim, the first token's only if a number)
    negated: frozenset[str]  # content words in a negation's scope
    markers: frozenset[str]  # strong polarity markers
    weak: frozenset[str]
    anaphor: bool
    subject: frozenset[str] = EMPTY  # the names of its first run of capitalised words
    toks: tuple[Token, ...] = ()  # in order: where its words stand (a terse answer's window)
    # Every word in a negation's scope, also those asserted elsewhere (`negated` leaves them out),
    # and whether it has a negation at all ("None.").
    negated_any: frozenset[str] = EMPTY
    neg: bool = False


def _subject(toks: list[Token], first_is_name: bool) -> frozenset[str]:
    """The first name of a sentence (its first run of name tokens): what a later "he" or "it"
    most often refers to."""
    run: list[str] = []
    for i, t in enumerate(toks):
        names = t.names if (i or first_is_name) else tuple(n for n in t.names if n[0].isdigit())
        if names:
            run.extend(names)
        elif run:
            break
    return frozenset(run)


def _negated(toks: list[Token]) -> tuple[frozenset[str], frozenset[str]]:
    """The content words in a negation's scope that the sentence does not also assert ("they do
    not burrow, they shelter in burrows": not "burrow"), and all those in a negation's scope."""
    negated: set[str] = set()
    asserted: set[str] = set()
    scope = 0
    for i, t in enumerate(toks):
        if scope and t.stems:
            negated.update(t.stems)
            scope = max(0, scope - len(t.stems))
        else:
            asserted.update(t.stems)
        if t.neg and not (i + 1 < len(toks) and toks[i + 1].stems[:1] == ("only",)):
            scope = NEGATION_SCOPE  # ("not only ... but also" negates nothing)
        if t.brk:
            scope = 0
    return frozenset(negated - asserted), frozenset(negated)


def analyse(text: str, *, first_is_name: bool = False) -> Sentence:
    """A sentence's words, names, subject, negations and relation markers (`Sentence`)."""
    toks = tokens(text)
    if not toks:
        return Sentence(text, EMPTY, EMPTY, EMPTY, EMPTY, EMPTY, False)
    words = frozenset([s for t in toks for s in t.stems])
    # The first word is capitalised because it starts the sentence: a name only if a number, or
    # past its first part ("Okafor-Lind").
    first = toks[0].names
    names = {n for t in toks[1:] for n in t.names}
    names.update(first if first_is_name else (n for j, n in enumerate(first) if j or n[0].isdigit()))
    subject = _subject(toks, first_is_name)
    special = [t for t in toks if t.special]
    if not special:  # most sentences: no negation, relation, clause break or anaphor
        return Sentence(text, words, frozenset(names), EMPTY, EMPTY, EMPTY, False, subject, tuple(toks))
    negated, negated_any = _negated(toks) if any(t.neg for t in special) else (EMPTY, EMPTY)
    return Sentence(
        text,
        words,
        frozenset(names),
        negated,
        frozenset(m for t in special for m in t.markers),
        frozenset(m for t in special for m in t.weak),
        any(t.anaphor for t in special),
        subject,
        tuple(toks),
        negated_any,
        any(t.neg for t in special),
    )


@dataclass(frozen=True, slots=True)
class Passage:
    """A chunk, analysed sentence by sentence."""

    id: str
    sentences: tuple[Sentence, ...]
    # Per sentence: names it may refer back to, when it has an anaphor ("he", "its", ...): the
    # subject (first name) of the sentence before it and of the chunk's first sentence; else none.
    antecedents: tuple[frozenset[str], ...]
    words: frozenset[str]


@functools.lru_cache(maxsize=4096)
def sentences_of(
    content: str,
) -> tuple[tuple[Sentence, ...], tuple[frozenset[str], ...], frozenset[str]]:
    """Per chunk text, cached: production retrievers return the same popular chunks again and again."""
    sentences = tuple(analyse(s, first_is_name=True) for s in split_claims(content))
    antecedents = []
    topic = sentences[0].subject if sentences else EMPTY
    for i, s in enumerate(sentences):
        if s.anaphor and i:
            recent = sentences[max(0, i - _ANTECEDENT_SENTENCES) : i]
            antecedents.append(topic.union(*(p.subject for p in recent)))
        else:
            antecedents.append(EMPTY)
    words = frozenset().union(*(s.words for s in sentences)) if sentences else frozenset()
    return sentences, tuple(antecedents), words


def content_words(text: str) -> frozenset[str]:
    """The stems of a text's content words (case ignored: no names)."""
    return analyse(text.lower()).words


def split_claims(answer: str) -> list[str]:
    """Sentences of the answer, abbreviations and initials (Dr., U.S., J. K.) kept whole."""
    return [s.strip() for s in SENTENCE_END.split(answer.strip()) if s.strip()]


def is_refusal(text: str) -> bool:
    """Whether the text says it cannot answer ("I don't know", "not in the provided documents")."""
    return _REFUSAL.search(text.lower().replace("’", "'")) is not None


def places(sent: Sentence) -> Places:
    """Per word of a chunk sentence, the positions it stands at, and per position the clause breaks
    (a comma, "and", "which", ...) before it; cached like its tokens."""
    cache = CACHES.places.table()
    got = cache.get(sent.text)
    if got is not None:
        return got
    at: dict[str, list[int]] = {}
    cum = [0]
    for k, t in enumerate(sent.toks):
        for w in t.stems:
            at.setdefault(w, []).append(k)
        cum.append(cum[-1] + t.brk)
    got = cache[sent.text] = ({w: tuple(ks) for w, ks in at.items()}, tuple(cum))
    return got
