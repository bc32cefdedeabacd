"""A claim aligned with the context's sentences: one sentence or a pair that states it, its names and
numbers found where they stand, or why not (`verdict`)."""

from __future__ import annotations

import dataclasses

from monitor.contracts.model import Claim, Quote, Verdict
from monitor.judge.lexical.claims import WINDOW, ClaimWords, Row, Thresholds, checked, polarity
from monitor.judge.lexical.terse import terse_verdict
from monitor.judge.lexical.text import EMPTY, Passage, Sentence, tokens

_NEIGHBOURS = 2  # content words on each side of a name that place it


def _neighbours(text: str) -> dict[str, frozenset[str]]:
    """Per name or number of a claim, the nearest `_NEIGHBOURS` other content words on each side."""
    toks = [t for t in tokens(text) if t.stems]
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
            out[n] = out.get(n, EMPTY) | frozenset(near)
    return out


def _local(near: dict[str, frozenset[str]], sent: Sentence, names: frozenset[str]) -> bool:
    """Whether the sentence that supplies these names of the claim also holds a word next to each
    (`near`: the claim's `_neighbours`)."""
    return all(not near.get(n) or near[n] & sent.words for n in names)


def _near_its_words(near: dict[str, frozenset[str]], sent: Sentence, names: frozenset[str]) -> bool:
    """Whether each of these names stands in the sentence within `WINDOW` tokens of a word it
    stands next to in the claim (`near`: the claim's `_neighbours`), where the sentence has any."""
    for n in names:
        words = near.get(n, EMPTY) & sent.words
        if not words:
            continue
        at = [k for k, t in enumerate(sent.toks) if n in t.stems]
        by = [k for k, t in enumerate(sent.toks) if not words.isdisjoint(t.stems)]
        if at and by and min(abs(a - b) for a in at for b in by) > WINDOW:
            return False
    return True


_PAIR_CANDIDATES = 6  # sentences (the best aligned) tried in pairs
_PAIR_MIN_WORDS = 2


def verdict(claim: ClaimWords, chunks: list[Passage], th: Thresholds) -> Claim:
    """Aligns the claim with its best sentence; see the package docstring for the rules."""
    if claim.first:
        # "Florida quantities are ...": a capitalised first word the context has nowhere is a
        # name (an invented one); one it has is read as an ordinary word.
        extra = claim.first - frozenset().union(*(c.words for c in chunks))
        if extra:
            claim = dataclasses.replace(claim, required=claim.required | extra)
    rows = _rows(claim, chunks)
    if not rows:
        return Claim(claim.text, Verdict.NOT_IN_CONTEXT, note="no_context")
    ok = [r for r in rows if r[2]]
    if claim.query:
        return terse_verdict(claim, ok, rows, th)
    return _sentence_verdict(claim, ok, rows, chunks, th)


def _rows(claim: ClaimWords, chunks: list[Passage]) -> list[Row]:
    """Every chunk sentence as the claim's candidate (`Row`)."""
    required, numbers, query = claim.required, claim.numbers, claim.query
    rows: list[Row] = []
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
    return rows


def _sentence_verdict(
    claim: ClaimWords, ok: list[Row], rows: list[Row], chunks: list[Passage], th: Thresholds
) -> Claim:
    """A sentence claim: supported by its best sentence, or by a pair of sentences; else why not."""
    total = len(claim.words)
    if ok:
        hits, _, _, chunk, sent, _ = max(ok, key=lambda r: r[0])
        if hits >= th.support_threshold * total:
            if hits < (th.support_threshold + th.claim_margin) * total:
                # Barely aligned: a confidence under `claim_margin` is no verdict either way
                # (unless the polarity flips: that is decided whatever the margin).
                return checked(claim, [(chunk, sent)], Verdict.UNCERTAIN, "low_margin")
            return checked(claim, [(chunk, sent)])
    pair, loose = _pair(claim, rows, th.support_threshold)
    if pair is not None:
        return _placed(claim, pair)
    if ok and hits >= th.uncertain_threshold * total:
        return checked(claim, [(chunk, sent)], Verdict.UNCERTAIN, "low_alignment")
    everywhere = frozenset().union(*(c.words for c in chunks))
    if not claim.required <= everywhere:
        return Claim(claim.text, Verdict.NOT_IN_CONTEXT, note="missing_name_or_number")
    hits, _, _, chunk, sent, _ = max(rows, key=lambda r: r[0])
    if hits >= th.support_threshold * total:
        # The sentence that states the rest of the claim gives another number, or lacks a name.
        quote = [Quote(chunk.id, sent.text, True)]
        if claim.numbers - sent.words and any(w[0].isdigit() for w in sent.words - claim.words):
            return Claim(claim.text, Verdict.CONTRADICTED, evidence=quote, note="other_number")
        return Claim(claim.text, Verdict.NOT_IN_CONTEXT, evidence=quote, note="name_or_number_elsewhere")
    if loose is not None:
        # Two sentences state the rest of the claim, without its name or number.
        quote = [Quote(c.id, t.text, True) for c, t in loose]
        return Claim(claim.text, Verdict.NOT_IN_CONTEXT, evidence=quote, note="name_or_number_elsewhere")
    if hits >= th.uncertain_threshold * total:
        return Claim(claim.text, Verdict.UNCERTAIN, note="spread_over_sentences")
    return Claim(claim.text, Verdict.NOT_IN_CONTEXT, note="low_alignment")


def _pair(
    claim: ClaimWords, rows: list[Row], support_threshold: float
) -> tuple[list[tuple[Passage, Sentence]] | None, list[tuple[Passage, Sentence]] | None]:
    """Two sentences that together state the claim (an answer often joins two; a multi-hop
    claim needs two chunks), each adding at least `_PAIR_MIN_WORDS` of the claim's words the
    other lacks: a lone number or name from a second sentence does not make a pair, and a name
    one sentence supplies must stand there next to a word it stands next to in the claim.
    Returns that pair (or None), and the best pair that would state it but for its names and
    numbers (or None): evidence that a name or number was taken from elsewhere."""
    total = len(claim.words)
    top = sorted(rows, key=lambda r: -r[0])[:_PAIR_CANDIDATES]
    best: tuple[int, list[tuple[Passage, Sentence]]] | None = None
    loose: tuple[int, list[tuple[Passage, Sentence]]] | None = None
    need = support_threshold * total
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


def _placed(claim: ClaimWords, aligned: list[tuple[Passage, Sentence]]) -> Claim:
    """Supported by a sentence pair, unless one of them holds a name of the claim more than
    `WINDOW` tokens away from the words it stands next to in the claim ("school begins in
    United States and late July" on "school begins in August and late July" + "In the United
    States, educational policy ..."): those words may be said there of another name, so the
    claim is `uncertain` (`name_misplaced`)."""
    names = claim.required - claim.query
    if names:
        near = _neighbours(claim.text)
        for _, sent in aligned:
            if not _near_its_words(near, sent, names & sent.words):
                quote = [Quote(c.id, t.text, True) for c, t in aligned]
                flip = polarity(claim, [t for _, t in aligned])
                if flip is not None:
                    return checked(claim, aligned)
                return Claim(claim.text, Verdict.UNCERTAIN, evidence=quote, note="name_misplaced")
    return checked(claim, aligned)
