"""A terse answer's kind and the question's slot: what a question asks for ("who": a person), what
kind an answer is (a year, a number, a name), the context's other words of that kind, and a
name's type from the words around it."""

from __future__ import annotations

import re

from monitor.judge.lexical.text import CACHES, Sentence
from monitor.judge.lexical.words import STOP, Token, stem, word_list

OR = re.compile(r"\bor\b", re.IGNORECASE)
CHOICE = re.compile(r"\bor\b[^,?]*\?\s*$", re.IGNORECASE)  # "..., A or B?"
_YEAR_STEM = re.compile(r"1\d{3}|20\d{2}")


def kind_of(sent: Sentence, numbers: frozenset[str]) -> str | None:
    """A terse answer's kind: "year", "number" or "name" (a capitalised word); None: a phrase."""
    if numbers:
        return "year" if all(_YEAR_STEM.fullmatch(n) for n in numbers) else "number"
    if any(t.names for t in sent.toks):
        return "name"
    return None


def _of_kind(t: Token, kind: str, first: bool) -> bool:
    if kind == "name":
        return not first and any(not n[0].isdigit() for n in t.names)
    return any(n[0].isdigit() and (kind == "year") == bool(_YEAR_STEM.fullmatch(n)) for n in t.stems)


def runs(sent: Sentence, kind: str) -> tuple[tuple[int, ...], ...]:
    """The runs of consecutive words of this kind in a chunk sentence, cached like its tokens
    (popular chunks come back)."""
    cache = CACHES.runs.table()
    key = (sent.text, kind)
    got = cache.get(key)
    if got is not None:
        return got
    out: list[tuple[int, ...]] = []
    run: list[int] = []
    for k, t in enumerate((*sent.toks, None)):
        if t is not None and _of_kind(t, kind, k == 0):
            run.append(k)
        elif run:
            out.append(tuple(run))
            run = []
    got = cache[key] = tuple(out)
    return got


def alternatives(sent: Sentence, kind: str, known: frozenset[str], answer: frozenset[str]) -> list[int]:
    """Positions of the sentence's words of the answer's kind that are neither the answer nor the
    question's (`known`), outside the run of such words that holds the answer ("Derek Cha": not
    "Cha" against "Derek"). A sentence's first word is no name here: it is capitalised anyway."""
    toks = sent.toks
    out: list[int] = []
    for run in runs(sent, kind):
        if any(not answer.isdisjoint(toks[j].stems) for j in run):
            continue
        out.extend(j for j in run if known.isdisjoint(toks[j].stems))
    return out


# -- the question's slot and a name's type ------------------------------------------------------------

# What a question asks for: "person", "place", "time", "number" or "thing" (a named entity that is
# none of those: a company, a film); None: the question does not say (`slot_of`).
_SLOT_NOUNS = {
    "time": "year years date day month century decade era",
    "number": "number amount percentage percent population",
    "place": "city town country state location place county region province river island village "
    "capital continent mountain lake street area district neighborhood venue stadium",
    "person": "person man woman actor actress singer director writer author musician player "
    "artist politician composer producer king queen president husband wife son daughter father "
    "mother brother sister founder leader coach poet novelist rapper member",
    "thing": "company band club team organization organisation university college film movie book "
    "album song group newspaper magazine show series game label network brand school party airline",
}
_SLOT_OF_NOUN = {w: slot for slot, words in _SLOT_NOUNS.items() for w in words.split()}
_WH = r"(?P<time>when)|(?P<number>how many|how much)|(?P<place>where)|(?P<person>who|whom)"
# A wh-word that opens the question (after a preposition at most) or ends it ("... based where?");
# elsewhere it opens a relative clause ("the city where he was born") and asks nothing.
_SLOT_EDGE = (
    re.compile(rf"^\W*(?:(?:in|at|from|by|to|for|with|since|until)\s+)?(?:{_WH})\b", re.IGNORECASE),
    re.compile(rf"\b(?:{_WH})\W*$", re.IGNORECASE),
)
_SLOT_NOUN = re.compile(r"\b(?:what|which)\s+(\w+)(?:\s+(\w+))?", re.IGNORECASE)
_MONTHS = frozenset(
    word_list(
        "january february march april may june july august september october november december "
        "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
        "saturday sunday"
    )
)
_MONTH_STEMS = frozenset(stem(m) for m in _MONTHS) - {""}


def slot_of(question: str) -> str | None:
    """The type of answer the question asks for: its opening or closing wh-word ("Who ...",
    "In where ...", "... based where?"), else the noun after its first "what"/"which" ("which
    city", "what Bollywood actress"; one the table lacks: None)."""
    for edge in _SLOT_EDGE:
        m = edge.search(question)
        if m is not None:
            return m.lastgroup
    m = _SLOT_NOUN.search(question)
    if m is None:
        return None
    for noun in (m.group(1), m.group(2)):
        if noun:
            low = noun.lower()
            slot = _SLOT_OF_NOUN.get(low) or _SLOT_OF_NOUN.get(low[:-1] if low.endswith("s") else low)
            if slot is not None:
                return slot
    return None


def fits(slot: str | None, kind: str | None, words: frozenset[str]) -> bool:
    """Whether a terse answer of this kind (`kind_of`; its content words) can fill the slot: a
    bare number is no person, place or thing; a bare month no person, place, thing or number; a
    name with neither digit nor month is no time or number."""
    if slot is None or kind is None:
        return True
    digits = any(w[0].isdigit() for w in words)
    months = not words.isdisjoint(_MONTH_STEMS)
    plain = {w for w in words if not w[0].isdigit() and w not in _MONTH_STEMS}
    if slot in ("person", "place", "thing"):
        return bool(plain)
    if slot == "time":
        return digits or months
    return digits  # number


# A name's type in the sentence it stands in, from the words around it: None when they do not say.
_PLACE_BEFORE = frozenset(word_list("in at near from across throughout outside inside"))
_PLACE_HEADS = frozenset(
    word_list(
        "city county river island state province kingdom republic mountains mountain lake valley street bay"
    )
)
_THING_HEADS = frozenset(
    word_list(
        "inc corporation company university college club party records group team fc association "
        "institute museum church council commission agency department ministry bank band"
    )
)
_PERSON_BEFORE = frozenset(_SLOT_NOUNS["person"].split()) | frozenset(
    word_list("by mr mrs ms dr sir lord lady saint st prof")
)
DEMONYM = re.compile(r"(?:an|ese|ish|ch|i)$")  # not "ic": "the Pacific coast"


def type_of(sent: Sentence, run: tuple[int, ...]) -> str | None:
    """What a run of name tokens in a chunk sentence is (`_type_here`), cached like its tokens."""
    cache = CACHES.types.table()
    key = (sent.text, run[0])
    if key in cache:
        return cache[key]
    got = cache[key] = _type_here(sent, run)
    return got


def _type_here(sent: Sentence, run: tuple[int, ...]) -> str | None:
    """What a run of name tokens in a chunk sentence is: "time" (a month or weekday), "modifier"
    (a nationality before a noun: "Qatari banker", "Indian film"), "place" ("in Leland", "Columbus,
    Ohio", "... County"), "thing" ("... University", "... Records"), "person" ("directed by",
    "actress Antara Mali", "Choi Jin-ri (born 1994)"), or None: the words around it do not say."""
    raw = sent.text.split()  # one raw token per `sent.toks` entry (`tokens`)
    words = [w.lower().strip(".,;:()\"'“”‘’") for w in raw]
    last = run[-1]
    inside = {words[k] for k in run}
    before = words[run[0] - 1] if run[0] else ""
    after = words[last + 1] if last + 1 < len(words) else ""
    nxt = raw[last + 1] if last + 1 < len(raw) else ""
    got: str | None = None
    if words[run[0]] in _MONTHS:
        got = "time"
    elif any(raw[k].startswith("(") for k in run[1:]):
        got = "person"  # "Irwin Shaw (February 27, 1913 - ...)": a life's dates
    elif inside & _PLACE_HEADS:
        got = "place"
    elif inside & _THING_HEADS:
        got = "thing"
    elif len(run) == 1 and DEMONYM.search(words[last]) and nxt[:1].islower() and after not in STOP:
        got = "modifier"  # "Qatari banker" (a lower-case word after it: `after` is folded, `nxt` not)
    elif before in _PLACE_BEFORE:
        got = "place"
    elif before in _PERSON_BEFORE or nxt.startswith("(") or after == "born":
        got = "person"
    return got
