"""A yes/no answer ("Yes.", "No, ..."): decided only when every fact the question asks about is
found, never for a comparison."""

from __future__ import annotations

import re

from monitor.contracts.model import Claim, Quote, Verdict
from monitor.judge.lexical.align import verdict
from monitor.judge.lexical.claims import Thresholds, make_claim
from monitor.judge.lexical.slots import DEMONYM
from monitor.judge.lexical.text import EMPTY, Passage, analyse
from monitor.judge.lexical.words import TOKEN, word_list

# A yes/no answer ("Yes.", "No, ..."), the auxiliary a yes/no question starts with, the words that
# split it into the facts it asks about, and the words that make it a comparison.
YES_NO = re.compile(r"^\s*(?:yes|no)\b[\s.,!]*\w*[\w\s]{0,20}$", re.IGNORECASE)
_AUX = re.compile(
    r"^\s*(?:does|do|did|is|are|was|were|has|have|had|can|could|would|will|should)\s+", re.IGNORECASE
)
_PARTS = re.compile(r"\s*(?:,?\s+\b(?:and|while|whereas|but|both)\b\s+|[,;]\s+)", re.IGNORECASE)
_COMPARES = frozenset(
    word_list(
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


def yes_no_verdict(question: str, answer: str, chunks: list[Passage], th: Thresholds) -> Claim:
    """A yes/no answer: the question's facts (its parts around "and", "while", ", ") are each
    looked for as a claim. Decided only when every one is found, in a sentence that holds
    `support_threshold` of its words and its names, and the question compares nothing ("the
    same", "consistent", "before", "more", ...: word overlap cannot compare): then "yes" is
    supported and "no" contradicted. Otherwise undecided: a fact not found is no evidence
    either way."""
    yes = answer.strip().lower().startswith("yes")
    text = f"{question.strip()} {answer.strip()}"
    body = _AUX.sub("", question.strip().rstrip("?"))
    low = analyse(body.lower())
    if _COMPARES.intersection(t.lower() for t in TOKEN.findall(body)) or low.markers or low.weak:
        return Claim(text, Verdict.UNCERTAIN, note="yes_no_comparison")
    both = _both(body, text, yes, chunks, th.support_threshold)
    if both is not None:
        return both
    found: list[Claim] = []
    for part in _PARTS.split(body):
        claim = make_claim(part, question, EMPTY, terse=False, terse_words=th.terse_words)
        if claim is None:
            continue
        got = verdict(claim, chunks, th)
        if got.verdict is not Verdict.SUPPORTED:
            return Claim(text, Verdict.UNCERTAIN, note="yes_no_fact_missing")
        found.append(got)
    if not found:
        return Claim(text, Verdict.UNCERTAIN, note="yes_no_fact_missing")
    quote = [q for v in found for q in v.evidence]
    if yes:
        ids = list(dict.fromkeys(i for v in found for i in v.chunk_ids))
        return Claim(text, Verdict.SUPPORTED, chunk_ids=ids, evidence=quote)
    return Claim(text, Verdict.CONTRADICTED, evidence=quote, note="yes_no_facts_found")


def _both(body: str, text: str, yes: bool, chunks: list[Passage], support_threshold: float) -> Claim | None:
    """ "Are A and B both P?": each entity looked for with the property. Yes when both hold it
    (a sentence naming the entity holds `support_threshold` of P's words and all its names); no
    when a sentence naming one gives it another value of P's named kind ("American
    directors" vs "an Austrian-Hungarian film director": another nationality); undecided
    otherwise (None: not of this form)."""
    m = _BOTH.match(body) or _BOTH_LISTED.match(body)
    if m is None:
        return None
    prop = analyse(m.group("p"), first_is_name=True)
    if not prop.words:
        return None
    holds: list[Quote] = []
    others: list[Quote] = []
    for entity in (m.group("a"), m.group("b")):
        has, other = _entity(entity, prop.words, prop.names, chunks, support_threshold)
        if has is not None:
            holds.append(has)
        elif other is not None:
            others.append(other)
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


def _entity(
    entity: str, want: frozenset[str], named: frozenset[str], chunks: list[Passage], support_threshold: float
) -> tuple[Quote | None, Quote | None]:
    """Of the sentences naming `entity`, the first that holds the property (`want`, its words;
    `named`, its names), else the first that gives the entity another value of its named kind."""
    e = analyse(entity, first_is_name=True)
    names = e.names or e.words
    about = [
        (c, t)
        for c in chunks
        for t, ante in zip(c.sentences, c.antecedents, strict=True)
        if names <= t.words | ante
    ]
    for c, t in about:
        if named <= t.words and len(want & t.words) >= support_threshold * len(want):
            return Quote(c.id, t.text, True), None
    for c, t in about if named else ():
        rival = {n for tok in t.toks for n in tok.names if DEMONYM.search(n) and n not in names}
        if rival - named and named.isdisjoint(t.words):
            return None, Quote(c.id, t.text, True)
    return None, None
