"""`LexicalJudge`: the judge itself, its settings and how a record's answer becomes claims and a
`Judgement`; the rules are in the sibling modules (the package docstring)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from monitor.contracts.model import Claim, Judgement, RagRecord, Verdict
from monitor.judge.lexical.align import verdict
from monitor.judge.lexical.claims import Thresholds, make_claim
from monitor.judge.lexical.text import LEAD_IN, Passage, content_words, is_refusal, sentences_of, split_claims
from monitor.judge.lexical.words import QUESTION_ONLY
from monitor.judge.lexical.yes_no import YES_NO, yes_no_verdict
from monitor.judge.prompt import MAX_CHUNK_CHARS, MAX_CHUNKS, clip_record

# Clipped input (answer plus chunks, characters) judged on the event loop itself: ~5 ms at most.
_INLINE_CHARS = 8192


class LexicalJudge:
    """See the package docstring: an honest approximation, not a language model.

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
        self.thresholds = Thresholds(
            support_threshold, uncertain_threshold, terse_words, terse_alignment, decide_margin, claim_margin
        )
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
        chunks = [Passage(c.id, *sentences_of(c.content)) for c in record.chunks if c.content]
        refusal = is_refusal(record.answer)
        query = content_words(record.query) - QUESTION_ONLY
        verdicts, answer_words, supported_words = self._claims(record, chunks, query, refusal)
        coverage = supported_coverage = 0.0
        if query:
            if chunks:
                coverage = max(len(query & c.words) for c in chunks) / len(query)
            supported_coverage = len(query & supported_words) / len(query)
        decided = [v for v in verdicts if v.verdict is not Verdict.UNCERTAIN]
        relevance: Literal[1, 2, 3] = 1
        if query and not refusal:
            overlap = len(query & answer_words) / len(query)
            relevance = 3 if overlap >= 0.5 else 2 if overlap >= 0.2 else 1
        judgement = Judgement.from_verdicts(
            verdicts,
            answerable_from_context=self._answerable(decided, refusal, coverage, supported_coverage),
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

    def _claims(
        self, record: RagRecord, chunks: list[Passage], query: frozenset[str], refusal: bool
    ) -> tuple[list[Claim], set[str], set[str]]:
        """The answer's claims judged (a refusal's refusing sentences are none), and the content
        words of all of them and of the supported ones."""
        th = self.thresholds
        sentences = [LEAD_IN.sub("", s) for s in split_claims(record.answer)]
        sentences = [s for s in sentences if s and not (refusal and is_refusal(s))]
        verdicts: list[Claim] = []
        answer_words: set[str] = set()
        supported_words: set[str] = set()
        for sentence in sentences:
            if len(sentences) == 1 and YES_NO.match(sentence):
                verdicts.append(yes_no_verdict(record.query, sentence, chunks, th))
                continue
            claim = make_claim(
                sentence, record.query, query, terse=len(sentences) == 1, terse_words=th.terse_words
            )
            if claim is None:
                continue
            answer_words |= claim.words
            got = verdict(claim, chunks, th)
            if got.supported:
                supported_words |= claim.words
            verdicts.append(got)
        return verdicts, answer_words, supported_words

    def _answerable(
        self, decided: list[Claim], refusal: bool, coverage: float, supported_coverage: float
    ) -> bool:
        """Whether the context held the answer (the package docstring): for a refusal, nothing taken
        from the context to go by, so the query's coverage decides; else what the answer could take
        from the context, and whether that is on the query's topic."""
        if refusal:
            return coverage >= self.answerable_coverage
        supported = sum(v.supported for v in decided)
        return supported > 0 and (
            supported * 2 > len(decided)
            or supported_coverage >= self.supported_query_coverage
            or (coverage >= self.answerable_coverage and supported_coverage > 0)
        )

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
