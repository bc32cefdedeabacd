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
- answerable_from_context: the share of the query's content words found in one window of two
  adjacent context sentences ("coverage"). High coverage alone says answerable; middling coverage
  counts when the answer's claims are mostly supported by that same context, i.e. an on-topic
  answer could be built from it. Unlike an LLM judge, it therefore reads the answer as evidence.
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
from dataclasses import dataclass

from monitor.judge.model import ClaimVerdict, JudgeOutput, Judgement
from monitor.model import RagRecord

__all__ = ["LexicalJudge", "is_refusal", "split_claims"]

# Short function words plus question words: they carry no claim.
_STOP = frozenset(
    """a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each either even every few
    for from further had has have having he her here hers herself him himself his how i if in into is it
    its itself just least less many may me might more most much must my myself neither no nor not now of
    off on once one only or other others ought our ours ourselves out over own per quite rather same she
    should since so some such than that the their theirs them themselves then there these they this
    those though through thus to too under until up upon us very was we were what whatever when where
    whether which while who whom whose why will with within without would yet you your yours yourself
    s t d ll m re ve""".split()
)
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+")
_ABBREV = r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bJr\.)(?<!\bSr\.)(?<!\bNo\.)"
_ABBREV += r"(?<!\bvs\.)(?<!\bProf\.)(?<!\bInc\.)(?<!\bLtd\.)(?<!\bCo\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\b[A-Z]\.)"
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
    re.IGNORECASE,
)
_MISS = object()


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


_STEMS: dict[str, str] = {}
_STEMS_MAX = 200_000


def _stem(tok: str) -> str:
    s = _STEMS.get(tok)
    if s is None:
        s = _stem_slow(tok)
        if len(_STEMS) >= _STEMS_MAX:
            _STEMS.clear()
        _STEMS[tok] = s
    return s


def _content(text_lower: str) -> set[str]:
    """Stemmed content words (and normalised numbers) of lower-cased text."""
    get = _STEMS.get
    out = set()
    for tok in _TOKEN.findall(text_lower):
        s = get(tok)
        if s is None:
            s = _stem(tok)
        if s:
            out.add(s)
    return out


def split_claims(answer: str) -> list[str]:
    """Sentences of the answer, abbreviations and initials (Dr., U.S., J. K.) kept whole."""
    return [s.strip() for s in _SENTENCE_END.split(answer.strip()) if s.strip()]


def is_refusal(text: str) -> bool:
    return _REFUSAL.search(text.replace("’", "'")) is not None


@dataclass(frozen=True, slots=True)
class _ChunkFacts:
    words: frozenset[str]
    windows: tuple[frozenset[str], ...]  # two adjacent sentences each


@functools.lru_cache(maxsize=4096)
def _chunk_facts(content: str) -> _ChunkFacts:
    """Per chunk text, cached: production retrievers return the same popular chunks again and again."""
    sentences = [_content(s) for s in _SENTENCE_END.split(content.lower())] or [set()]
    if len(sentences) == 1:
        windows = (frozenset(sentences[0]),)
    else:
        windows = tuple(frozenset(a | b) for a, b in zip(sentences, sentences[1:], strict=False))
    return _ChunkFacts(frozenset().union(*sentences), windows)


def _claim_words(sentence: str) -> tuple[set[str], set[str]]:
    """(content words, names and numbers) of one claim sentence."""
    words: set[str] = set()
    names: set[str] = set()
    for i, tok in enumerate(_TOKEN.findall(sentence)):
        s = _stem(tok.lower())
        if not s:
            continue
        words.add(s)
        if tok[0].isdigit() or (i > 0 and tok[0].isupper()):
            names.add(s)
    return words, names


class LexicalJudge:
    """See the module docstring: an honest approximation, not a language model."""

    name = "lexical"
    model = "lexical-v1"

    def __init__(
        self,
        *,
        support_threshold: float = 0.6,
        answerable_coverage: float = 0.75,
        supported_answer_coverage: float = 0.34,
    ) -> None:
        self.support_threshold = support_threshold
        self.answerable_coverage = answerable_coverage
        self.supported_answer_coverage = supported_answer_coverage

    async def judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        return self.judge_sync(record, sampling_weight=sampling_weight)

    def judge_sync(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        """The same judgement without an event loop (it never waits on anything)."""
        chunks = [(c.id, _chunk_facts(c.content)) for c in record.chunks if c.content]
        refusal = is_refusal(record.answer)
        verdicts: list[ClaimVerdict] = []
        answer_words: set[str] = set()
        for sentence in split_claims(record.answer):
            sentence = _LEAD_IN.sub("", sentence)
            words, names = _claim_words(sentence)
            answer_words |= words
            if len(words) < 2 or is_refusal(sentence):
                continue
            verdicts.append(self._verdict(sentence, words, names, chunks))

        query = _content(record.query.lower())
        coverage = 0.0
        if query and chunks:
            best = max(len(query & w) for _, facts in chunks for w in facts.windows)
            coverage = best / len(query)
        supported = sum(v.supported for v in verdicts)
        mostly_supported = bool(verdicts) and supported * 2 > len(verdicts)
        answerable = coverage >= self.answerable_coverage or (
            not refusal and mostly_supported and coverage >= self.supported_answer_coverage
        )
        if refusal or not query:
            relevance = 1
        else:
            overlap = len(query & answer_words) / len(query)
            relevance = 3 if overlap >= 0.5 else 2 if overlap >= 0.2 else 1
        output = JudgeOutput(
            claims=verdicts,
            answerable_from_context=answerable,
            answer_admits_uncertainty=refusal,
            answer_relevance=relevance,  # type: ignore[arg-type]  # 1..3 by construction
        )
        judgement = Judgement.from_output(
            output,
            trace_id=record.trace_id,
            query_type=record.query_type,
            service=record.service,
            backend=self.name,
            model=self.model,
            sampling_weight=sampling_weight,
            raw={"query_coverage": round(coverage, 3)},
        )
        judgement.cost_usd = 0.0
        return judgement

    def _verdict(
        self,
        sentence: str,
        words: set[str],
        names: set[str],
        chunks: list[tuple[str, _ChunkFacts]],
    ) -> ClaimVerdict:
        best_id: str | None = None
        best_hits = 0
        for cid, facts in chunks:
            if not names <= facts.words:
                continue
            hits = len(words & facts.words)
            if hits > best_hits:
                best_id, best_hits = cid, hits
        supported = best_id is not None and best_hits >= self.support_threshold * len(words)
        return ClaimVerdict.model_construct(
            text=sentence, supported=supported, chunk_id=best_id if supported else None
        )

    async def aclose(self) -> None:
        return None
