"""A terse answer ("1990.", "Derek Cha") read with its question: is its sentence the one the question
points at, and does it outscore the context's other answers of its kind?"""

from __future__ import annotations

import math
from collections.abc import Iterable

from monitor.contracts.model import Claim, Quote, Verdict
from monitor.judge.lexical.claims import WINDOW, ClaimWords, Row, Thresholds, checked
from monitor.judge.lexical.slots import alternatives, fits, runs, type_of
from monitor.judge.lexical.text import EMPTY, Sentence, places

# A terse answer's place (chosen on the dev half of bench/lexical_judge.py): question words weigh
# log((sentences + 1) / (sentences holding it + 1)) + _IDF_FLOOR; a sentence scores the weight of
# those it holds plus _WINDOW_WEIGHT x that of those within WINDOW tokens of the answer; below
# _TERSE_ELSEWHERE of the best sentence's score, the question is answered elsewhere.
_IDF_FLOOR = 1.0
_WINDOW_WEIGHT = 1.0
_TERSE_ELSEWHERE = 0.4


def _weight(idf: dict[str, float], words: Iterable[str]) -> float:
    """The summed weight of these words. `math.fsum` (exact, then rounded once), not `sum`: a set's
    iteration order follows the hash seed (PYTHONHASHSEED), and float addition in another order can
    differ in the last bit, enough to flip a `>=` against a threshold or a tie between sentences."""
    return math.fsum(idf[w] for w in words)


def _window(sent: Sentence, q: frozenset[str], idf: dict[str, float], centers: list[int] | None) -> float:
    """The most question weight within `WINDOW` tokens of a center (None: of any position)."""
    at = places(sent)[0]
    hits = sorted((k, frozenset((w,))) for w in q & sent.words for k in at[w])
    if not hits:
        return 0.0
    best = 0.0
    if centers is None:
        for j, (start, _) in enumerate(hits):
            ws: set[str] = set()
            for pos, w in hits[j:]:
                if pos - start > 2 * WINDOW:
                    break
                ws |= w
            best = max(best, _weight(idf, ws))
        return best
    for c in centers:
        ws = set()
        for pos, w in hits:
            if abs(pos - c) <= WINDOW:
                ws |= w
        best = max(best, _weight(idf, ws))
    return best


Hits = tuple[list[tuple[str, tuple[int, ...]]], tuple[int, ...]]


def _hits(sent: Sentence, q: frozenset[str]) -> Hits:
    """Where the question's words stand in a sentence, and its clause breaks (`places`)."""
    at, cum = places(sent)
    return [(w, at[w]) for w in q & sent.words], cum


def _near(hits: Hits, idf: dict[str, float], center: int) -> float:
    """The question's weight within `WINDOW` tokens of a position (`hits`: where its words stand),
    a word at distance d counting 1 - d / (WINDOW + 1) of its weight (its nearest occurrence),
    half that across a clause break ("meteorologist Ted Fujita, cancer researchers Charles
    Huggins": "cancer researchers" is Huggins's): the nearer, the more it says the word there is
    what the question asks for."""
    words, cum = hits
    total = []
    for w, ks in words:
        best = 0.0
        for k in ks:
            d = abs(k - center)
            if d <= WINDOW:
                f = 1 - d / (WINDOW + 1)
                if cum[max(k, center)] - cum[min(k, center)]:
                    f /= 2
                best = max(best, f)
        if best:
            total.append(idf[w] * best)
    return math.fsum(total) if total else 0.0


def terse_verdict(claim: ClaimWords, ok: list[Row], rows: list[Row], th: Thresholds) -> Claim:
    """A terse answer: its words must be in a sentence (its own words: not through "he" or
    "it"), and that sentence must be the one the question points at. Each sentence scores the
    question words it holds, weighted by how rare they are in the context, plus those near the
    answer; a multi-hop question spreads over chunks, so a sentence of another chunk that
    names what the answer's sentence is about adds the question words it holds (the bridge).

    An answer of a kind (a year, a number, a name) is weighed against the context's other
    words of that kind, scored alike (`alternatives`): supported when it outscores the best of
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
    types = _types_where_it_stands(claim, ok)
    if not _can_fill(claim, types):
        # "Which writer ...? February." / "What company ...? 4." / "Which club ...? Qatari.":
        # not the kind of thing the question asks for, wherever the context holds it.
        return Claim(claim.text, Verdict.NOT_IN_CONTEXT, note="answer_not_of_asked_kind")
    scores = _Scores(claim, rows, next((t for t in types if t is not None), None))
    if claim.kind is not None:
        return _weighed(scores, claim.kind, ok, th.decide_margin)
    ratio, i = scores.located()
    _, q_hits, _, chunk, sent, _ = rows[i]
    if q_hits >= 1 and ratio >= th.terse_alignment:
        return checked(claim, [(chunk, sent)])
    if ratio < _TERSE_ELSEWHERE:
        # Another sentence states what the question asks, without this answer.
        quote = [Quote(chunk.id, sent.text, True)]
        return Claim(claim.text, Verdict.NOT_IN_CONTEXT, evidence=quote, note="question_answered_elsewhere")
    return checked(claim, [(chunk, sent)], Verdict.UNCERTAIN, "low_alignment")


def _types_where_it_stands(claim: ClaimWords, ok: list[Row]) -> list[str | None]:
    """A name answer's type (`type_of`) in each sentence that holds it; none for another kind."""
    types: list[str | None] = []
    if claim.kind == "name":
        for r in ok:
            for run in runs(r[4], "name"):
                if any(not claim.required.isdisjoint(r[4].toks[k].stems) for k in run):
                    types.append(type_of(r[4], run))
    return types


def _can_fill(claim: ClaimWords, types: list[str | None]) -> bool:
    """Whether the answer can be what the question asks for: its kind fits the slot (`fits`), and a
    name asked for as a person, place or thing is not only a month or a nationality where it stands."""
    slot = claim.slot
    return fits(slot, claim.kind, claim.own) and not (
        slot in ("person", "place", "thing") and types and all(t in ("time", "modifier") for t in types)
    )


class _Scores:
    """A terse answer's candidate sentences (`rows`) scored by the question words they hold, weighted
    by how rare they are in the context, plus those near the answer; a multi-hop question spreads
    over chunks, so a sentence of another chunk that names what a sentence is about adds the
    question words it holds (the bridge)."""

    def __init__(self, claim: ClaimWords, rows: list[Row], mine_type: str | None) -> None:
        self.claim = claim
        self.rows = rows
        self.mine_type = mine_type  # the answer's own type where it stands (`type_of`), if known
        q = self.q = claim.query
        n = len(rows)
        df: dict[str, int] = dict.fromkeys(q, 0)
        for r in rows:
            for w in q & (r[4].words | r[5]):
                df[w] += 1
        self.idf = {w: math.log((n + 1) / (d + 1)) + _IDF_FLOOR for w, d in df.items()}
        self._weights: dict[frozenset[str], float] = {}
        self._bridges: dict[int, frozenset[str]] = {}
        self._q_of = [q & r[4].words for r in rows]
        self._q_rows = [j for j, w in enumerate(self._q_of) if w]

    def weight(self, words: frozenset[str]) -> float:
        """`_weight`, once per distinct set of question words (they repeat across sentences)."""
        got = self._weights.get(words)
        if got is None:
            got = self._weights[words] = _weight(self.idf, words)
        return got

    def bridge(self, i: int) -> frozenset[str]:
        """Multi-hop: a sentence of another chunk that names what this sentence is about (its
        subject, or its chunk's) adds the question words it holds: "... by singer-songwriter
        M. Ward." + "Ward is a singer-songwriter from Portland, Oregon." """
        got = self._bridges.get(i)
        if got is not None:
            return got
        _, _, _, chunk, sent, ante = self.rows[i]
        about = sent.subject | (chunk.sentences[0].subject if chunk.sentences else EMPTY)
        if self.claim.kind is not None:  # any name it holds but the answer's: the bridge entity
            about = (about | sent.names) - self.claim.required
        own = self.q & (sent.words | ante)
        out, best = EMPTY, 0.0
        if about:
            for j in self._q_rows:
                b = self.rows[j]
                if b[3] is not chunk and not about.isdisjoint(b[4].words):
                    extra = self._q_of[j] - own
                    if extra and (w := self.weight(extra)) > best:
                        out, best = extra, w
        self._bridges[i] = out
        return out

    def score(self, sent: Sentence, ante: frozenset[str], centers: list[int] | None) -> float:
        held = _weight(self.idf, self.q & (sent.words | ante))
        return held + _WINDOW_WEIGHT * _window(sent, self.q, self.idf, centers)

    def located(self) -> tuple[float, int]:
        """The answer's best sentence (its row) and its score over the best sentence's."""
        best = max(self.score(r[4], r[5], None) for r in self.rows)
        scored = []
        for i, r in enumerate(self.rows):
            if not r[2]:
                continue
            sent = r[4]
            centers = [k for k, t in enumerate(sent.toks) if self.claim.required.intersection(t.stems)]
            scored.append((self.score(sent, r[5], centers) + self.weight(self.bridge(i)), i))
        got, i = max(scored, key=lambda x: x[0])
        return (got / best if best else 0.0), i

    def can_rival(self, sent: Sentence, k: int) -> bool:
        """Whether the name at k can be what the question asks for, as the answer is: its type
        (`type_of`) fits the question's slot and the answer's own type, where they are known."""
        run = next(run for run in runs(sent, "name") if k in run)
        got = type_of(sent, run)
        if got is None:
            return True
        if got in ("time", "modifier"):
            return got == self.mine_type
        return (self.mine_type is None or got == self.mine_type) and self.claim.slot in (None, got)


def _weighed(s: _Scores, kind: str, ok: list[Row], decide_margin: float) -> Claim:
    """An answer of a kind against the context's best alternative of that kind (`_tally`): supported
    when it outscores it by `decide_margin` (relative), contradicted when the alternative, in
    another sentence, outscores it and the answer's sentence scores under `_TERSE_ELSEWHERE` of the
    best sentence, undecided otherwise."""
    claim, rows = s.claim, s.rows
    (got, i), (rival, rival_row) = _tally(s, kind, ok)
    _, q_hits, _, chunk, sent, _ = rows[i]
    top = max(got, rival)
    margin = (got - rival) / top if top > 0 else 0.0
    if got > 0 and margin >= decide_margin and (q_hits >= 1 or s.bridge(i)):
        return checked(claim, [(chunk, sent)])
    other = rows[rival_row] if rival_row >= 0 else rows[i]
    if margin < 0 and not claim.required <= other[4].words and s.located()[0] < _TERSE_ELSEWHERE:
        # Where the question points, another sentence gives another answer of this kind
        # (one in the answer's own sentence, a list, leaves it undecided).
        quote = [Quote(other[3].id, other[4].text, True)]
        return Claim(claim.text, Verdict.CONTRADICTED, evidence=quote, note="question_answered_elsewhere")
    # The answer's sentence and the best alternative's: what a reader compares.
    quote = [Quote(chunk.id, sent.text, True)]
    if other is not rows[i]:
        quote.append(Quote(other[3].id, other[4].text, True))
    return Claim(claim.text, Verdict.UNCERTAIN, evidence=quote, note="same_kind_alternative")


def _tally(s: _Scores, kind: str, ok: list[Row]) -> tuple[tuple[float, int], tuple[float, int]]:
    """The answer's score and row, and its best alternative's (row -1: none), scored alike: the
    question words of every sentence that holds it (with their bridges: a multi-hop answer is named
    by several facts), plus those near it in its best sentence, nearer weighing more."""
    claim, rows, q, idf = s.claim, s.rows, s.q, s.idf
    homes, at_home, away = _known(claim, ok, rows)
    mine_words: set[str] = set()
    mine_row = -1
    mine_best = mine_near = 0.0
    rivals: dict[str, tuple[frozenset[str], float, int]] = {}  # stem: (words held, nearness, row)
    for i, r in enumerate(rows):
        sent = r[4]
        toks = sent.toks
        mine = [k for k, t in enumerate(toks) if claim.required.intersection(t.stems)] if r[2] else []
        others = alternatives(sent, kind, at_home if id(r[3]) in homes else away, claim.required)
        if others and kind == "name":
            others = [k for k in others if s.can_rival(sent, k)]
        if not mine and not others:
            continue
        held = (q & (sent.words | r[5])) | s.bridge(i)
        hits = _hits(sent, q)
        if mine:
            mine_words |= held
            near = max(_near(hits, idf, k) for k in mine)
            if mine_row < 0 or s.weight(held) + near > mine_best:
                mine_best, mine_near, mine_row = s.weight(held) + near, near, i
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
        got = _weight(idf, mine_words) + _WINDOW_WEIGHT * mine_near
    for words, near, row in rivals.values():
        got_r = s.weight(words) + _WINDOW_WEIGHT * near
        if got_r > rival:
            rival, rival_row = got_r, row
    return (got, mine_row), (rival, rival_row)


def _known(
    claim: ClaimWords, ok: list[Row], rows: list[Row]
) -> tuple[set[int], frozenset[str], frozenset[str]]:
    """What is no alternative to the answer: the chunks that hold it (by `id`), and the words known
    in them and in the other chunks. A name of another chunk that the answer's chunk also holds
    links the two (the bridge entity of a multi-hop question: "played for the Philadelphia Eagles"
    -> "The Philadelphia Eagles are ... based in Pennsylvania"); so is a name the answer's own
    sentence shares with a chunk that lacks the answer ("Maximum Overdrive ... directed by Stephen
    King" + "Maximum Overdrive was shot in Leland")."""
    homes = {id(r[3]) for r in ok}
    linked = frozenset().union(*(r[3].words for r in ok))
    away = frozenset().union(*(r[4].words for r in rows if id(r[3]) not in homes))
    bridged = claim.words | (frozenset().union(*(r[4].words for r in ok)) & away)
    return homes, bridged, claim.words | linked
