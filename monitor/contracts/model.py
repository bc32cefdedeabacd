"""The internal data model shared by the pipeline stages: the RAG record, and what a judge says
about it (`Judgement`).

Dataclasses, not pydantic models: these objects are built once per span (a judgement once per
judged record) on the hot path, and validation happens where data enters (decode, a judge's
output in `monitor.judge.model`) rather than on every hand-over.

A judgement's scores are derived here, in one place, for every backend (README, Judges, has the
table of cases):

- per claim a `Verdict`; a model's `supported` or `contradicted` stands only with evidence that
  code finds in the cited chunks (`monitor.judge.evidence`), else it becomes `not_in_context`;
- faithfulness = supported / decided claims (`uncertain` ones are left out); `unsupported_claims`
  counts contradicted + not_in_context;
- abstention: a check the judge could not decide is neither passed nor failed but `undecided`,
  with a reason (`Undecided`): faithfulness when the answer answers and no claim of it is decided,
  the unanswerable check when the judge gave no answerability (`answerable_from_context` None).
  `Judgement.undecided` maps each such check to its reason, `decided` says whether there is none;
  every consumer (estimates, drift, golden report) leaves an undecided check out and counts it
  apart, so that a score never hides how much of the traffic it rests on;
- `refuses` (no answer given) and `hedges` (an answer that admits uncertainty about part of it)
  apart; `answer_admits_uncertainty` = either, which is what `hallucinated` = not answerable and
  not admitting it keeps resting on; `false_refusal` = a refusal although the context held the
  answer (a hedge is never one);
- context relevance: the mean over the chunks shown to the judge of each chunk's 1-3 rating.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol

from monitor.llm.outcome import JudgeOutcome
from monitor.llm.usage import TokenUsage

# What the sampler sampled a record as (the samples and results lines' `stratum`): the priority
# signal that applies to it (the one with the largest configured multiplier), or the plain rate.
# A function of the record, not of its draw, so within a stratum the sample is a fair one whatever
# its p: the drift detectors test within strata (monitor/drift/detector.py).
Stratum = Literal["rate", "no_chunks", "low_score", "refusal", "length"]


class SpanRole(StrEnum):
    """What a span contributes to a RAG record, whatever dialect described it."""

    ROOT = "root"  # request handler / chain: carries the query and the final answer
    RETRIEVER = "retriever"  # ranked chunks
    RERANKER = "reranker"  # re-ranked chunks: when present, the final ranking
    LLM = "llm"  # model call: the answer and the model name
    OTHER = "other"


class Reject(StrEnum):
    """Reasons for `ragmon_rejected_total{reason}`: a fixed set, so the label stays bounded."""

    DECODE_ERROR = "decode_error"  # not protobuf / not JSON / wrong shape
    INVALID_UTF8 = "invalid_utf8"
    TOO_LARGE = "too_large"
    EMPTY = "empty"  # a message with no spans
    BAD_ATTRIBUTE = "bad_attribute"  # a known attribute with an unusable type or value (field dropped)
    BAD_TIMESTAMP = "bad_timestamp"  # absurd or inverted span times (times dropped, record kept)
    MISSING_QUERY = "missing_query"
    MISSING_ANSWER = "missing_answer"
    EVICTED = "evicted"  # open-trace capacity reached: oldest trace dropped
    LATE_SPAN = "late_span"  # span of a trace already emitted
    TOO_MANY_SPANS = "too_many_spans"  # span past assembly.max_spans_per_trace: dropped
    NOT_RAG = "not_rag"  # a trace with no RAG content at all (health checks, other endpoints): ignored
    # A trace whose spans look like a model call or a retrieval (GenAI attributes of an
    # instrumentation the decoder does not read) but make no request: counted, never ignored.
    UNREADABLE = "unreadable"
    QUERY_TYPE_UNKNOWN = (
        "query_type_not_allowed"  # rag.query_type outside the allow-list (mapped, not dropped)
    )


@dataclass(slots=True)
class Chunk:
    id: str
    content: str | None = None
    score: float | None = None
    # The ingest stage's decoder (`decode(..., for_assembly=True)` of OTLP protobuf) leaves the
    # text here as valid UTF-8, `content` None: only the few sampled records ever need it as a
    # string, so the rest never pay for decoding and allocating it. `bytes`, or the compiled
    # decoder's `RawText` (the bytes where they lie in the message; reads and compares as bytes).
    # `text` reads either form.
    raw: Any = field(default=None, repr=False)
    # Which retrieval it came from, 1, 2, … in call order, when the record merges several (query
    # rewriting, multi-hop); 0 for a record of one retrieval.
    retrieval: int = 0

    @property
    def text(self) -> str | None:
        return self.content if self.raw is None else str(self.raw, "utf-8")


@dataclass(slots=True)
class SpanFacts:
    """One decoded span, reduced to what RAG assembly needs.

    Every dialect maps onto these fields; `None` means the span did not say.
    """

    trace_id: str  # 32 lowercase hex chars
    span_id: str  # 16 lowercase hex chars
    parent_span_id: str  # "" for a root span
    name: str
    service: str
    start_ns: int
    end_ns: int
    role: SpanRole = SpanRole.OTHER
    query: str | None = None
    answer: str | None = None
    chunks: list[Chunk] | None = None
    model: str | None = None
    query_type: str | None = None
    replay: bool = False
    # The release (`slices.release_keys`: the first key the span's attributes or its resource's
    # carry, as a non-empty string); "" when none does. Raw: bounded where it becomes a label.
    release: str = ""
    # Reasons for fields this span had but that could not be used (wrong type, absurd time).
    problems: list[Reject] = field(default_factory=list)
    # The span's status is ERROR (OTLP `Status.code` 2): the service's own error signal.
    error: bool = False
    # Generator tokens the span reports (`gen_ai.usage.*`, OpenInference `llm.token_count.*`),
    # on LLM spans only; None: not reported (or an unusable value, counted as bad_attribute).
    input_tokens: int | None = None
    output_tokens: int | None = None
    # The conversation and the end user the request belongs to (OpenInference `session.id` /
    # `user.id`, GenAI `gen_ai.conversation.id`, Traceloop association properties); None: unsaid.
    session_id: str | None = None
    user_id: str | None = None
    # Attribute keys (never values) of GenAI instrumentations this decoder does not read, when
    # the span gave nothing else: the evidence that a trace was a request we could not read.
    unread: tuple[str, ...] | None = None
    # The instrumentation scope's name (`InstrumentationScope.name`): which library wrote it.
    scope: str = ""


@dataclass(slots=True)
class RagRecord:
    """One RAG request: docs/contract.md's "The RAG record"."""

    trace_id: str
    span_id: str
    service: str
    query: str
    query_type: str
    chunks: list[Chunk]
    answer: str
    model: str | None = None
    start_ns: int = 0  # 0 = unknown
    end_ns: int = 0
    replay: bool = False
    release: str = ""  # raw, as the root span (else any span) says; "" unknown
    # The service's own RED figures, from the same spans (`assemble.build_record`): the retriever
    # stage's and the generator stage's wall time (first start to last end of the retriever and
    # reranker spans, of the LLM spans; -1 unknown), whether the root span's status is ERROR, and
    # the generator tokens the LLM spans report, summed (None: none reported).
    retrieval_ns: int = -1
    generation_ns: int = -1
    error: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    session_id: str | None = None
    user_id: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "service": self.service,
            "query": self.query,
            "query_type": self.query_type,
            "chunks": [_chunk_dict(c) for c in self.chunks],
            "answer": self.answer,
            "model": self.model,
            "start": self.start_ns / 1e9 if self.start_ns else None,
            "end": self.end_ns / 1e9 if self.end_ns else None,
            "replay": self.replay,
            "release": self.release or None,
        }
        if self.session_id is not None:
            out["session_id"] = self.session_id
        if self.user_id is not None:
            out["user_id"] = self.user_id
        return out


def _chunk_dict(c: Chunk) -> dict[str, Any]:
    out = {"id": c.id, "content": c.text, "score": c.score}
    if c.retrieval:
        out["retrieval"] = c.retrieval
    return out


# -- what a judge says about a record -------------------------------------------------------------


class EvidenceFailure(StrEnum):
    """Why a claim's evidence was rejected (`monitor.judge.evidence.check_evidence`; a claim's
    `note`, and the `reason` label of ragmon_judge_evidence_mismatch_total: a closed set)."""

    NO_QUOTE = "no_quote"  # a supported claim without any quote
    NOT_IN_CHUNK = "not_in_chunk"  # a quote that does not occur in the chunk it cites
    NUMBERS = "numbers"  # the quotes lack a number the claim states
    UNRELATED = "unrelated"  # the quotes share no word with the claim


_EVIDENCE_FAILURES = frozenset(f.value for f in EvidenceFailure)


class CitationCheck(Protocol):
    """What a judgement's holder found of the answer's citations (`monitor.judge.citations`'s
    `CitationReport`), as the results line and the metrics read it."""

    @property
    def cited(self) -> Sequence[Sequence[str]]:
        """Per claim, the chunk ids its sentence cites."""
        ...

    def counts(self) -> dict[str, int]: ...

    def to_json_dict(self) -> dict[str, Any]: ...


# Values of the `check` label of ragmon_judged_total: a closed set.
CHECKS = ("faithfulness", "unanswerable", "relevance", "context_relevance")


class Verdict(StrEnum):
    """A claim's verdict. `uncertain` is a judge's "cannot decide" (the offline judge's partial
    alignment, an LLM judge's own `uncertain`): counted apart and left out of faithfulness."""

    SUPPORTED = "supported"  # the cited chunks state or directly entail it (quotes checked)
    CONTRADICTED = "contradicted"  # the context states otherwise
    NOT_IN_CONTEXT = "not_in_context"  # the context does not say it (invented, or from elsewhere)
    UNCERTAIN = "uncertain"


class Undecided(StrEnum):
    """Why a check of a record is undecided: the `reason` label of ragmon_judge_undecided_total
    and the values of a results line's `undecided` (a closed set: the label stays bounded).

    A judge names the reason through the note of an `uncertain` claim: a claim noted with one of
    these values gives the record its reason (the most specific one wins: yes/no, then unplaced);
    any other uncertain claim is `uncertain`."""

    NO_CLAIM = "no_claim"  # the answer answers, yet the judge found no claim in it to check
    UNCERTAIN = "uncertain"  # claims, none decided: the judge could not tell support from its absence
    UNPLACED = "unplaced"  # claims, none decided, and one the judge could not place in the context
    YES_NO = "yes_no"  # a yes/no answer, and the context lacks one of the facts it compares
    ANSWERABILITY = "answerability"  # the judge could not tell whether the context answers the query


# The checks that can be undecided (the `check` label of ragmon_judge_decided/undecided_total).
DECIDABLE_CHECKS = ("faithfulness", "unanswerable")
_REASON_ORDER = (Undecided.YES_NO, Undecided.UNPLACED)


def undecided_checks(
    faithfulness: float | None,
    claims: Sequence[tuple[bool, str | None]],
    *,
    refuses: bool | None,
    answerable: bool | None,
) -> dict[str, Undecided]:
    """`Judgement.undecided` from a successful judgement's fields (per claim: decided, note), so
    that a results line written without `undecided` reads the same way."""
    out: dict[str, Undecided] = {}
    faith: Undecided | None = None
    if faithfulness is None:
        if not claims:
            faith = Undecided.NO_CLAIM if refuses is False else None
        elif not any(decided for decided, _ in claims):
            notes = {note for _, note in claims}
            faith = next((r for r in _REASON_ORDER if r.value in notes), Undecided.UNCERTAIN)
    if faith is not None:
        out["faithfulness"] = faith
    if answerable is None:
        out["unanswerable"] = faith or Undecided.ANSWERABILITY
    return out


@dataclass(frozen=True, slots=True)
class Quote:
    chunk_id: str
    quote: str
    found: bool  # the quote occurs in that chunk (normalised)


# Why a claim's verdict is not the judge's own (`Claim.note`).
NOTE_NOT_JUDGED = "not_judged"  # an answer sentence the judge left without a claim, twice


class Claim:
    """One claim as scored. Built by an LLM judge from a checked `ClaimVerdict`
    (`monitor.judge.model.checked_claim`), or by an offline
    judge as ``Claim(text, supported, chunk_id)`` (its support is computed from the chunk by code,
    so there is no quote to check).

    `note` says why the verdict is not the judge's own: an `EvidenceFailure` value (the judge said
    supported or contradicted and the evidence failed) or `NOTE_NOT_JUDGED`.
    """

    __slots__ = ("chunk_ids", "evidence", "note", "text", "verdict")

    def __init__(
        self,
        text: str,
        verdict: Verdict | bool,
        chunk_id: str | None = None,
        *,
        chunk_ids: Sequence[str] = (),
        evidence: Sequence[Quote] = (),
        note: str | None = None,
    ) -> None:
        if isinstance(verdict, bool):
            verdict = Verdict.SUPPORTED if verdict else Verdict.NOT_IN_CONTEXT
        self.text = text
        self.verdict = verdict
        ids = list(chunk_ids) or ([chunk_id] if chunk_id is not None else [])
        # Only a supported claim names supporting chunks; a contradicted one keeps its quotes.
        self.chunk_ids: list[str] = ids if verdict is Verdict.SUPPORTED else []
        self.evidence: list[Quote] = list(evidence)
        self.note = note

    @property
    def supported(self) -> bool:
        return self.verdict is Verdict.SUPPORTED

    @property
    def decided(self) -> bool:
        """The judge gave the claim a verdict (anything but `uncertain`)."""
        return self.verdict is not Verdict.UNCERTAIN

    @property
    def chunk_id(self) -> str | None:
        """The first supporting chunk (None when unsupported)."""
        return self.chunk_ids[0] if self.chunk_ids else None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Claim):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Claim({self.text!r}, {self.verdict.value}, chunk_ids={self.chunk_ids!r}, note={self.note!r})"

    def as_dict(self) -> dict[str, Any]:
        """The claim in a results line."""
        return {
            "text": self.text,
            "verdict": self.verdict.value,
            "supported": self.supported,
            "decided": self.decided,
            "chunk_ids": list(self.chunk_ids),
            "evidence": [{"chunk_id": q.chunk_id, "quote": q.quote, "found": q.found} for q in self.evidence],
            "note": self.note,
        }


@dataclass(slots=True)
class Judgement:
    """One judged record. Build with `from_verdicts` (any judge; an LLM judge's output goes through
    `monitor.judge.model.judgement_from_output`) or `failed` (no scores at all).

    Score fields are None on failure — and `faithfulness` is also None when the answer makes no
    claim (a refusal): "nothing to check" is neither 0 nor 1, and must not inflate the average —
    or when none of its claims is decided (`undecided` says which, and why).
    """

    trace_id: str
    query_type: str
    service: str
    backend: str
    model: str
    sampling_weight: float = 1.0
    outcome: JudgeOutcome = JudgeOutcome.OK
    claims: list[Claim] = field(default_factory=list)
    faithfulness: float | None = None
    answerable_from_context: bool | None = None
    refuses: bool | None = None
    hedges: bool | None = None
    answer_admits_uncertainty: bool | None = None  # refuses or hedges
    hallucinated: bool | None = None
    false_refusal: bool | None = None
    answer_relevance: int | None = None
    # Per shown chunk (id, 1-3), in rank order, and their mean; None: not rated (no chunks, or a
    # judge that gives no ratings).
    chunk_relevance: list[tuple[str, int]] | None = None
    context_relevance: float | None = None
    # Share of the answer's content words the claims cover (None: nothing to cover or not
    # checked), and the coverage repair: None (none needed), "repaired", or "unrepaired" (the
    # sentences still uncovered are claims noted `not_judged`).
    claim_coverage: float | None = None
    coverage_repair: str | None = None
    # The judge's own label of the query (an LLM judge asked with `query_types`), else None.
    # `query_type` above stays the record's label: the caller decides which one to slice by.
    judged_query_type: str | None = None
    tokens: TokenUsage = field(default_factory=TokenUsage)
    cost_usd: float | None = None  # None: model missing from the price table (not "free")
    latency_s: float = 0.0  # judge service time, excluding the wait for a concurrency slot
    requests: int = 0  # HTTP requests sent: a repair and every retry count (0: the offline judge)
    error: str | None = None
    raw: Any = None  # the judge's own output, kept for inspection
    # Set by whoever holds the record (the judge stage, the golden replay), not by the judge:
    # the answer's citations checked against the claims (None: the answer cites nothing, or the
    # judgement failed), and whether the judge model is the model that wrote the answer.
    citations: CitationCheck | None = None
    self_judged: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def unsupported_claims(self) -> int | None:
        """Contradicted or not-in-context claims (None on failure)."""
        if not self.ok:
            return None
        return sum(c.verdict in (Verdict.CONTRADICTED, Verdict.NOT_IN_CONTEXT) for c in self.claims)

    @property
    def asserts_unsupported(self) -> bool | None:
        """The answer states something its context does not: tells a partial answer that stays
        within the context (False) from one that invents the rest (True)."""
        n = self.unsupported_claims
        return None if n is None else n > 0

    @property
    def undecided(self) -> dict[str, Undecided]:
        """The checks (`DECIDABLE_CHECKS`) the judge could not decide, each with its reason; empty
        when every check it applies to is decided, and for a failed judgement (nothing judged).

        faithfulness: the answer answers (it makes claims, or it does not refuse) and no claim of
        it is decided. A refusal without claims has nothing to check: neither decided nor not.
        unanswerable: no `answerable_from_context`; its reason is faithfulness's when that is
        undecided too (the judge reads answerability off the answer's claims), else
        `answerability`."""
        if not self.ok:
            return {}
        return undecided_checks(
            self.faithfulness,
            [(c.decided, c.note) for c in self.claims],
            refuses=self.refuses,
            answerable=self.answerable_from_context,
        )

    @property
    def decided(self) -> bool | None:
        """Every check the judgement applies to is decided (None: the judgement failed)."""
        return None if not self.ok else not self.undecided

    def evidence_failures(self) -> list[str]:
        """The `EvidenceFailure` reason of every claim whose verdict the evidence check changed."""
        return [c.note for c in self.claims if c.note in _EVIDENCE_FAILURES]

    @classmethod
    def from_verdicts(
        cls,
        claims: list[Claim],
        *,
        answerable_from_context: bool | None,
        answer_relevance: Literal[1, 2, 3],
        answer_admits_uncertainty: bool | None = None,
        refuses: bool | None = None,
        hedges: bool | None = None,
        chunk_relevance: Sequence[tuple[str, int]] | None = None,
        claim_coverage: float | None = None,
        coverage_repair: str | None = None,
        judged_query_type: str | None = None,
        trace_id: str,
        query_type: str,
        service: str,
        backend: str,
        model: str,
        sampling_weight: float = 1.0,
        raw: Any = None,
    ) -> Judgement:
        """The one place where scores are derived from verdicts, for every backend.

        A judge that has only one "admits uncertainty" flag (`answer_admits_uncertainty`, the
        offline judge) gets it split by its claims: with none it refused, with some it hedged.
        `answerable_from_context` None: the judge could not tell, so neither `hallucinated` nor
        `false_refusal` is given (the unanswerable check is undecided).
        """
        if refuses is None or hedges is None:
            admits = bool(answer_admits_uncertainty)
            refuses = admits and not claims if refuses is None else refuses
            hedges = admits and bool(claims) if hedges is None else hedges
        decided = [c for c in claims if c.decided]
        supported = sum(c.supported for c in decided)
        answerable = answerable_from_context
        admits = refuses or hedges
        ratings = list(chunk_relevance) if chunk_relevance else None
        return cls(
            trace_id=trace_id,
            query_type=query_type,
            service=service,
            backend=backend,
            model=model,
            sampling_weight=sampling_weight,
            claims=claims,
            faithfulness=supported / len(decided) if decided else None,
            answerable_from_context=answerable,
            refuses=refuses,
            hedges=hedges,
            answer_admits_uncertainty=admits,
            hallucinated=None if answerable is None else not answerable and not admits,
            false_refusal=None if answerable is None else answerable and refuses,
            answer_relevance=answer_relevance,
            chunk_relevance=ratings,
            context_relevance=sum(r for _, r in ratings) / len(ratings) if ratings else None,
            claim_coverage=claim_coverage,
            coverage_repair=coverage_repair,
            judged_query_type=judged_query_type,
            raw=raw,
        )

    @classmethod
    def failed(
        cls,
        outcome: JudgeOutcome,
        error: str,
        *,
        trace_id: str,
        query_type: str,
        service: str,
        backend: str,
        model: str,
        sampling_weight: float = 1.0,
        raw: Any = None,
    ) -> Judgement:
        if outcome is JudgeOutcome.OK:
            raise ValueError("a failed judgement needs a failure outcome")
        return cls(
            trace_id=trace_id,
            query_type=query_type,
            service=service,
            backend=backend,
            model=model,
            sampling_weight=sampling_weight,
            outcome=outcome,
            error=error,
            raw=raw,
        )

    def checks(self) -> tuple[str, ...]:
        """The checks this judgement produced a verdict for (`check` label of ragmon_judged_total)."""
        if not self.ok:
            return ()
        given = {
            "faithfulness": self.faithfulness is not None,
            "unanswerable": self.answerable_from_context is not None,
            "relevance": True,
            "context_relevance": self.context_relevance is not None,
        }
        return tuple(c for c in CHECKS if given[c])

    def to_json_dict(self) -> dict[str, Any]:
        """The results line of docs/contract.md, "Judgement output" (JSON-safe: no NaN, no enums).

        ``judge_query_type`` appears only when the judge labelled the query, so results of judges
        not asked to keep their exact shape."""
        head: dict[str, Any] = {
            "trace_id": self.trace_id,
            "service": self.service,
            "query_type": self.query_type,
        }
        if self.judged_query_type is not None:
            head["judge_query_type"] = self.judged_query_type
        ratings = self.chunk_relevance
        claims = [c.as_dict() for c in self.claims]
        cites = self.citations
        if cites is not None:  # per claim, the chunks its sentence cites
            for claim, cited in zip(claims, cites.cited, strict=False):
                claim["cited"] = list(cited)
        return {
            **head,
            "sampling_weight": self.sampling_weight,
            "claims": claims,
            "faithfulness": self.faithfulness,
            "decided": self.decided,
            "undecided": {check: reason.value for check, reason in self.undecided.items()}
            if self.ok
            else None,
            "unsupported_claims": self.unsupported_claims,
            "asserts_unsupported": self.asserts_unsupported,
            "evidence_mismatches": len(self.evidence_failures()) if self.ok else None,
            "claim_coverage": self.claim_coverage,
            "coverage_repair": self.coverage_repair,
            "answerable_from_context": self.answerable_from_context,
            "refuses": self.refuses,
            "hedges": self.hedges,
            "answer_admits_uncertainty": self.answer_admits_uncertainty,
            "hallucinated": self.hallucinated,
            "false_refusal": self.false_refusal,
            "answer_relevance": self.answer_relevance,
            "context_relevance": self.context_relevance,
            "chunk_relevance": None
            if ratings is None
            else [{"chunk_id": cid, "relevance": r} for cid, r in ratings],
            "citations": None if cites is None else cites.to_json_dict(),
            "self_judged": self.self_judged,
            "judge": {
                "backend": self.backend,
                "model": self.model,
                "outcome": self.outcome.value,
                "requests": self.requests,
                "latency_s": round(self.latency_s, 6),
                "tokens": self.tokens.as_dict(),
                "cost_usd": self.cost_usd,
            },
            "error": self.error,
            "raw": self.raw,
        }
