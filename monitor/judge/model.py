"""What a judge says about one RAG record.

Two layers, on purpose:

- `JudgeOutput` / `ClaimVerdict` (pydantic): the boundary. An LLM judge's structured output is
  untrusted input; it is validated here (and against the record: a cited chunk must exist, every
  shown chunk is rated once) before anything is scored. Its JSON schema is what the LLM is asked
  to produce (`output.output_schema`), minus the field descriptions: they document the fields here,
  and the numbered steps of the system prompt are what tell the model what each field means.
- `LabelledJudgeOutput`: the same plus the judge's own query-type label, asked for only when an
  allow-list is configured; `labelled_output_model` narrows the label to that list, so a label
  outside it fails validation like any other bad field.
- `Judgement` (dataclass): the internal result, derived scores included. Built once per judged
  record, so no validation cost on hand-over (same reasoning as `monitor.model`).

Scores are derived here, in one place, for every backend (README, Judges, has the table of cases):

- per claim a `Verdict`; a model's `supported` or `contradicted` stands only with evidence that
  code finds in the cited chunks (`monitor.judge.evidence`), else it becomes `not_in_context`;
- faithfulness = supported / decided claims (`uncertain` ones, which only an offline judge gives,
  are left out); `unsupported_claims` counts contradicted + not_in_context;
- `refuses` (no answer given) and `hedges` (an answer that admits uncertainty about part of it)
  apart; `answer_admits_uncertainty` = either, which is what `hallucinated` = not answerable and
  not admitting it keeps resting on; `false_refusal` = a refusal although the context held the
  answer (a hedge is never one);
- context relevance: the mean over the chunks shown to the judge of each chunk's 1-3 rating.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from monitor.judge.evidence import EvidenceFailure, check_evidence
from monitor.llm.outcome import JudgeOutcome
from monitor.llm.usage import TokenUsage

if TYPE_CHECKING:
    from monitor.judge.citations import CitationReport

log = logging.getLogger(__name__)

__all__ = [
    "CHECKS",
    "Claim",
    "ClaimVerdict",
    "Evidence",
    "JudgeOutput",
    "Judgement",
    "LabelledJudgeOutput",
    "Quote",
    "SelfEvaluationGuard",
    "Verdict",
    "is_self_judged",
    "labelled_output_model",
    "model_key",
    "validate_against_record",
]

# Values of the `check` label of ragmon_judged_total: a closed set.
CHECKS = ("faithfulness", "unanswerable", "relevance", "context_relevance")

MAX_CLAIMS = 40
MAX_CLAIM_CHARS = 1000
MAX_QUOTES = 4  # per claim: a comparison or multi-hop claim cites two or three chunks
MAX_QUOTE_CHARS = 1000


class Verdict(StrEnum):
    """A claim's verdict. The first three are what an LLM judge may say; `uncertain` is an offline
    judge's "cannot decide", counted apart and left out of faithfulness."""

    SUPPORTED = "supported"  # the cited chunks state or directly entail it (quotes checked)
    CONTRADICTED = "contradicted"  # the context states otherwise
    NOT_IN_CONTEXT = "not_in_context"  # the context does not say it (invented, or from elsewhere)
    UNCERTAIN = "uncertain"


# -- boundary: the structured output asked of a judge ---------------------------------------------


class Evidence(BaseModel):
    """A span quoted from one chunk. On the wire ``{"chunk": "2", "quote": "…"}``; the previous
    shape's ``chunk_id`` is read too, and a number sent as a JSON number (``"chunk": 2``) as its
    string."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, coerce_numbers_to_str=True)

    chunk_id: str = Field(alias="chunk", description="Number of the quoted chunk, as given.")
    quote: str = Field(
        min_length=1,
        max_length=MAX_QUOTE_CHARS,
        description="The words of the chunk that support (or contradict) the claim, copied verbatim.",
    )


class ClaimVerdict(BaseModel):
    """One factual claim of the answer and what the retrieved context says about it. On the wire
    ``{"text", "verdict", "quotes"}``; the previous shape's ``evidence`` is read too."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    text: str = Field(
        min_length=1,
        max_length=MAX_CLAIM_CHARS,
        description="One atomic factual claim made by the answer, quoted or minimally paraphrased.",
    )
    verdict: Literal["supported", "contradicted", "not_in_context"] = Field(
        description="supported: the chunks state or entail it; contradicted: they state otherwise; "
        "not_in_context: they do not say.",
    )
    evidence: list[Evidence] = Field(
        alias="quotes",
        max_length=MAX_QUOTES,
        description="For supported (and contradicted) claims, one quote per chunk needed; else empty.",
    )

    @model_validator(mode="before")
    @classmethod
    def _previous_shape(cls, data: Any) -> Any:
        """A claim in the oldest output shape (`supported` + one `chunk_id`, no quote), from a
        judge still prompted with it: its own text stands as the quote, so it is supported only
        if the cited chunk says it word for word."""
        if isinstance(data, dict) and "supported" in data and "verdict" not in data:
            data = dict(data)
            supported = data.pop("supported")
            chunk_id = data.pop("chunk_id", None)
            data["verdict"] = "supported" if supported is True else "not_in_context"
            data["evidence"] = (
                [{"chunk_id": chunk_id, "quote": data.get("text") or "-"}] if chunk_id is not None else []
            )
        return data


def _ordinal_ratings(ratings: list[Any]) -> list[Any]:
    """Ratings in the previous shape (``{"chunk_id": "2", "relevance": 3}`` objects) as the list of
    integers in chunk order. Their ids must be the shown ordinals "1".."n", each once: anything
    else cannot be placed, and fails validation (a repair asks for the list)."""
    by_id = {r.get("chunk_id"): r.get("relevance") for r in ratings if isinstance(r, dict)}
    if len(by_id) != len(ratings) or set(by_id) != {str(i) for i in range(1, len(ratings) + 1)}:
        raise ValueError("context_relevance must be a list of integers, one per chunk in chunk order")
    return [by_id[str(i)] for i in range(1, len(ratings) + 1)]


class JudgeOutput(BaseModel):
    """The judge's verdicts for one record. Scores are derived from these, never asked for."""

    model_config = ConfigDict(extra="forbid")

    claims: list[ClaimVerdict] = Field(
        max_length=MAX_CLAIMS,
        description="Every factual claim of the answer; empty when the answer makes none (e.g. a refusal).",
    )
    answerable_from_context: bool = Field(
        description="True if the context chunks contain the information needed to answer the query.",
    )
    refuses: bool = Field(
        description="True if the answer gives no answer: it declines, or says it does not know.",
    )
    hedges: bool = Field(
        description="True if the answer answers but says it is unsure or that part is not in the documents.",
    )
    answer_relevance: Literal[1, 2, 3] = Field(
        description="3: directly answers the query; 2: partially or indirectly; 1: off-topic or no answer.",
    )
    context_relevance: list[Literal[1, 2, 3]] = Field(
        description="One rating per given chunk, in chunk order (the first is chunk 1's): "
        "3 answers the query or a needed part of it; 2 on topic; 1 unrelated.",
    )

    @model_validator(mode="before")
    @classmethod
    def _previous_shape(cls, data: Any) -> Any:
        """Previous output shapes: ratings as ``{chunk_id, relevance}`` objects (placed by their
        ordinal ids), and before that one `answer_admits_uncertainty` flag (a refusal when the
        answer made no claim, else a hedge) and no ratings (context relevance unknown)."""
        if not isinstance(data, dict):
            return data
        ratings = data.get("context_relevance")
        if isinstance(ratings, list) and any(isinstance(r, dict) for r in ratings):
            data = {**data, "context_relevance": _ordinal_ratings(ratings)}
        if "answer_admits_uncertainty" in data and "refuses" not in data:
            data = dict(data)
            admits = data.pop("answer_admits_uncertainty")
            claims = data.get("claims")
            has_claims = isinstance(claims, list) and bool(claims)
            data["refuses"] = admits is True and not has_claims
            data["hedges"] = admits is True and has_claims
            data.setdefault("context_relevance", [])
        return data


QUERY_TYPE_DESCRIPTION = "The kind of question, one of the listed types."


class LabelledJudgeOutput(JudgeOutput):
    """`JudgeOutput` plus the judge's label of the query. Never used as is: `labelled_output_model`
    narrows `query_type` to the configured allow-list (the label becomes a metric slice, so it must
    stay bounded, and the enum in the schema is what tells the model the choices)."""

    query_type: str = Field(description=QUERY_TYPE_DESCRIPTION)


@functools.lru_cache(maxsize=16)
def _labelled_model(query_types: tuple[str, ...]) -> type[LabelledJudgeOutput]:
    label: Any = Literal.__getitem__(query_types)  # Literal[*query_types]: schema enum + validation
    return create_model(
        "LabelledJudgeOutput",
        __base__=LabelledJudgeOutput,
        query_type=(label, Field(description=QUERY_TYPE_DESCRIPTION)),
    )


def labelled_output_model(query_types: Sequence[str]) -> type[LabelledJudgeOutput]:
    """The output model whose `query_type` must be one of `query_types` (cached per list: it is
    built once per judge, validated against on every reply)."""
    if not query_types:
        raise ValueError("query_types must name at least one type")
    return _labelled_model(tuple(query_types))


def validate_against_record(output: JudgeOutput, chunk_ids: set[str]) -> list[str]:
    """Checks the schema cannot express: quoted chunks exist, a supported claim quotes one, and the
    ratings give one per shown chunk (or, from a judge that gives none, none).

    Returns human-readable problems (empty = valid), in the output's own field names: an LLM judge
    sends them back in its repair request, so they name the offending claim. Whether a quote is
    really in its chunk is not a problem to repair but a verdict to correct
    (`Judgement.from_output`): a repair would teach the model the quote we wanted.
    """
    problems = []
    for i, c in enumerate(output.claims):
        for e in c.evidence:
            if e.chunk_id not in chunk_ids:
                problems.append(
                    f"claims[{i}].quotes chunk {e.chunk_id!r} is not the number of any given chunk"
                )
        if c.verdict == "supported" and not c.evidence:
            problems.append(f"claims[{i}] is supported but quotes no chunk (quotes is empty)")
    rated = len(output.context_relevance)
    if rated and rated != len(chunk_ids):
        problems.append(
            f"context_relevance must rate every given chunk once, in chunk order: "
            f"{len(chunk_ids)} chunks, {rated} ratings"
        )
    return problems


# -- internal ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Quote:
    chunk_id: str
    quote: str
    found: bool  # the quote occurs in that chunk (normalised)


# Why a claim's verdict is not the judge's own (`Claim.note`).
NOTE_NOT_JUDGED = "not_judged"  # an answer sentence the judge left without a claim, twice


class Claim:
    """One claim as scored. Built by an LLM judge from a checked `ClaimVerdict`, or by an offline
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
            "chunk_ids": list(self.chunk_ids),
            "evidence": [{"chunk_id": q.chunk_id, "quote": q.quote, "found": q.found} for q in self.evidence],
            "note": self.note,
        }

    @classmethod
    def checked(cls, verdict: ClaimVerdict, chunks: Mapping[str, str]) -> Claim:
        """A model's claim after its evidence is checked against the chunk texts: supported or
        contradicted only if every quote occurs in its chunk (and, for support, carries the
        claim's numbers); else not_in_context, with the reason as `note`."""
        said = Verdict(verdict.verdict)
        if said is Verdict.NOT_IN_CONTEXT:
            return cls(verdict.text, said)
        pairs = [(e.chunk_id, e.quote) for e in verdict.evidence]
        found, failure = check_evidence(verdict.text, pairs, dict(chunks))
        if said is Verdict.CONTRADICTED and failure in (EvidenceFailure.NUMBERS, EvidenceFailure.UNRELATED):
            failure = None  # a contradiction states other numbers or words, by definition
        if said is Verdict.CONTRADICTED and failure is EvidenceFailure.NO_QUOTE:
            failure = None  # asked for, not required: "the context says otherwise" needs no repair
        quotes = [Quote(c, q, f) for (c, q), f in zip(pairs, found, strict=False)]
        if failure is not None:
            return cls(verdict.text, Verdict.NOT_IN_CONTEXT, evidence=quotes, note=failure.value)
        ids = list(dict.fromkeys(c for c, _ in pairs))
        return cls(verdict.text, said, chunk_ids=ids, evidence=quotes)


@dataclass(slots=True)
class Judgement:
    """One judged record. Build with `from_output` (an LLM judge), `from_verdicts` (any judge) or
    `failed` (no scores at all).

    Score fields are None on failure — and `faithfulness` is also None when the answer makes no
    claim (a refusal): "nothing to check" is neither 0 nor 1, and must not inflate the average.
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
    citations: CitationReport | None = None
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

    def evidence_failures(self) -> list[str]:
        """The `EvidenceFailure` reason of every claim whose verdict the evidence check changed."""
        reasons = {f.value for f in EvidenceFailure}
        return [c.note for c in self.claims if c.note in reasons]

    @classmethod
    def from_output(
        cls,
        output: JudgeOutput,
        *,
        chunks: Mapping[str, str] | None = None,
        chunk_ids: Sequence[str] | None = None,
        trace_id: str,
        query_type: str,
        service: str,
        backend: str,
        model: str,
        sampling_weight: float = 1.0,
        raw: Any = None,
        extra_claims: Sequence[Claim] = (),
        claim_coverage: float | None = None,
        coverage_repair: str | None = None,
    ) -> Judgement:
        """Scores from a validated judge output, its evidence checked against `chunks` (id →
        text of the chunks the judge was shown; None fails closed: with nothing to check a quote
        against, no claim is supported). `chunk_ids`: the ids of the chunks shown, in rank order,
        which the ratings follow (default: `chunks`' keys; a chunk shown without content has a
        rating but no text). `extra_claims`: claims the caller adds (answer sentences the judge
        left uncovered)."""
        chunks = chunks or {}
        claims = [Claim.checked(c, chunks) for c in output.claims]
        ids = list(chunks) if chunk_ids is None else list(chunk_ids)
        ratings = [(cid, int(r)) for cid, r in zip(ids, output.context_relevance, strict=False)]
        return cls.from_verdicts(
            [*claims, *extra_claims],
            answerable_from_context=output.answerable_from_context,
            refuses=output.refuses,
            hedges=output.hedges,
            answer_relevance=output.answer_relevance,
            chunk_relevance=ratings or None,
            claim_coverage=claim_coverage,
            coverage_repair=coverage_repair,
            judged_query_type=output.query_type if isinstance(output, LabelledJudgeOutput) else None,
            trace_id=trace_id,
            query_type=query_type,
            service=service,
            backend=backend,
            model=model,
            sampling_weight=sampling_weight,
            raw=raw,
        )

    @classmethod
    def from_verdicts(
        cls,
        claims: list[Claim],
        *,
        answerable_from_context: bool,
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
        """
        if refuses is None or hedges is None:
            admits = bool(answer_admits_uncertainty)
            refuses = admits and not claims if refuses is None else refuses
            hedges = admits and bool(claims) if hedges is None else hedges
        decided = [c for c in claims if c.verdict is not Verdict.UNCERTAIN]
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
            hallucinated=not answerable and not admits,
            false_refusal=answerable and refuses,
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
            "unanswerable": True,
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


# -- self-evaluation ----------------------------------------------------------------------------------

# Backends that are no model: their judgements are never a model grading itself.
OFFLINE_BACKENDS = frozenset({"lexical"})

_BEDROCK_PREFIX = re.compile(
    r"^(?:[a-z]{2}\.)?(?:anthropic|meta|mistral|amazon|cohere|ai21|openai|deepseek)\."
)
_SUFFIXES = (
    re.compile(r"@.*$"),  # Vertex: claude-haiku-4-5@20251001
    re.compile(r":(?:latest|\d+)$"),  # Bedrock's ":0", Ollama's ":latest"
    re.compile(r"-v\d+$"),  # Bedrock: …-v1
    re.compile(r"-(?:latest|preview)$"),
    re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|\d{4})$"),  # dates: -20251001, -2024-08-06, -0613
)


def model_key(name: str) -> str:
    """A model name without what names the same model differently: case, provider or path prefixes
    (``anthropic/``, ``models/``, Bedrock's ``us.anthropic.``), date and version suffixes, ``4.5``
    written ``4-5``. ``claude-haiku-4-5-20251001`` and ``anthropic/claude-haiku-4-5`` have one key;
    ``gpt-4o`` and ``gpt-4o-mini`` do not."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    key = _BEDROCK_PREFIX.sub("", key)
    changed = True
    while changed:
        before = key
        for suffix in _SUFFIXES:
            key = suffix.sub("", key)
        changed = key != before
    return re.sub(r"(?<=\d)\.(?=\d)", "-", key)


def is_self_judged(generator: str | None, backend: str, judge_model: str) -> bool:
    """Whether a judgement by `judge_model` (of `backend`) grades an answer `generator` wrote. An
    offline judge has no model, and an unknown generator is never assumed to be the judge."""
    if backend in OFFLINE_BACKENDS or not generator or not generator.strip() or not judge_model.strip():
        return False
    return model_key(generator) == model_key(judge_model)


class SelfEvaluationGuard:
    """Marks judgements whose judge model wrote the answer (a model grading itself is biased: it
    prefers its own wording and rarely doubts its own claims), and warns once per (generator, judge)
    pair in the log rather than per record. The pairs remembered are bounded."""

    def __init__(self, max_pairs: int = 256) -> None:
        self._warned: set[tuple[str, str]] = set()
        self._max = max_pairs

    def check(self, generator: str | None, judgement: Judgement) -> bool:
        """Sets and returns `judgement.self_judged`."""
        judgement.self_judged = is_self_judged(generator, judgement.backend, judgement.model)
        if judgement.self_judged and generator is not None:
            pair = (generator, judgement.model)
            if pair not in self._warned and len(self._warned) < self._max:
                self._warned.add(pair)
                log.warning(
                    "self-evaluation: judge %s model %r is the model that generated the answers (%r): "
                    "a model grading itself is biased; results lines carry self_judged=true. "
                    "Configure a judge of another model family",
                    judgement.backend,
                    judgement.model,
                    generator,
                )
        return judgement.self_judged
