"""An offline, deterministic judge: word overlap instead of a language model.

It is an APPROXIMATION, and it is the default only because it needs no network, costs nothing and
runs in well under a millisecond: the demo and the tests can judge every record. What it does:

- claims: the answer is split into sentences (a lead-in such as "According to the documents," is
  dropped; sentences that are refusals or have fewer than two content words are not claims).
- support: a claim is supported by a chunk when at least `support_threshold` of its content words
  (lower-cased, stop words removed, crudely stemmed) occur in that chunk AND every number and every
  capitalised word (a name) of the claim does. The chunk with the most shared words among those
  holding all the names is reported.
- refusal (`answer_admits_uncertainty`): phrase patterns ("I don't know", "not in the provided
  documents", "couldn't find", ...).
- answerable_from_context: word overlap cannot tell a chunk that *answers* the query from one
  that merely shares its topic (unanswerable benchmark questions are written to overlap their
  passages), so this judge reads the answer as evidence, which an LLM judge need not do. For an
  answer that is not a refusal: the context held the answer when most of the claims are supported,
  or when the supported claims repeat at least `supported_query_coverage` of the query's content
  words, or when one chunk holds `answerable_coverage` of them and a supported claim touches the
  query. For a refusal (nothing taken from the context): when one chunk holds `answerable_coverage`
  of the query's content words — which is what `false_refusal` rests on.
- answer_relevance: the share of the query's content words that the answer repeats (1 for a
  refusal).

What it cannot do: recognise paraphrase or synonyms (a faithful paraphrase looks unsupported),
notice a negation or a swapped relation built from the chunk's own words (looks supported), or
know whether a chunk *answers* the query rather than merely sharing its words. Its numbers are
a cheap proxy for trends; calibrate (`monitor.judge.calibrate`) before trusting them as scores.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

from monitor.judge.model import Claim, Judgement
from monitor.model import RagRecord

__all__ = ["LexicalJudge", "is_refusal", "split_claims"]

# Short function words plus question words: they carry no claim.
_STOP_WORDS = """
    a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each either even every
    few for from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just least less many may me might more most much must my myself neither no
    nor not now of off on once one only or other others ought our ours ourselves out over own per
    quite rather same she should since so some such than that the their theirs them themselves then
    there these they this those though through thus to too under until up upon us very was we were
    what whatever when where whether which while who whom whose why will with within without would
    yet you your yours yourself s t d ll m re ve
"""
_STOP = frozenset(_STOP_WORDS.split())
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+")
_ABBREV = r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bJr\.)(?<!\bSr\.)(?<!\bNo\.)"
_ABBREV += (
    r"(?<!\bvs\.)(?<!\bProf\.)(?<!\bInc\.)(?<!\bLtd\.)(?<!\bCo\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\b[A-Z]\.)"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])" + _ABBREV + r"[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
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


def _stem_slow(tok: str) -> str:
    """Crude suffix stripping. Applied alike to both sides of every comparison, so it only has to
    be consistent, not linguistically right."""
    if tok in _STOP or (len(tok) < 2 and not tok.isdigit()):
        return ""
    if tok[0].isdigit():
        return tok.replace(",", "")
    n = len(tok)
    if n > 4 and tok.endswith("ies"):
        return tok[:-3] + "y"
    if n > 5 and tok.endswith("ing"):
        return tok[:-3]
    if n > 4 and tok.endswith("ed"):
        return tok[:-2]
    if n > 4 and tok.endswith(("ches", "shes", "sses", "xes", "zes")):
        return tok[:-2]
    if n > 3 and tok.endswith("s") and not tok.endswith(("ss", "us", "is")):
        return tok[:-1]
    return tok


# Raw whitespace-separated token -> its stems. Caching on the raw token (punctuation and all) lets
# the hot path be `str.split` plus dict look-ups; the regex only runs on tokens never seen before.
_LOWER_TOKENS: dict[str, tuple[str, ...]] = {}
# Case-preserving token of a claim -> (stems, stems that are names or numbers).
_CASED_TOKENS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
_CACHE_MAX = 200_000


def _lower_token(raw: str) -> tuple[str, ...]:
    return tuple(s for s in map(_stem_slow, _TOKEN.findall(raw)) if s)


def _cased_token(raw: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    stems: list[str] = []
    names: list[str] = []
    for tok in _TOKEN.findall(raw):
        s = _stem_slow(tok.lower())
        if s:
            stems.append(s)
            if tok[0].isdigit() or tok[0].isupper():
                names.append(s)
    return tuple(stems), tuple(names)


def _content(text_lower: str) -> set[str]:
    """Stemmed content words (and normalised numbers) of lower-cased text."""
    tokens = set(text_lower.split())
    cache = _LOWER_TOKENS
    try:  # the steady state: every token seen before
        return {s for t in tokens for s in cache[t]}
    except KeyError:
        return _content_slow(tokens)


def _content_slow(tokens: set[str]) -> set[str]:
    global _LOWER_TOKENS
    cache = _LOWER_TOKENS
    if len(cache) + len(tokens) > _CACHE_MAX:
        # A new dict, not clear(): a caller in another thread keeps a valid reference.
        cache = _LOWER_TOKENS = {}
    for t in tokens:
        if t not in cache:
            cache[t] = _lower_token(t)
    return {s for t in tokens for s in cache[t]}


def split_claims(answer: str) -> list[str]:
    """Sentences of the answer, abbreviations and initials (Dr., U.S., J. K.) kept whole."""
    return [s.strip() for s in _SENTENCE_END.split(answer.strip()) if s.strip()]


def is_refusal(text: str) -> bool:
    return _REFUSAL.search(text.lower().replace("’", "'")) is not None


@functools.lru_cache(maxsize=4096)
def _chunk_words(content: str) -> AbstractSet[str]:
    """Per chunk text, cached: production retrievers return the same popular chunks again and again.
    (A set shared by every caller: read-only by convention, not copied into a frozenset.)"""
    return _content(content.lower())


def _claim_words(sentence: str) -> tuple[set[str], set[str]]:
    """(content words, names and numbers) of one claim sentence. The first word is capitalised
    because it starts the sentence, so unless it is a number it only counts as a content word."""
    global _CASED_TOKENS
    if len(_CASED_TOKENS) > _CACHE_MAX:
        _CASED_TOKENS = {}
    cache = _CASED_TOKENS
    infos = []
    for raw in sentence.split():
        info = cache.get(raw)
        if info is None:
            info = cache[raw] = _cased_token(raw)
        infos.append(info)
    if not infos:
        return set(), set()
    words = {s for stems, _ in infos for s in stems}
    names = {s for _, ns in infos[1:] for s in ns}
    # The first token: its numbers, and the parts after the first of "Okafor-Lind", still count.
    names.update(n for i, n in enumerate(infos[0][1]) if i or n[0].isdigit())
    return words, names


class LexicalJudge:
    """See the module docstring: an honest approximation, not a language model.

    Thresholds were chosen on the bundled synthetic workload (`monitor.demo.workload`), whose grounded
    answers quote their evidence: expect lower agreement on real, paraphrasing models.
    """

    name = "lexical"
    model = "lexical-v1"

    def __init__(
        self,
        *,
        support_threshold: float = 0.6,
        answerable_coverage: float = 0.75,
        supported_query_coverage: float = 0.3,
        query_types: Sequence[str] | None = None,
    ) -> None:
        """`query_types` is accepted so one `judge.options` section serves every backend, and
        ignored: word overlap has no label of its own to give, so `judged_query_type` stays None
        rather than echoing the record's (rule-based) label as if the judge had read the query."""
        del query_types
        self.support_threshold = support_threshold
        self.answerable_coverage = answerable_coverage
        self.supported_query_coverage = supported_query_coverage

    async def judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        return self.judge_sync(record, sampling_weight=sampling_weight)

    def judge_sync(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        """The same judgement without an event loop (it never waits on anything)."""
        t0 = time.perf_counter()
        chunks = [(c.id, _chunk_words(c.content)) for c in record.chunks if c.content]
        refusal = is_refusal(record.answer)
        verdicts: list[Claim] = []
        answer_words: set[str] = set()
        supported_words: set[str] = set()
        for sentence in split_claims(record.answer):
            sentence = _LEAD_IN.sub("", sentence)
            words, names = _claim_words(sentence)
            answer_words |= words
            if len(words) < 2 or (refusal and is_refusal(sentence)):
                continue
            verdict = self._verdict(sentence, words, names, chunks)
            if verdict.supported:
                supported_words |= words
            verdicts.append(verdict)

        query = _content(record.query.lower())
        coverage = supported_coverage = 0.0
        if query:
            if chunks:
                coverage = max(len(query & words) for _, words in chunks) / len(query)
            supported_coverage = len(query & supported_words) / len(query)
        supported = sum(v.supported for v in verdicts)
        if refusal:  # nothing taken from the context to go by: the query's coverage decides
            answerable = coverage >= self.answerable_coverage
        else:  # what the answer could take from the context, and whether that is on the query's topic
            answerable = supported > 0 and (
                supported * 2 > len(verdicts)
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
            },
        )
        judgement.cost_usd = 0.0
        judgement.latency_s = time.perf_counter() - t0
        return judgement

    def _verdict(
        self,
        sentence: str,
        words: set[str],
        names: set[str],
        chunks: list[tuple[str, AbstractSet[str]]],
    ) -> Claim:
        """Supported by the chunk sharing most words among those holding every name and number."""
        best_id: str | None = None
        best_hits = 0
        for cid, chunk in chunks:
            if names <= chunk:
                hits = len(words & chunk)
                if hits > best_hits:
                    best_id, best_hits = cid, hits
        supported = best_id is not None and best_hits >= self.support_threshold * len(words)
        return Claim(sentence, supported, best_id if supported else None)

    async def aclose(self) -> None:
        return None
