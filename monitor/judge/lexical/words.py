"""The lexical judge's words: stop words, polarity markers, the synonym table, the stemmer, and
what one raw token contributes (`Token`). Tables only, no state."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Short function words plus question words: they carry no claim. Negations and comparatives are
# here too (they would align anything with anything) and are read apart, as polarity markers.
_STOP_WORDS = """
    a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each either even every
    few for from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just least less many may me might more most much must my myself neither no
    nor not now of off on once one only or other others ought our ours ourselves out over own per
    quite rather same she should since so some such than that the their theirs them themselves then
    there these they this those though through thus to too under until up upon us very was we were
    what whatever when where whether which while who whom whose why will with within without would
    yet you your yours yourself s t d ll m re ve st nd rd th
    earlier later higher lower larger smaller bigger greater fewer older younger longer shorter
    never none nobody nothing cannot
"""


def word_list(words: str) -> list[str]:
    """A word list written as one string (the tables below read better that way)."""
    return words.split()


STOP = frozenset(word_list(_STOP_WORDS))
# A question's words that name the kind of answer, not a fact ("In what year ...", "What is the name").
QUESTION_ONLY = frozenset(word_list("year name call type kind number percent percentage date term"))
TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+")

# -- polarity --------------------------------------------------------------------------------------

_NEGATIONS = frozenset(word_list("not no never without nor neither none nobody nothing cannot"))
NEGATION_SCOPE = 3  # content words after a negation that it governs
# Words that end a negation's scope: a clause boundary.
_SCOPE_BREAK = frozenset(word_list("but and or while whereas although though which who that because"))
# Comparative and temporal markers: (axis, side). Strong ones state the relation (and are evidence
# against the opposite side); weak ones only count as stating it ("over 500" for "more than 500").
_STRONG: dict[str, str] = {}
_WEAK: dict[str, str] = {}
for _axis, _up, _down in (
    (
        "time",
        "before prior earlier previously preceding preceded",
        "after later following subsequently afterwards",
    ),
    ("amount", "more greater higher larger bigger", "less fewer lower smaller"),
    ("age", "older elder", "younger"),
    ("length", "longer", "shorter"),
):
    _STRONG.update({w: f"{_axis}+" for w in _up.split()})
    _STRONG.update({w: f"{_axis}-" for w in _down.split()})
for _side, _words in (
    (
        "amount+",
        "increase increased increases rise rose risen highest largest biggest most above over exceed",
    ),
    ("amount-", "decrease decreased decreases fall fell declined decline lowest smallest least below under"),
    ("time+", "first formerly former once until by"),
    ("time-", "since then subsequent"),
):
    _WEAK.update(dict.fromkeys(word_list(_words), _side))
# Flips of these two need no missing-marker rule ("the first store" vs "the store"): evidence only.
_FLIP_ONLY = {"first": "order+", "last": "order-", "former": "status+", "current": "status-"}
_STRONG.update({"increased": "amount+", "decreased": "amount-", "increase": "amount+", "decrease": "amount-"})

# -- paraphrase ------------------------------------------------------------------------------------

# Stems that mean the same thing in the claims an answer makes about a text. Small on purpose: every
# entry is a word pair that a faithful answer commonly swaps, never one that changes a fact.
_SYNONYM_GROUPS = (
    "found establish creat launch form set",
    "start begin began begun commenc",
    "end finish conclud",
    "buy bought purchas acquir",
    "sell sold",
    "die death dead",
    "born birth",
    "build built construct",
    "make made produc manufactur",
    "writ wrote written author",
    "show demonstrat indicat reveal",
    "use utiliz employ",
    "locat situat base",
    "help assist aid",
    "get obtain receiv",
    "say said stat",
    "call nam known dub titl",
    "win won",
    "lead led head",
    "hold held",
    "give gave given",
    "take took taken",
    "become became",
    "grow grew grown",
    "large big huge",
    "small little tiny",
    "compan firm corporation business",
    "film movie",
    "people person individual",
    "country nation",
    "city town",
    "car automobile vehicle",
    "job occupation profession",
    "kill murder",
    "fast quick rapid",
    "approximately about roughly around",
)
_CANON: dict[str, str] = {}
for _group in _SYNONYM_GROUPS:
    _head, *_rest = _group.split()
    _CANON.update(dict.fromkeys((_head, *_rest), _head))
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(word_list("zero one two three four five six seven eight nine ten eleven twelve"))
    if i >= 2  # "one" is a pronoun as often as a number
}

_ANAPHORS = frozenset(word_list("he she it they his her its their him them this these those its"))


def _fold(tok: str) -> str:
    """Accents off ("Alû" = "Alu"): cheap, because it runs once per distinct raw token."""
    if tok.isascii():
        return tok
    return "".join(c for c in unicodedata.normalize("NFKD", tok) if not unicodedata.combining(c))


def stem(tok: str) -> str:
    """Crude suffix stripping, then the synonym table. Applied alike to both sides of every
    comparison, so it only has to be consistent, not linguistically right."""
    if tok in STOP or (len(tok) < 2 and not tok.isdigit()):
        return ""
    if tok[0].isdigit():
        return tok.replace(",", "")
    if tok in _NUMBER_WORDS:
        return _NUMBER_WORDS[tok]
    if tok in _CANON:
        return _CANON[tok]
    n = len(tok)
    if n > 4 and tok.endswith("ies"):
        tok = tok[:-3] + "y"
    elif n > 5 and tok.endswith("ing"):
        tok = tok[:-3]
    elif n > 4 and tok.endswith(("ed", "ches", "shes", "sses", "xes", "zes")):
        tok = tok[:-2]
    elif n > 3 and tok.endswith("s") and not tok.endswith(("ss", "us", "is")):
        tok = tok[:-1]
    if n > 4 and tok.endswith("e"):  # "create"/"created" -> "creat"
        tok = tok[:-1]
    return _CANON.get(tok, tok)


@dataclass(frozen=True, slots=True)
class Token:
    """What one raw (whitespace-separated) token contributes."""

    stems: tuple[str, ...]
    names: tuple[str, ...]  # stems of capitalised words and numbers
    neg: bool
    markers: tuple[str, ...]  # strong "axis±" markers
    weak: tuple[str, ...]  # weak "axis±" markers
    brk: bool  # ends a negation's scope
    anaphor: bool
    special: bool  # any of the four above


_NT = re.compile(r"n[’']t\b", re.IGNORECASE)


def token_of(raw: str) -> Token:
    """What one raw token says: its stems and names, and whether it negates, states a relation,
    ends a clause or refers back. Pure: `text.tokens` caches it per distinct raw token."""
    neg = False
    text = raw
    if _NT.search(text):  # "isn't" -> "is" + negation; "can't" -> "can"; "won't" -> "will"
        neg = True
        low = text.lower()
        text = "will" if low.startswith("won") else "can" if low.startswith("can") else _NT.sub("", text)
    stems: list[str] = []
    names: list[str] = []
    markers: list[str] = []
    weak: list[str] = []
    anaphor = False
    for tok in TOKEN.findall(text):
        low = _fold(tok.lower())
        if low in _NEGATIONS:
            neg = True
        if low in _STRONG:
            markers.append(_STRONG[low])
        if low in _FLIP_ONLY:
            markers.append(_FLIP_ONLY[low])
        if low in _WEAK:
            weak.append(_WEAK[low])
        anaphor = anaphor or low in _ANAPHORS
        s = stem(low)
        if s:
            stems.append(s)
            if tok[0].isdigit() or tok[0].isupper():
                names.append(s)
    brk = raw.endswith((",", ";", ":")) or raw.lower() in _SCOPE_BREAK
    special = neg or brk or anaphor or bool(markers or weak)
    return Token(tuple(stems), tuple(names), neg, tuple(markers), tuple(weak), brk, anaphor, special)
