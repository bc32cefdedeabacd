"""An offline, deterministic judge: sentence alignment and word overlap instead of a language model.

It is an APPROXIMATION, and it is the default only because it needs no network, costs nothing and
runs in well under a millisecond: the demo and the tests can judge every record. What it does:

- claims: the answer is split into sentences (a lead-in such as "According to the documents," is
  dropped; refusal sentences are not claims). A terse answer ("1990.", "Derek Cha", a name of any
  length) is no claim on its own, so it is read together with the question: the answer's names
  and numbers must be in one sentence, and that sentence must be the one the question points at:
  it is scored by the question words it holds (rarer words weigh more) and those within a few
  tokens of the answer (half across a comma or "and": "meteorologist Ted Fujita, cancer
  researchers Charles Huggins"), plus, for a multi-hop question, those of a sentence in another
  chunk that names what it is about (the bridge entity). An answer of a kind (a year, a number,
  a name) is weighed against the context's other words of that kind, scored alike: supported
  when it outscores the best of them by `decide_margin`, `contradicted`
  (`question_answered_elsewhere`) when another sentence's alternative outscores it and its own
  sentence holds little of the question, otherwise `uncertain` (`same_kind_alternative`). Only
  a word that can fill the question's slot is an alternative ("who" asks for a person, "where"
  and "which city" for a place, "when" for a time, "how many" for a number; a name's type is read
  from the words around it: "directed by", "in", "... University", a month, a nationality
  before a noun), and an answer that cannot fill it (a month for "which writer?", a bare number
  for "what company?") is `not_in_context` (`answer_not_of_asked_kind`). A
  phrase answer is compared with the best-scoring sentence. Any answer to a choice question
  ("..., A or B?") is `uncertain`: the other side is not checked. A yes/no answer is decided only
  when every fact the question asks about is found (then "yes" is supported, "no" contradicted),
  never for a comparison ("the same", "before", "consistent"); otherwise `uncertain`. "Are A and
  B both P?" looks for each entity with the property: yes when both hold it, no when a sentence
  naming one gives it another value of the property's named kind (a Hungarian director for
  "American directors"), otherwise `uncertain`.
- alignment: each claim is compared with every SENTENCE of the chunks (not the whole chunk): a
  number from one sentence and a subject from another support nothing. Words are lower-cased,
  crudely stemmed and mapped through a small synonym table ("established" = "founded"), so a
  plain paraphrase still aligns. The claim's numbers must be in the aligned sentence; its names
  (capitalised words, accents and possessives normalised) too, or, when that sentence refers back
  ("he", "it", "its", ...), be the subject of the sentence before it or of the chunk's first
  sentence. A name the question gives is its topic and need not be found; a capitalised first
  word the context lacks is read as a name. A claim that joins two sentences is supported by the
  pair when each adds words of its own, and a name that one of them supplies stands there next to
  a word it stands next to in the claim; a pair that states the rest of the claim without its
  name or number is evidence that the name or number was swapped in (`name_or_number_elsewhere`);
  a pair whose sentence holds one of the claim's names more than a few tokens away from the words
  it stands next to in the claim leaves the claim `uncertain` (`name_misplaced`).
- polarity: a claim that negates what the aligned sentence asserts, or asserts what it negates
  (not, no, never, n't, without, ... scoped to the next few words; a word the sentence also
  asserts outside that scope does not count as negated; a terse answer to a negated question, or
  a bare "None.", agrees with a sentence that negates), is contradicted; so is one
  whose before/after, earlier/later, more/less, higher/lower, larger/smaller, older/younger is the
  opposite of the sentence's, and one that states such a relation the sentence does not state is
  not supported.
- verdict per claim: `supported` when the best sentence meeting those requirements holds at least
  `support_threshold` of the claim's content words (with `claim_margin` of them to spare: else
  `uncertain`, `low_margin`; a claim that negates words its sentence lacks altogether is `uncertain`
  too, `negation_unchecked`: the rest aligns, the negation is not checked); `contradicted` when the
  sentence that states the rest of the claim gives another number, or the polarity flips;
  `not_in_context` when a number or name is nowhere to be found, or little of the claim aligns;
  `uncertain` in between (low alignment but nothing missing or contradicted: multi-hop claims, heavy
  paraphrase). Uncertain claims are counted apart and left out of faithfulness; an answer whose
  claims are all uncertain has no faithfulness and no hallucination verdict rather than a confident
  wrong one.
  A supported claim quotes its aligned sentence as evidence (the text is the chunk's own).
- refusal (`answer_admits_uncertainty`): phrase patterns ("I don't know", "not in the provided
  documents", "couldn't find", ...).
- answerable_from_context: word overlap cannot tell a chunk that *answers* the query from one
  that merely shares its topic, so this judge reads the answer as evidence. For an answer that is
  not a refusal: the context held the answer when most decided claims are supported, or when the
  supported claims repeat at least `supported_query_coverage` of the query's content words, or
  when one chunk holds `answerable_coverage` of them and a supported claim touches the query. For
  a refusal: when one chunk holds `answerable_coverage` of the query's content words — which is
  what `false_refusal` rests on.
- answer_relevance: the share of the query's content words that the answer repeats (1 for a
  refusal).

What it cannot do: synonyms beyond its table, inference, coreference beyond "the subject of the
previous or the chunk's first sentence", a name's type beyond the cues around it, comparing two
facts (a yes/no or "A or B?" answer is mostly undecided), or knowing whether a chunk *answers* the
query. On public QA data (`bench/lexical_judge.py`, docs/judges.md) it separates grounded from
edited answers well; calibrate (`monitor.judge.calibrate`) before trusting its scores on your
traffic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import re
import time
import unicodedata
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from monitor.judge.prompt import MAX_CHUNK_CHARS, MAX_CHUNKS, clip_record
from monitor.model import Claim, Judgement, Quote, RagRecord, Verdict

__all__ = ["ABBREVIATIONS", "SENTENCE_END", "LexicalJudge", "is_refusal", "split_claims"]

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


def _w(words: str) -> list[str]:
    """A word list written as one string (the tables below read better that way)."""
    return words.split()


_STOP = frozenset(_w(_STOP_WORDS))
# A question's words that name the kind of answer, not a fact ("In what year ...", "What is the name").
_QUESTION_ONLY = frozenset(_w("year name call type kind number percent percentage date term"))
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+")
# Full stops that end no sentence (Dr., e.g., initials): lookbehinds for a sentence-end pattern.
ABBREVIATIONS = r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bJr\.)(?<!\bSr\.)(?<!\bNo\.)"
ABBREVIATIONS += (
    r"(?<!\bvs\.)(?<!\bProf\.)(?<!\bInc\.)(?<!\bLtd\.)(?<!\bCo\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\b[A-Z]\.)"
)
# Where one sentence ends and the next begins (`split_claims`; `monitor.judge.citations` adds line breaks).
SENTENCE_END = re.compile(r"(?<=[.!?])" + ABBREVIATIONS + r"[\"'”’)\]]*\s+(?=[\"'“‘(\[`]?[A-Z0-9])")
_LEAD_IN = re.compile(
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

# -- polarity --------------------------------------------------------------------------------------

_NEGATIONS = frozenset(_w("not no never without nor neither none nobody nothing cannot"))
_NEGATION_SCOPE = 3  # content words after a negation that it governs
# Words that end a negation's scope: a clause boundary.
_SCOPE_BREAK = frozenset(_w("but and or while whereas although though which who that because"))
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
    _WEAK.update(dict.fromkeys(_w(_words), _side))
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
    for i, w in enumerate(_w("zero one two three four five six seven eight nine ten eleven twelve"))
    if i >= 2  # "one" is a pronoun as often as a number
}
_PAIR_CANDIDATES = 6  # sentences (the best aligned) tried in pairs
_PAIR_MIN_WORDS = 2
_ANTECEDENT_SENTENCES = 1  # an anaphor refers to the previous sentence's names (or the chunk's first)
_ANAPHORS = frozenset(_w("he she it they his her its their him them this these those its"))


def _fold(tok: str) -> str:
    """Accents off ("Alû" = "Alu"): cheap, because it runs once per distinct raw token."""
    if tok.isascii():
        return tok
    return "".join(c for c in unicodedata.normalize("NFKD", tok) if not unicodedata.combining(c))


def _stem_slow(tok: str) -> str:
    """Crude suffix stripping, then the synonym table. Applied alike to both sides of every
    comparison, so it only has to be consistent, not linguistically right."""
    if tok in _STOP or (len(tok) < 2 and not tok.isdigit()):
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
class _Tok:
    """What one raw (whitespace-separated) token contributes."""

    stems: tuple[str, ...]
    names: tuple[str, ...]  # stems of capitalised words and numbers
    neg: bool
    markers: tuple[str, ...]  # strong "axis±" markers
    weak: tuple[str, ...]  # weak "axis±" markers
    brk: bool  # ends a negation's scope
    anaphor: bool
    special: bool  # any of the four above


_EMPTY: frozenset[str] = frozenset()
_NT = re.compile(r"n[’']t\b", re.IGNORECASE)
_TOKENS: dict[str, _Tok] = {}
_CACHE_MAX = 200_000


def _tok_slow(raw: str) -> _Tok:
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
    for tok in _TOKEN.findall(text):
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
        s = _stem_slow(low)
        if s:
            stems.append(s)
            if tok[0].isdigit() or tok[0].isupper():
                names.append(s)
    brk = raw.endswith((",", ";", ":")) or raw.lower() in _SCOPE_BREAK
    special = neg or brk or anaphor or bool(markers or weak)
    return _Tok(tuple(stems), tuple(names), neg, tuple(markers), tuple(weak), brk, anaphor, special)


def _toks(text: str) -> list[_Tok]:
    global _TOKENS
    cache = _TOKENS
    if len(cache) > _CACHE_MAX:
        cache = _TOKENS = {}  # a new dict, not clear(): a caller in another thread keeps a valid one
    out = []
    for raw in text.split():
        t = cache.get(raw)
        if t is None:
            t = cache[raw] = _tok_slow(raw)
        out.append(t)
    return out


@dataclass(frozen=True, slots=True)
class _Text:
    """One sentence (of a chunk or of an answer), analysed once."""

    text: str
    words: frozenset[str]
    names: frozenset[str]  # capitalised stems and numbers (in a claim, the first token's only if a number)
    negated: frozenset[str]  # content words in a negation's scope
    markers: frozenset[str]  # strong polarity markers
    weak: frozenset[str]
    anaphor: bool
    subject: frozenset[str] = _EMPTY  # the names of its first run of capitalised words
    toks: tuple[_Tok, ...] = ()  # in order: where its words stand (a terse answer's window)
    # Every word in a negation's scope, also those asserted elsewhere (`negated` leaves them out),
    # and whether it has a negation at all ("None.").
    negated_any: frozenset[str] = _EMPTY
    neg: bool = False


def _subject(toks: list[_Tok], first_is_name: bool) -> frozenset[str]:
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


def _analyse(text: str, *, first_is_name: bool = False) -> _Text:
    toks = _toks(text)
    if not toks:
        return _Text(text, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, False)
    words = frozenset([s for t in toks for s in t.stems])
    # The first word is capitalised because it starts the sentence: a name only if a number, or
    # past its first part ("Okafor-Lind").
    first = toks[0].names
    names = {n for t in toks[1:] for n in t.names}
    names.update(first if first_is_name else (n for j, n in enumerate(first) if j or n[0].isdigit()))
    subject = _subject(toks, first_is_name)
    special = [t for t in toks if t.special]
    if not special:  # most sentences: no negation, relation, clause break or anaphor
        return _Text(text, words, frozenset(names), _EMPTY, _EMPTY, _EMPTY, False, subject, tuple(toks))
    negated: set[str] = set()
    if any(t.neg for t in special):
        scope = 0
        asserted: set[str] = set()
        for i, t in enumerate(toks):
            if scope and t.stems:
                negated.update(t.stems)
                scope = max(0, scope - len(t.stems))
            else:
                asserted.update(t.stems)
            if t.neg and not (i + 1 < len(toks) and toks[i + 1].stems[:1] == ("only",)):
                scope = _NEGATION_SCOPE  # ("not only ... but also" negates nothing)
            if t.brk:
                scope = 0
        negated_any = frozenset(negated)
        negated -= asserted  # "they do not burrow, they shelter in burrows": asserted too
    else:
        negated_any = _EMPTY
    return _Text(
        text,
        words,
        frozenset(names),
        frozenset(negated),
        frozenset(m for t in special for m in t.markers),
        frozenset(m for t in special for m in t.weak),
        any(t.anaphor for t in special),
        subject,
        tuple(toks),
        negated_any,
        any(t.neg for t in special),
    )


@dataclass(frozen=True, slots=True)
class _Chunk:
    id: str
    sentences: tuple[_Text, ...]
    # Per sentence: names it may refer back to, when it has an anaphor ("he", "its", ...): the
    # subject (first name) of the sentence before it and of the chunk's first sentence; else none.
    antecedents: tuple[frozenset[str], ...]
    words: frozenset[str]


@functools.lru_cache(maxsize=4096)
def _chunk(
    content: str,
) -> tuple[tuple[_Text, ...], tuple[frozenset[str], ...], frozenset[str]]:
    """Per chunk text, cached: production retrievers return the same popular chunks again and again."""
    sentences = tuple(_analyse(s, first_is_name=True) for s in split_claims(content))
    antecedents = []
    topic = sentences[0].subject if sentences else _EMPTY
    for i, s in enumerate(sentences):
        if s.anaphor and i:
            recent = sentences[max(0, i - _ANTECEDENT_SENTENCES) : i]
            antecedents.append(topic.union(*(p.subject for p in recent)))
        else:
            antecedents.append(_EMPTY)
    words = frozenset().union(*(s.words for s in sentences)) if sentences else frozenset()
    return sentences, tuple(antecedents), words


def _content(text: str) -> frozenset[str]:
    return _analyse(text.lower()).words


def split_claims(answer: str) -> list[str]:
    """Sentences of the answer, abbreviations and initials (Dr., U.S., J. K.) kept whole."""
    return [s.strip() for s in SENTENCE_END.split(answer.strip()) if s.strip()]


def is_refusal(text: str) -> bool:
    return _REFUSAL.search(text.lower().replace("’", "'")) is not None


@dataclass(frozen=True, slots=True)
class _Claim:
    text: str
    words: frozenset[str]
    required: frozenset[str]  # names (and, for a terse answer, every answer word)
    numbers: frozenset[str]
    polar: _Text  # negations and relations (a terse answer's: the question's and its own)
    query: frozenset[str]  # a terse answer's question words (else empty)
    first: frozenset[str] = _EMPTY  # its capitalised first word: a name if the context lacks it
    # A terse answer to a negated question ("What did the Greeks not regard as a number?") or
    # that is a bare negation ("None."): agrees with a sentence that negates.
    negative: bool = False
    # A terse answer's kind ("year", "number", "name"; None: a phrase): the context's other words
    # of that kind are the alternatives it is weighed against (`_alternatives`).
    kind: str | None = None
    slot: str | None = None  # what the question asks for (`_slot`)
    own: frozenset[str] = _EMPTY  # a terse answer's own content words


# A terse answer's place (chosen on the dev half of bench/lexical_judge.py): question words weigh
# log((sentences + 1) / (sentences holding it + 1)) + _IDF_FLOOR; a sentence scores the weight of
# those it holds plus _WINDOW_WEIGHT x that of those within _WINDOW tokens of the answer; below
# _TERSE_ELSEWHERE of the best sentence's score, the question is answered elsewhere.
_IDF_FLOOR = 1.0
_WINDOW_WEIGHT = 1.0
_WINDOW = 5
_TERSE_ELSEWHERE = 0.4


def _weight(idf: dict[str, float], words: Iterable[str]) -> float:
    """The summed weight of these words. `math.fsum` (exact, then rounded once), not `sum`: a set's
    iteration order follows the hash seed (PYTHONHASHSEED), and float addition in another order can
    differ in the last bit, enough to flip a `>=` against a threshold or a tie between sentences."""
    return math.fsum(idf[w] for w in words)


def _window(sent: _Text, q: frozenset[str], idf: dict[str, float], centers: list[int] | None) -> float:
    """The most question weight within `_WINDOW` tokens of a center (None: of any position)."""
    at = _places(sent)[0]
    hits = sorted((k, frozenset((w,))) for w in q & sent.words for k in at[w])
    if not hits:
        return 0.0
    best = 0.0
    if centers is None:
        for j, (start, _) in enumerate(hits):
            ws: set[str] = set()
            for pos, w in hits[j:]:
                if pos - start > 2 * _WINDOW:
                    break
                ws |= w
            best = max(best, _weight(idf, ws))
        return best
    for c in centers:
        ws = set()
        for pos, w in hits:
            if abs(pos - c) <= _WINDOW:
                ws |= w
        best = max(best, _weight(idf, ws))
    return best


_OR = re.compile(r"\bor\b", re.IGNORECASE)
_CHOICE = re.compile(r"\bor\b[^,?]*\?\s*$", re.IGNORECASE)  # "..., A or B?"
_YEAR_STEM = re.compile(r"1\d{3}|20\d{2}")


def _kind(sent: _Text, numbers: frozenset[str]) -> str | None:
    """A terse answer's kind: "year", "number" or "name" (a capitalised word); None: a phrase."""
    if numbers:
        return "year" if all(_YEAR_STEM.fullmatch(n) for n in numbers) else "number"
    if any(t.names for t in sent.toks):
        return "name"
    return None


def _of_kind(t: _Tok, kind: str, first: bool) -> bool:
    if kind == "name":
        return not first and any(not n[0].isdigit() for n in t.names)
    return any(n[0].isdigit() and (kind == "year") == bool(_YEAR_STEM.fullmatch(n)) for n in t.stems)


_RUNS: dict[tuple[str, str], tuple[tuple[int, ...], ...]] = {}


def _runs(sent: _Text, kind: str) -> tuple[tuple[int, ...], ...]:
    """The runs of consecutive words of this kind in a chunk sentence, cached like its tokens
    (popular chunks come back)."""
    global _RUNS
    key = (sent.text, kind)
    got = _RUNS.get(key)
    if got is not None:
        return got
    if len(_RUNS) > _CACHE_MAX:
        _RUNS = {}  # a new dict: a caller in another thread keeps a valid one
    out: list[tuple[int, ...]] = []
    run: list[int] = []
    for k, t in enumerate((*sent.toks, None)):
        if t is not None and _of_kind(t, kind, k == 0):
            run.append(k)
        elif run:
            out.append(tuple(run))
            run = []
    got = _RUNS[key] = tuple(out)
    return got


def _alternatives(sent: _Text, kind: str, known: frozenset[str], answer: frozenset[str]) -> list[int]:
    """Positions of the sentence's words of the answer's kind that are neither the answer nor the
    question's (`known`), outside the run of such words that holds the answer ("Derek Cha": not
    "Cha" against "Derek"). A sentence's first word is no name here: it is capitalised anyway."""
    toks = sent.toks
    out: list[int] = []
    for run in _runs(sent, kind):
        if any(not answer.isdisjoint(toks[j].stems) for j in run):
            continue
        out.extend(j for j in run if known.isdisjoint(toks[j].stems))
    return out


# -- the question's slot and a name's type ------------------------------------------------------------

# What a question asks for: "person", "place", "time", "number" or "thing" (a named entity that is
# none of those: a company, a film); None: the question does not say (`_slot`).
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
    _w(
        "january february march april may june july august september october november december "
        "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
        "saturday sunday"
    )
)
_MONTH_STEMS = frozenset(_stem_slow(m) for m in _MONTHS) - {""}


def _slot(question: str) -> str | None:
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


def _fits(slot: str | None, kind: str | None, words: frozenset[str]) -> bool:
    """Whether a terse answer of this kind (`_kind`; its content words) can fill the slot: a
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
_PLACE_BEFORE = frozenset(_w("in at near from across throughout outside inside"))
_PLACE_HEADS = frozenset(
    _w("city county river island state province kingdom republic mountains mountain lake valley street bay")
)
_THING_HEADS = frozenset(
    _w(
        "inc corporation company university college club party records group team fc association "
        "institute museum church council commission agency department ministry bank band"
    )
)
_PERSON_BEFORE = frozenset(_SLOT_NOUNS["person"].split()) | frozenset(
    _w("by mr mrs ms dr sir lord lady saint st prof")
)
_DEMONYM = re.compile(r"(?:an|ese|ish|ch|i)$")  # not "ic": "the Pacific coast"
_TYPES: dict[tuple[str, int], str | None] = {}


def _type_of(sent: _Text, run: tuple[int, ...]) -> str | None:
    """What a run of name tokens in a chunk sentence is: "time" (a month or weekday), "modifier"
    (a nationality before a noun: "Qatari banker", "Indian film"), "place" ("in Leland", "Columbus,
    Ohio", "... County"), "thing" ("... University", "... Records"), "person" ("directed by",
    "actress Antara Mali", "Choi Jin-ri (born 1994)"), or None: the words around it do not say."""
    global _TYPES
    key = (sent.text, run[0])
    if key in _TYPES:
        return _TYPES[key]
    raw = sent.text.split()  # one raw token per `sent.toks` entry (`_toks`)
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
    elif len(run) == 1 and _DEMONYM.search(words[last]) and nxt[:1].islower() and after not in _STOP:
        got = "modifier"  # "Qatari banker" (a lower-case word after it: `after` is folded, `nxt` not)
    elif before in _PLACE_BEFORE:
        got = "place"
    elif before in _PERSON_BEFORE or nxt.startswith("(") or after == "born":
        got = "person"
    types = _TYPES
    if len(types) > _CACHE_MAX:
        types = _TYPES = {}  # a new dict, not clear(): a caller in another thread keeps a valid one
    types[key] = got
    return got


_PLACES: dict[str, tuple[dict[str, tuple[int, ...]], tuple[int, ...]]] = {}


def _places(sent: _Text) -> tuple[dict[str, tuple[int, ...]], tuple[int, ...]]:
    """Per word of a chunk sentence, the positions it stands at, and per position the clause breaks
    (a comma, "and", "which", ...) before it; cached like its tokens."""
    global _PLACES
    got = _PLACES.get(sent.text)
    if got is not None:
        return got
    if len(_PLACES) > _CACHE_MAX:
        _PLACES = {}  # a new dict: a caller in another thread keeps a valid one
    at: dict[str, list[int]] = {}
    cum = [0]
    for k, t in enumerate(sent.toks):
        for w in t.stems:
            at.setdefault(w, []).append(k)
        cum.append(cum[-1] + t.brk)
    got = _PLACES[sent.text] = ({w: tuple(ks) for w, ks in at.items()}, tuple(cum))
    return got


_Hits = tuple[list[tuple[str, tuple[int, ...]]], tuple[int, ...]]


def _hits(sent: _Text, q: frozenset[str]) -> _Hits:
    """Where the question's words stand in a sentence, and its clause breaks (`_places`)."""
    at, cum = _places(sent)
    return [(w, at[w]) for w in q & sent.words], cum


def _near(hits: _Hits, idf: dict[str, float], center: int) -> float:
    """The question's weight within `_WINDOW` tokens of a position (`hits`: where its words stand),
    a word at distance d counting 1 - d / (_WINDOW + 1) of its weight (its nearest occurrence),
    half that across a clause break ("meteorologist Ted Fujita, cancer researchers Charles
    Huggins": "cancer researchers" is Huggins's): the nearer, the more it says the word there is
    what the question asks for."""
    words, cum = hits
    total = []
    for w, ks in words:
        best = 0.0
        for k in ks:
            d = abs(k - center)
            if d <= _WINDOW:
                f = 1 - d / (_WINDOW + 1)
                if cum[max(k, center)] - cum[min(k, center)]:
                    f /= 2
                best = max(best, f)
        if best:
            total.append(idf[w] * best)
    return math.fsum(total) if total else 0.0


_NEIGHBOURS = 2  # content words on each side of a name that place it


def _neighbours(text: str) -> dict[str, frozenset[str]]:
    """Per name or number of a claim, the nearest `_NEIGHBOURS` other content words on each side."""
    toks = [t for t in _toks(text) if t.stems]
    out: dict[str, frozenset[str]] = {}
    for i, t in enumerate(toks):
        if not t.names:
            continue
        near: list[str] = []
        for rng in (range(i - 1, -1, -1), range(i + 1, len(toks))):
            k = 0
            for j in rng:
                if toks[j].names:
                    continue
                near.extend(toks[j].stems)
                k += 1
                if k == _NEIGHBOURS:
                    break
        for n in t.names:
            out[n] = out.get(n, _EMPTY) | frozenset(near)
    return out


def _local(near: dict[str, frozenset[str]], sent: _Text, names: frozenset[str]) -> bool:
    """Whether the sentence that supplies these names of the claim also holds a word next to each
    (`near`: the claim's `_neighbours`)."""
    return all(not near.get(n) or near[n] & sent.words for n in names)


def _near_its_words(near: dict[str, frozenset[str]], sent: _Text, names: frozenset[str]) -> bool:
    """Whether each of these names stands in the sentence within `_WINDOW` tokens of a word it
    stands next to in the claim (`near`: the claim's `_neighbours`), where the sentence has any."""
    for n in names:
        words = near.get(n, _EMPTY) & sent.words
        if not words:
            continue
        at = [k for k, t in enumerate(sent.toks) if n in t.stems]
        by = [k for k, t in enumerate(sent.toks) if not words.isdisjoint(t.stems)]
        if at and by and min(abs(a - b) for a in at for b in by) > _WINDOW:
            return False
    return True


def _opposite(marker: str) -> str:
    return marker[:-1] + ("-" if marker.endswith("+") else "+")


def _polarity(claim: _Claim, aligned: list[_Text]) -> str | None:
    """Why the claim's polarity differs from its aligned sentence(s), or None."""
    c = claim.polar
    words = frozenset().union(*(s.words for s in aligned))
    negated = frozenset().union(*(s.negated for s in aligned))
    markers = frozenset().union(*(s.markers for s in aligned))
    weak = frozenset().union(*(s.weak for s in aligned))
    # The claim negates words the sentence asserts, or asserts words the sentence negates (a word
    # negated in one place is not asserted against a negation of it in the other). A terse answer
    # to a negated question, or a bare "None.", read with a sentence that negates ("How many
    # treaties protected rights? None." / "None of the treaties mention rights"), agrees.
    agree = claim.negative and any(s.neg for s in aligned)
    if not agree and c.negated & words and not c.negated & negated:
        return "negation"
    if not agree and negated & claim.words and not negated & c.negated_any:
        return "negation"
    for m in c.markers:
        if m in markers or m in weak:
            continue
        if _opposite(m) in markers:
            return "opposite_relation"
        # A relation the sentence does not state; a question's ("born earlier, A or B?") is
        # asked, not stated.
        if not claim.query and not m.startswith(("order", "status")):
            return "missing_relation"
    return None


# A yes/no answer ("Yes.", "No, ..."), the auxiliary a yes/no question starts with, the words that
# split it into the facts it asks about, and the words that make it a comparison.
_YES_NO = re.compile(r"^\s*(?:yes|no)\b[\s.,!]*\w*[\w\s]{0,20}$", re.IGNORECASE)
_YES_NO_AUX = re.compile(
    r"^\s*(?:does|do|did|is|are|was|were|has|have|had|can|could|would|will|should)\s+", re.IGNORECASE
)
_YES_NO_PARTS = re.compile(r"\s*(?:,?\s+\b(?:and|while|whereas|but|both)\b\s+|[,;]\s+)", re.IGNORECASE)
_COMPARES = frozenset(
    _w(
        "same different differ differs difference similar consistent consistency inconsistent change "
        "changed changes shift shifted agree agreement contradict compared comparison than either "
        "equally"
    )
)


# "A and B both P" (a yes/no question's body): two entities and the property asked of both.
_BOTH = re.compile(r"^(?P<a>[A-Z][^,]*?)\s+and\s+(?P<b>[A-Z][^,]*?)\s+both\s+(?P<p>[^,]+?)\s*$")
# "both magazines, the A and B, P"
_BOTH_LISTED = re.compile(
    r"^both\s+[^,]+,\s*(?:the\s+)?(?P<a>[A-Z][^,]*?)\s+and\s+(?:the\s+)?(?P<b>[A-Z][^,]*?),\s*(?P<p>[^,]+?)\s*$"
)

# Clipped input (answer plus chunks, characters) judged on the event loop itself: ~5 ms at most.
_INLINE_CHARS = 8192


class LexicalJudge:
    """See the module docstring: an honest approximation, not a language model.

    Thresholds were chosen on the dev half of `bench/lexical_judge.py` (public QA data) and checked
    on the synthetic workload (`monitor.demo.workload`).
    """

    name = "lexical"
    model = "lexical-v2"

    def __init__(
        self,
        *,
        support_threshold: float = 0.6,
        uncertain_threshold: float = 0.35,
        terse_words: int = 3,
        terse_alignment: float = 0.5,
        decide_margin: float = 0.0,
        claim_margin: float = 0.0,
        answerable_coverage: float = 0.75,
        supported_query_coverage: float = 0.3,
        max_chunks: int = MAX_CHUNKS,
        max_chunk_chars: int = MAX_CHUNK_CHARS,
        query_types: Sequence[str] | None = None,
    ) -> None:
        """`support_threshold`: share of a claim's content words its sentence must hold to support
        it; between `uncertain_threshold` and that, the claim is `uncertain`. `terse_words`: a
        one-sentence answer with at most this many content words is read with the question, and is
        supported when the sentence holding it scores at least `terse_alignment` of the best
        sentence's question score (weighted question words in the sentence and near the answer);
        one of a kind (year, number, name) when it outscores the context's best alternative of its
        kind by `decide_margin` (relative; between that and being outscored: `uncertain`). The
        margin trades decided share for accuracy on decided (`bench/lexical_judge.py --lofo` prints
        the curve); its default, 0, is what that leave-one-family-out procedure chose for five of
        its six held-out families (docs/judges.md). `claim_margin` is the same trade for a
        sentence claim: its confidence is the share of its content words its best sentence holds
        over `support_threshold`; a claim supported by a single sentence with less than
        `claim_margin` of that to spare is `uncertain` (`low_margin`) instead.
        `max_chunks` and `max_chunk_chars` clip what is read as an LLM judge's prompt is clipped
        (`prompt.clip_record`; the judgement's `raw.clipped` says what was cut): the work grows
        faster than the text, and a 150 KB answer would otherwise hold the CPU for longer than a
        Kafka session lasts. `query_types` is accepted so one `judge.options` section serves every
        backend, and ignored: word overlap has no label of its own to give, so `judged_query_type` stays None
        rather than echoing the record's (rule-based) label as if the judge had read the query."""
        del query_types
        if max_chunks < 1 or max_chunk_chars < 100:
            raise ValueError("max_chunks must be >= 1 and max_chunk_chars >= 100")
        self.max_chunks = max_chunks
        self.max_chunk_chars = max_chunk_chars
        self._pool: ThreadPoolExecutor | None = None
        self.support_threshold = support_threshold
        self.uncertain_threshold = uncertain_threshold
        self.terse_words = terse_words
        self.terse_alignment = terse_alignment
        self.decide_margin = decide_margin
        self.claim_margin = claim_margin
        self.answerable_coverage = answerable_coverage
        self.supported_query_coverage = supported_query_coverage

    async def judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        """Small records inline (well under a millisecond: a thread hop would cost more); larger
        ones on this judge's one worker thread, so the event loop keeps polling Kafka and serving
        metrics meanwhile. One thread is enough: the work holds the GIL, and the interpreter
        hands it back to the loop's thread every switch interval (5 ms), whereas more threads
        would only queue for it. Clipping bounds one judgement (well under a second of CPU)."""
        clipped, cut = clip_record(record, max_chunks=self.max_chunks, max_chunk_chars=self.max_chunk_chars)
        size = len(clipped.answer) + sum(len(c.content or "") for c in clipped.chunks)
        if size <= _INLINE_CHARS:
            return self._judge(clipped, cut, sampling_weight)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="ragmon-lexical")
        run = functools.partial(self._judge, clipped, cut, sampling_weight)
        return await asyncio.get_running_loop().run_in_executor(self._pool, run)

    def judge_sync(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        """The same judgement without an event loop (it never waits on anything)."""
        clipped, cut = clip_record(record, max_chunks=self.max_chunks, max_chunk_chars=self.max_chunk_chars)
        return self._judge(clipped, cut, sampling_weight)

    def _judge(self, record: RagRecord, cut: dict[str, int] | None, sampling_weight: float) -> Judgement:
        t0 = time.perf_counter()
        chunks = [_Chunk(c.id, *_chunk(c.content)) for c in record.chunks if c.content]
        refusal = is_refusal(record.answer)
        query = _content(record.query) - _QUESTION_ONLY
        sentences = [_LEAD_IN.sub("", s) for s in split_claims(record.answer)]
        sentences = [s for s in sentences if s and not (refusal and is_refusal(s))]
        verdicts: list[Claim] = []
        answer_words: set[str] = set()
        supported_words: set[str] = set()
        for sentence in sentences:
            if len(sentences) == 1 and _YES_NO.match(sentence):
                verdicts.append(self._yes_no(record.query, sentence, chunks))
                continue
            claim = self._claim(sentence, record.query, query, terse=len(sentences) == 1)
            if claim is None:
                continue
            answer_words |= claim.words
            verdict = self._verdict(claim, chunks)
            if verdict.supported:
                supported_words |= claim.words
            verdicts.append(verdict)

        coverage = supported_coverage = 0.0
        if query:
            if chunks:
                coverage = max(len(query & c.words) for c in chunks) / len(query)
            supported_coverage = len(query & supported_words) / len(query)
        decided = [v for v in verdicts if v.verdict is not Verdict.UNCERTAIN]
        supported = sum(v.supported for v in decided)
        if refusal:  # nothing taken from the context to go by: the query's coverage decides
            answerable = coverage >= self.answerable_coverage
        else:  # what the answer could take from the context, and whether that is on the query's topic
            answerable = supported > 0 and (
                supported * 2 > len(decided)
                or supported_coverage >= self.supported_query_coverage
                or (coverage >= self.answerable_coverage and supported_coverage > 0)
            )
        relevance: Literal[1, 2, 3] = 1
        if query and not refusal:
            overlap = len(query & answer_words) / len(query)
            relevance = 3 if overlap >= 0.5 else 2 if overlap >= 0.2 else 1
        judgement = Judgement.from_verdicts(
            verdicts,
            answerable_from_context=answerable,
            answer_admits_uncertainty=refusal,
            answer_relevance=relevance,
            trace_id=record.trace_id,
            query_type=record.query_type,
            service=record.service,
            backend=self.name,
            model=self.model,
            sampling_weight=sampling_weight,
            raw={
                "query_coverage": round(coverage, 3),
                "supported_query_coverage": round(supported_coverage, 3),
                "uncertain_claims": len(verdicts) - len(decided),
                **({"clipped": cut} if cut else {}),
            },
        )
        if not decided and not refusal:
            # No claim decided (or none found): no hallucination verdict either, rather than a
            # confident one (`Judgement.undecided` gives the reason).
            judgement.answerable_from_context = judgement.hallucinated = judgement.false_refusal = None
        judgement.cost_usd = 0.0
        judgement.latency_s = time.perf_counter() - t0
        return judgement

    def _claim(self, sentence: str, question: str, query: frozenset[str], *, terse: bool) -> _Claim | None:
        """A sentence's claim (None: too short to be one); a terse answer's is read with the
        question ("1990." -> "When was Acme founded? 1990.")."""
        sent = _analyse(sentence)
        words = sent.words
        numbers = frozenset(w for w in words if w[0].isdigit())
        # A name or number however long ("Utah State Senate Minority Leader Scott Howell.") is
        # as terse as "1990.": it states nothing without the question.
        short = len(words) <= self.terse_words or all(t.names for t in sent.toks if t.stems)
        if terse and short and query and not query <= words:
            # The answer's names and numbers are required (or, without any, all its words: it is
            # the whole answer); the question's words align it with the sentence that answers it,
            # and the question's negations and relations count too.
            both = _analyse(f"{question} {sentence}")
            required = (sent.names | numbers) or words
            return _Claim(
                f"{question.strip()} {sentence}",
                words | query,
                required,
                numbers,
                both,
                query,
                negative=_analyse(question).neg or (sent.neg and not sent.negated_any),
                # "Who is older, A or B?" answered "B": the other side is the alternative.
                kind=(
                    "choice"
                    if _CHOICE.search(question) or (_OR.search(question) and required <= query)
                    else _kind(sent, numbers)
                ),
                slot=_slot(question),
                own=words,
            )
        if len(words) < 2:
            return None
        # A name the question gives ("Safe Haven took place in ...") is its topic, not a claim.
        required = (sent.names | numbers) - query
        toks = sent.toks
        lead = toks[0] if toks else None
        first = (
            frozenset(lead.stems[:1]) - query
            if lead and lead.names and not lead.names[0][0].isdigit()
            else _EMPTY
        )
        return _Claim(sentence, words, required, numbers - query, sent, frozenset(), first - required)

    def _yes_no(self, question: str, answer: str, chunks: list[_Chunk]) -> Claim:
        """A yes/no answer: the question's facts (its parts around "and", "while", ", ") are each
        looked for as a claim. Decided only when every one is found, in a sentence that holds
        `support_threshold` of its words and its names, and the question compares nothing ("the
        same", "consistent", "before", "more", ...: word overlap cannot compare): then "yes" is
        supported and "no" contradicted. Otherwise undecided: a fact not found is no evidence
        either way."""
        yes = answer.strip().lower().startswith("yes")
        text = f"{question.strip()} {answer.strip()}"
        body = _YES_NO_AUX.sub("", question.strip().rstrip("?"))
        low = _analyse(body.lower())
        if _COMPARES.intersection(t.lower() for t in _TOKEN.findall(body)) or low.markers or low.weak:
            return Claim(text, Verdict.UNCERTAIN, note="yes_no_comparison")
        both = self._both(body, text, yes, chunks)
        if both is not None:
            return both
        found: list[Claim] = []
        for part in _YES_NO_PARTS.split(body):
            claim = self._claim(part, question, _EMPTY, terse=False)
            if claim is None:
                continue
            verdict = self._verdict(claim, chunks)
            if verdict.verdict is not Verdict.SUPPORTED:
                return Claim(text, Verdict.UNCERTAIN, note="yes_no_fact_missing")
            found.append(verdict)
        if not found:
            return Claim(text, Verdict.UNCERTAIN, note="yes_no_fact_missing")
        quote = [q for v in found for q in v.evidence]
        if yes:
            ids = list(dict.fromkeys(i for v in found for i in v.chunk_ids))
            return Claim(text, Verdict.SUPPORTED, chunk_ids=ids, evidence=quote)
        return Claim(text, Verdict.CONTRADICTED, evidence=quote, note="yes_no_facts_found")

    def _both(self, body: str, text: str, yes: bool, chunks: list[_Chunk]) -> Claim | None:
        """ "Are A and B both P?": each entity looked for with the property. Yes when both hold it
        (a sentence naming the entity holds `support_threshold` of P's words and all its names); no
        when a sentence naming one gives it another value of P's named kind ("American
        directors" vs "an Austrian-Hungarian film director": another nationality); undecided
        otherwise (None: not of this form)."""
        m = _BOTH.match(body) or _BOTH_LISTED.match(body)
        if m is None:
            return None
        prop = _analyse(m.group("p"), first_is_name=True)
        want, named = prop.words, prop.names
        if not want:
            return None
        holds: list[Quote] = []
        others: list[Quote] = []
        for entity in (m.group("a"), m.group("b")):
            e = _analyse(entity, first_is_name=True)
            names = e.names or e.words
            about = [
                (c, t)
                for c in chunks
                for t, ante in zip(c.sentences, c.antecedents, strict=True)
                if names <= t.words | ante
            ]
            has = next(
                (
                    Quote(c.id, t.text, True)
                    for c, t in about
                    if named <= t.words and len(want & t.words) >= self.support_threshold * len(want)
                ),
                None,
            )
            if has is not None:
                holds.append(has)
                continue
            for c, t in about if named else ():
                rival = {n for tok in t.toks for n in tok.names if _DEMONYM.search(n) and n not in names}
                if rival - named and named.isdisjoint(t.words):
                    others.append(Quote(c.id, t.text, True))
                    break
        if others:  # one of them has another value of the property's kind: the answer is no
            if yes:
                return Claim(text, Verdict.CONTRADICTED, evidence=others, note="yes_no_facts_found")
            return Claim(text, Verdict.SUPPORTED, chunk_ids=[q.chunk_id for q in others], evidence=others)
        if len(holds) < 2:
            return Claim(text, Verdict.UNCERTAIN, note="yes_no_fact_missing")
        if yes:
            return Claim(
                text,
                Verdict.SUPPORTED,
                chunk_ids=list(dict.fromkeys(q.chunk_id for q in holds)),
                evidence=holds,
            )
        return Claim(text, Verdict.CONTRADICTED, evidence=holds, note="yes_no_facts_found")

    def _verdict(self, claim: _Claim, chunks: list[_Chunk]) -> Claim:
        """Aligns the claim with its best sentence; see the module docstring for the rules."""
        total = len(claim.words)
        if claim.first:
            # "Florida quantities are ...": a capitalised first word the context has nowhere is a
            # name (an invented one); one it has is read as an ordinary word.
            extra = claim.first - frozenset().union(*(c.words for c in chunks))
            if extra:
                claim = dataclasses.replace(claim, required=claim.required | extra)
        required, numbers, query = claim.required, claim.numbers, claim.query
        # (claim words held, question words held, the requirements are met, chunk, sentence, antecedents)
        rows: list[tuple[int, int, bool, _Chunk, _Text, frozenset[str]]] = []
        for chunk in chunks:
            for sent, ante in zip(chunk.sentences, chunk.antecedents, strict=True):
                shared = claim.words & sent.words
                missing = required - shared
                hits = len(shared)
                if missing and ante and not query:  # a terse answer's own words must be there
                    hits += len(missing & ante)
                    missing = missing - ante
                q_hits = len(query & (sent.words | ante)) if query else 0
                rows.append((hits, q_hits, not missing and numbers <= sent.words, chunk, sent, ante))
        if not rows:
            return Claim(claim.text, Verdict.NOT_IN_CONTEXT, note="no_context")
        ok = [r for r in rows if r[2]]
        if query:
            return self._terse_verdict(claim, ok, rows)
        if ok:
            hits, _, _, chunk, sent, _ = max(ok, key=lambda r: r[0])
            if hits >= self.support_threshold * total:
                if hits < (self.support_threshold + self.claim_margin) * total:
                    # Barely aligned: a confidence under `claim_margin` is no verdict either way
                    # (unless the polarity flips: that is decided whatever the margin).
                    return self._checked(claim, [(chunk, sent)], Verdict.UNCERTAIN, "low_margin")
                return self._checked(claim, [(chunk, sent)])
        pair, loose = self._pair(claim, rows)
        if pair is not None:
            return self._placed(claim, pair)
        if ok and hits >= self.uncertain_threshold * total:
            return self._checked(claim, [(chunk, sent)], Verdict.UNCERTAIN, "low_alignment")
        everywhere = frozenset().union(*(c.words for c in chunks))
        if not required <= everywhere:
            return Claim(claim.text, Verdict.NOT_IN_CONTEXT, note="missing_name_or_number")
        hits, _, _, chunk, sent, _ = max(rows, key=lambda r: r[0])
        if hits >= self.support_threshold * total:
            # The sentence that states the rest of the claim gives another number, or lacks a name.
            quote = [Quote(chunk.id, sent.text, True)]
            if numbers - sent.words and any(w[0].isdigit() for w in sent.words - claim.words):
                return Claim(claim.text, Verdict.CONTRADICTED, evidence=quote, note="other_number")
            return Claim(claim.text, Verdict.NOT_IN_CONTEXT, evidence=quote, note="name_or_number_elsewhere")
        if loose is not None:
            # Two sentences state the rest of the claim, without its name or number.
            quote = [Quote(c.id, t.text, True) for c, t in loose]
            return Claim(claim.text, Verdict.NOT_IN_CONTEXT, evidence=quote, note="name_or_number_elsewhere")
        if hits >= self.uncertain_threshold * total:
            return Claim(claim.text, Verdict.UNCERTAIN, note="spread_over_sentences")
        return Claim(claim.text, Verdict.NOT_IN_CONTEXT, note="low_alignment")

    def _pair(
        self, claim: _Claim, rows: list[tuple[int, int, bool, _Chunk, _Text, frozenset[str]]]
    ) -> tuple[list[tuple[_Chunk, _Text]] | None, list[tuple[_Chunk, _Text]] | None]:
        """Two sentences that together state the claim (an answer often joins two; a multi-hop
        claim needs two chunks), each adding at least `_PAIR_MIN_WORDS` of the claim's words the
        other lacks: a lone number or name from a second sentence does not make a pair, and a name
        one sentence supplies must stand there next to a word it stands next to in the claim.
        Returns that pair (or None), and the best pair that would state it but for its names and
        numbers (or None): evidence that a name or number was taken from elsewhere."""
        total = len(claim.words)
        top = sorted(rows, key=lambda r: -r[0])[:_PAIR_CANDIDATES]
        best: tuple[int, list[tuple[_Chunk, _Text]]] | None = None
        loose: tuple[int, list[tuple[_Chunk, _Text]]] | None = None
        need = self.support_threshold * total
        near: dict[str, frozenset[str]] | None = None  # the claim's `_neighbours`, once it is needed
        for i, (_, _, _, c1, s1, a1) in enumerate(top):
            w1 = claim.words & s1.words
            for _, _, _, c2, s2, a2 in top[i + 1 :]:
                w2 = claim.words & s2.words
                if len(w1 - w2) < _PAIR_MIN_WORDS or len(w2 - w1) < _PAIR_MIN_WORDS:
                    continue
                held = w1 | w2
                hits = len(held) + len((claim.required - held) & (a1 | a2))
                if hits < need:
                    continue
                pair = [(c1, s1), (c2, s2)]
                named = claim.numbers <= held and claim.required <= held | a1 | a2
                if named:
                    from2, from1 = claim.required - s1.words - a1, claim.required - s2.words - a2
                    if from2 or from1:
                        if near is None:
                            near = _neighbours(claim.text)
                        if not (_local(near, s2, from2) and _local(near, s1, from1)):
                            named = False  # a name taken from the other sentence, away from its words
                if named and (best is None or hits > best[0]):
                    best = (hits, pair)
                elif not named and (loose is None or hits > loose[0]):
                    loose = (hits, pair)
        return (best[1] if best else None), (loose[1] if loose else None)

    def _placed(self, claim: _Claim, aligned: list[tuple[_Chunk, _Text]]) -> Claim:
        """Supported by a sentence pair, unless one of them holds a name of the claim more than
        `_WINDOW` tokens away from the words it stands next to in the claim ("school begins in
        United States and late July" on "school begins in August and late July" + "In the United
        States, educational policy ..."): those words may be said there of another name, so the
        claim is `uncertain` (`name_misplaced`)."""
        names = claim.required - claim.query
        if names:
            near = _neighbours(claim.text)
            for _, sent in aligned:
                if not _near_its_words(near, sent, names & sent.words):
                    quote = [Quote(c.id, t.text, True) for c, t in aligned]
                    flip = _polarity(claim, [t for _, t in aligned])
                    if flip is not None:
                        return self._checked(claim, aligned)
                    return Claim(claim.text, Verdict.UNCERTAIN, evidence=quote, note="name_misplaced")
        return self._checked(claim, aligned)

    def _checked(
        self,
        claim: _Claim,
        aligned: list[tuple[_Chunk, _Text]],
        verdict: Verdict = Verdict.SUPPORTED,
        note: str | None = None,
    ) -> Claim:
        """The verdict once negation and relations are compared with the aligned sentence(s)."""
        quote = [Quote(chunk.id, sent.text, True) for chunk, sent in aligned]
        flip = _polarity(claim, [sent for _, sent in aligned])
        if flip == "negation" and claim.query:
            # A terse answer states no negation of its own: a sentence that negates near the
            # question's words is read either way ("X, not Y, won"), so it is not evidence against.
            return Claim(claim.text, Verdict.UNCERTAIN, evidence=quote, note=flip)
        if flip is not None:
            bad = Verdict.NOT_IN_CONTEXT if flip == "missing_relation" else Verdict.CONTRADICTED
            return Claim(claim.text, bad, evidence=quote, note=flip)
        if verdict is Verdict.SUPPORTED and not claim.query and claim.polar.negated:
            said = frozenset().union(*(sent.words for _, sent in aligned))
            if claim.polar.negated.isdisjoint(said):
                # The claim negates words its sentence does not hold at all ("X is not the oldest
                # trophy" on "X is a trophy awarded to ..."): the rest aligns, the negation is
                # unchecked, so the verdict is no more confident than a guess.
                return Claim(claim.text, Verdict.UNCERTAIN, evidence=quote, note="negation_unchecked")
        if verdict is Verdict.SUPPORTED:
            ids = list(dict.fromkeys(chunk.id for chunk, _ in aligned))
            return Claim(claim.text, verdict, chunk_ids=ids, evidence=quote)
        return Claim(claim.text, verdict, evidence=quote, note=note)

    def _terse_verdict(
        self,
        claim: _Claim,
        ok: list[tuple[int, int, bool, _Chunk, _Text, frozenset[str]]],
        rows: list[tuple[int, int, bool, _Chunk, _Text, frozenset[str]]],
    ) -> Claim:
        """A terse answer: its words must be in a sentence (its own words: not through "he" or
        "it"), and that sentence must be the one the question points at. Each sentence scores the
        question words it holds, weighted by how rare they are in the context, plus those near the
        answer; a multi-hop question spreads over chunks, so a sentence of another chunk that
        names what the answer's sentence is about adds the question words it holds (the bridge).

        An answer of a kind (a year, a number, a name) is weighed against the context's other
        words of that kind, scored alike (`_alternatives`): supported when it outscores the best of
        them by `decide_margin` (relative), contradicted when one in another sentence outscores it
        and its own sentence scores under `_TERSE_ELSEWHERE` of the best sentence
        (`question_answered_elsewhere`), undecided otherwise (`same_kind_alternative`). A
        phrase answer is compared with the best-scoring sentence (`terse_alignment`). The other
        side of a comparison ("A or B?") is not checked: undecided."""
        if not ok:
            everywhere = frozenset().union(*(r[4].words for r in rows))
            if not claim.required <= everywhere:
                return Claim(claim.text, Verdict.NOT_IN_CONTEXT, note="answer_not_in_context")
            return Claim(claim.text, Verdict.UNCERTAIN, note="answer_spread_over_sentences")
        if claim.kind == "choice":
            return Claim(claim.text, Verdict.UNCERTAIN, note="comparison_not_checked")
        types: list[str | None] = []  # the answer's type where it stands (`_type_of`)
        if claim.kind == "name":
            for r in ok:
                for run in _runs(r[4], "name"):
                    if any(not claim.required.isdisjoint(r[4].toks[k].stems) for k in run):
                        types.append(_type_of(r[4], run))
        mine_type = next((t for t in types if t is not None), None)
        slot = claim.slot
        if not _fits(slot, claim.kind, claim.own) or (
            slot in ("person", "place", "thing") and types and all(t in ("time", "modifier") for t in types)
        ):
            # "Which writer ...? February." / "What company ...? 4." / "Which club ...? Qatari.":
            # not the kind of thing the question asks for, wherever the context holds it.
            return Claim(claim.text, Verdict.NOT_IN_CONTEXT, note="answer_not_of_asked_kind")
        q = claim.query
        n = len(rows)
        df: dict[str, int] = dict.fromkeys(q, 0)
        for r in rows:
            for w in q & (r[4].words | r[5]):
                df[w] += 1
        idf = {w: math.log((n + 1) / (d + 1)) + _IDF_FLOOR for w, d in df.items()}
        bridges: dict[int, frozenset[str]] = {}
        weights: dict[frozenset[str], float] = {}

        def weight(words: frozenset[str]) -> float:
            """`_weight`, once per distinct set of question words (they repeat across sentences)."""
            got = weights.get(words)
            if got is None:
                got = weights[words] = _weight(idf, words)
            return got

        q_of = [q & r[4].words for r in rows]
        q_rows = [j for j, w in enumerate(q_of) if w]

        def bridge(i: int) -> frozenset[str]:
            """Multi-hop: a sentence of another chunk that names what this sentence is about (its
            subject, or its chunk's) adds the question words it holds: "... by singer-songwriter
            M. Ward." + "Ward is a singer-songwriter from Portland, Oregon." """
            got = bridges.get(i)
            if got is not None:
                return got
            _, _, _, chunk, sent, ante = rows[i]
            about = sent.subject | (chunk.sentences[0].subject if chunk.sentences else _EMPTY)
            if claim.kind is not None:  # any name it holds but the answer's: the bridge entity
                about = (about | sent.names) - claim.required
            own = q & (sent.words | ante)
            out, best = _EMPTY, 0.0
            if about:
                for j in q_rows:
                    b = rows[j]
                    if b[3] is not chunk and not about.isdisjoint(b[4].words):
                        extra = q_of[j] - own
                        if extra and (w := weight(extra)) > best:
                            out, best = extra, w
            bridges[i] = out
            return out

        def base(i: int) -> float:
            sent, ante = rows[i][4], rows[i][5]
            return weight(q & (sent.words | ante)) + weight(bridge(i))

        def score(sent: _Text, ante: frozenset[str], centers: list[int] | None) -> float:
            held = _weight(idf, q & (sent.words | ante))
            return held + _WINDOW_WEIGHT * _window(sent, q, idf, centers)

        def located() -> tuple[float, int]:
            """The answer's best sentence (its row) and its score over the best sentence's."""
            best = max(score(r[4], r[5], None) for r in rows)
            scored = []
            for i, r in enumerate(rows):
                if not r[2]:
                    continue
                sent = r[4]
                centers = [k for k, t in enumerate(sent.toks) if claim.required.intersection(t.stems)]
                scored.append((score(sent, r[5], centers) + weight(bridge(i)), i))
            got, i = max(scored, key=lambda x: x[0])
            return (got / best if best else 0.0), i

        def can_rival(sent: _Text, k: int) -> bool:
            """Whether the name at k can be what the question asks for, as the answer is: its type
            (`_type_of`) fits the question's slot and the answer's own type, where they are known."""
            run = next(run for run in _runs(sent, "name") if k in run)
            got = _type_of(sent, run)
            if got is None:
                return True
            if got in ("time", "modifier"):
                return got == mine_type
            return (mine_type is None or got == mine_type) and slot in (None, got)

        if claim.kind is not None:
            # The answer and each alternative scored alike: the question words of every sentence
            # that holds it (with their bridges: a multi-hop answer is named by several facts),
            # plus those near it in its best sentence, nearer weighing more.
            mine_words: set[str] = set()
            mine_row = -1
            rivals: dict[str, tuple[frozenset[str], float, int]] = {}  # stem: (words held, nearness, row)
            # A name of another chunk that the answer's chunk also holds links the two (the bridge
            # entity of a multi-hop question: "played for the Philadelphia Eagles" -> "The
            # Philadelphia Eagles are ... based in Pennsylvania"): no alternative to the answer.
            # So is a name the answer's own sentence shares with a chunk that lacks the answer
            # ("Maximum Overdrive ... directed by Stephen King" + "Maximum Overdrive was shot in
            # Leland").
            homes = {id(r[3]) for r in ok}
            linked = frozenset().union(*(r[3].words for r in ok))
            away = frozenset().union(*(r[4].words for r in rows if id(r[3]) not in homes))
            bridged = claim.words | (frozenset().union(*(r[4].words for r in ok)) & away)
            mine_best = mine_near_of_row = 0.0
            for i, r in enumerate(rows):
                sent = r[4]
                toks = sent.toks
                mine = [k for k, t in enumerate(toks) if claim.required.intersection(t.stems)] if r[2] else []
                others = _alternatives(
                    sent, claim.kind, bridged if id(r[3]) in homes else claim.words | linked, claim.required
                )
                if others and claim.kind == "name":
                    others = [k for k in others if can_rival(sent, k)]
                if not mine and not others:
                    continue
                held = (q & (sent.words | r[5])) | bridge(i)
                hits = _hits(sent, q)
                if mine:
                    mine_words |= held
                    near = max(_near(hits, idf, k) for k in mine)
                    if mine_row < 0 or weight(held) + near > mine_best:
                        mine_best, mine_near_of_row, mine_row = weight(held) + near, near, i
                for k in others:
                    here = _near(hits, idf, k) if hits[0] else 0.0
                    for st in toks[k].stems:
                        was = rivals.get(st)
                        if was is None:
                            rivals[st] = (held, here, i)
                        else:
                            near_at = (here, i) if here > was[1] else (was[1], was[2])
                            rivals[st] = (was[0] | held, *near_at)
            got = rival = 0.0
            rival_row = -1
            if mine_row >= 0:
                got = _weight(idf, mine_words) + _WINDOW_WEIGHT * mine_near_of_row
            for words, near, row in rivals.values():
                got_r = weight(words) + _WINDOW_WEIGHT * near
                if got_r > rival:
                    rival, rival_row = got_r, row
            answer = (got, mine_row)
            rival_at = (rival, rival_row)
            got, i = answer
            _, q_hits, _, chunk, sent, _ = rows[i]
            top = max(got, rival)
            margin = (got - rival) / top if top > 0 else 0.0
            if got > 0 and margin >= self.decide_margin and (q_hits >= 1 or bridge(i)):
                return self._checked(claim, [(chunk, sent)])
            other = rows[rival_at[1]] if rival_at[1] >= 0 else rows[i]
            if margin < 0 and not claim.required <= other[4].words and located()[0] < _TERSE_ELSEWHERE:
                # Where the question points, another sentence gives another answer of this kind
                # (one in the answer's own sentence, a list, leaves it undecided).
                quote = [Quote(other[3].id, other[4].text, True)]
                return Claim(
                    claim.text, Verdict.CONTRADICTED, evidence=quote, note="question_answered_elsewhere"
                )
            # The answer's sentence and the best alternative's: what a reader compares.
            quote = [Quote(chunk.id, sent.text, True)]
            if other is not rows[i]:
                quote.append(Quote(other[3].id, other[4].text, True))
            return Claim(claim.text, Verdict.UNCERTAIN, evidence=quote, note="same_kind_alternative")

        ratio, i = located()
        _, q_hits, _, chunk, sent, _ = rows[i]
        if q_hits >= 1 and ratio >= self.terse_alignment:
            return self._checked(claim, [(chunk, sent)])
        if ratio < _TERSE_ELSEWHERE:
            # Another sentence states what the question asks, without this answer.
            quote = [Quote(chunk.id, sent.text, True)]
            return Claim(
                claim.text, Verdict.NOT_IN_CONTEXT, evidence=quote, note="question_answered_elsewhere"
            )
        return self._checked(claim, [(chunk, sent)], Verdict.UNCERTAIN, "low_alignment")

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
