"""Claims as the lexical judge aligns them: the words an answer sentence claims and must have found
(`make_claim`), and its polarity against the aligned sentence(s) (`checked`)."""

from __future__ import annotations

from dataclasses import dataclass

from monitor.contracts.model import Claim, Quote, Verdict
from monitor.judge.lexical.slots import CHOICE, OR, kind_of, slot_of
from monitor.judge.lexical.text import EMPTY, Passage, Sentence, analyse


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The judge's settings that its verdicts on claims read (`LexicalJudge.__init__` says what each
    does)."""

    support_threshold: float = 0.6
    uncertain_threshold: float = 0.35
    terse_words: int = 3
    terse_alignment: float = 0.5
    decide_margin: float = 0.0
    claim_margin: float = 0.0


@dataclass(frozen=True, slots=True)
class ClaimWords:
    """A claim as it is aligned: its words, what must be found, and what its polarity is."""

    text: str
    words: frozenset[str]
    required: frozenset[str]  # names (and, for a terse answer, every answer word)
    numbers: frozenset[str]
    polar: Sentence  # negations and relations (a terse answer's: the question's and its own)
    query: frozenset[str]  # a terse answer's question words (else empty)
    first: frozenset[str] = EMPTY  # its capitalised first word: a name if the context lacks it
    # A terse answer to a negated question ("What did the Greeks not regard as a number?") or
    # that is a bare negation ("None."): agrees with a sentence that negates.
    negative: bool = False
    # A terse answer's kind ("year", "number", "name"; None: a phrase): the context's other words
    # of that kind are the alternatives it is weighed against (`alternatives`).
    kind: str | None = None
    slot: str | None = None  # what the question asks for (`slot_of`)
    own: frozenset[str] = EMPTY  # a terse answer's own content words


# One chunk sentence as a claim's candidate: (claim words it holds, question words it holds, whether
# the claim's names and numbers are all there, its chunk, the sentence, the names it refers back to).
Row = tuple[int, int, bool, Passage, Sentence, frozenset[str]]
WINDOW = 5  # tokens either side of a word that stand near it


def _opposite(marker: str) -> str:
    return marker[:-1] + ("-" if marker.endswith("+") else "+")


def polarity(claim: ClaimWords, aligned: list[Sentence]) -> str | None:
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


def make_claim(
    sentence: str, question: str, query: frozenset[str], *, terse: bool, terse_words: int
) -> ClaimWords | None:
    """A sentence's claim (None: too short to be one); a terse answer's (the answer is one
    sentence, `terse`, of at most `terse_words` content words or only names) is read with the
    question ("1990." -> "When was Acme founded? 1990.")."""
    sent = analyse(sentence)
    words = sent.words
    numbers = frozenset(w for w in words if w[0].isdigit())
    # A name or number however long ("Utah State Senate Minority Leader Scott Howell.") is
    # as terse as "1990.": it states nothing without the question.
    short = len(words) <= terse_words or all(t.names for t in sent.toks if t.stems)
    if terse and short and query and not query <= words:
        # The answer's names and numbers are required (or, without any, all its words: it is
        # the whole answer); the question's words align it with the sentence that answers it,
        # and the question's negations and relations count too.
        both = analyse(f"{question} {sentence}")
        required = (sent.names | numbers) or words
        return ClaimWords(
            f"{question.strip()} {sentence}",
            words | query,
            required,
            numbers,
            both,
            query,
            negative=analyse(question).neg or (sent.neg and not sent.negated_any),
            # "Who is older, A or B?" answered "B": the other side is the alternative.
            kind=(
                "choice"
                if CHOICE.search(question) or (OR.search(question) and required <= query)
                else kind_of(sent, numbers)
            ),
            slot=slot_of(question),
            own=words,
        )
    if len(words) < 2:
        return None
    # A name the question gives ("Safe Haven took place in ...") is its topic, not a claim.
    required = (sent.names | numbers) - query
    toks = sent.toks
    lead = toks[0] if toks else None
    first = (
        frozenset(lead.stems[:1]) - query if lead and lead.names and not lead.names[0][0].isdigit() else EMPTY
    )
    return ClaimWords(sentence, words, required, numbers - query, sent, frozenset(), first - required)


def checked(
    claim: ClaimWords,
    aligned: list[tuple[Passage, Sentence]],
    verdict: Verdict = Verdict.SUPPORTED,
    note: str | None = None,
) -> Claim:
    """The verdict once negation and relations are compared with the aligned sentence(s)."""
    quote = [Quote(chunk.id, sent.text, True) for chunk, sent in aligned]
    flip = polarity(claim, [sent for _, sent in aligned])
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
