"""What a judge says about one RAG record.

Two layers, on purpose:

- `JudgeOutput` / `ClaimVerdict` (pydantic): the boundary. An LLM judge's structured output is
  untrusted input; it is validated here (and against the record: a cited chunk must exist) before
  anything is scored. Its JSON schema is what the LLM is asked to produce (`base.output_schema`),
  minus the field descriptions: they document the fields here, and the numbered steps of the
  system prompt are what tell the model what each field means.
- `LabelledJudgeOutput`: the same plus the judge's own query-type label, asked for only when an
  allow-list is configured; `labelled_output_model` narrows the label to that list, so a label
  outside it fails validation like any other bad field.
- `Judgement` (dataclass): the internal result, derived scores included. Built once per judged
  record, so no validation cost on hand-over (same reasoning as `monitor.model`).

Scores are derived here, in one place, for every backend: faithfulness = supported / total
claims, hallucinated = not answerable and not admitting uncertainty, false refusal = admitted
uncertainty although the context held the answer.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

__all__ = [
    "CHECKS",
    "Claim",
    "ClaimVerdict",
    "JudgeOutcome",
    "JudgeOutput",
    "Judgement",
    "LabelledJudgeOutput",
    "TokenUsage",
    "labelled_output_model",
    "validate_against_record",
]

# Values of the `check` label of ragmon_judged_total: a closed set.
CHECKS = ("faithfulness", "unanswerable", "relevance")

MAX_CLAIMS = 40
MAX_CLAIM_CHARS = 1000


class JudgeOutcome(StrEnum):
    """How a judgement ended: the `outcome` label of ragmon_judge_requests_total (closed set)."""

    OK = "ok"
    RATE_LIMITED = "rate_limited"  # HTTP 429 after the client's retries
    OVERLOADED = "overloaded"  # HTTP 529 (Anthropic's "overloaded_error")
    SERVER_ERROR = "server_error"  # other 5xx
    TIMEOUT = "timeout"  # request timeout or the per-judgement deadline
    INVALID_OUTPUT = "invalid_output"  # schema-invalid / truncated output, also after one repair
    CLIENT_ERROR = "client_error"  # 4xx other than 408/429: bad key, bad model, bad request
    CONNECTION_ERROR = "connection_error"  # refused, reset, DNS
    INTERNAL_ERROR = "internal_error"  # a bug on our side, caught so the pipeline goes on
    BUDGET_EXHAUSTED = "budget_exhausted"  # the judge budget had no room: nothing sent or counted


# -- boundary: the structured output asked of a judge ---------------------------------------------


class ClaimVerdict(BaseModel):
    """One factual claim of the answer and whether the retrieved context supports it."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(
        min_length=1,
        max_length=MAX_CLAIM_CHARS,
        description="One atomic factual claim made by the answer, quoted or minimally paraphrased.",
    )
    supported: bool = Field(
        description="True only if the context chunks state or directly entail the claim.",
    )
    chunk_id: str | None = Field(
        default=None,
        description="Id of the chunk that supports the claim (required when supported), else null.",
    )


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
    answer_admits_uncertainty: bool = Field(
        description="True if the answer refuses, or says it does not know or cannot find the answer.",
    )
    answer_relevance: Literal[1, 2, 3] = Field(
        description="3: directly answers the query; 2: partially or indirectly; 1: off-topic or no answer.",
    )


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
    """Checks the schema cannot express: cited chunks exist, supported claims cite one.

    Returns human-readable problems (empty = valid); an LLM judge sends them back in its repair
    request, so they name the offending claim.
    """
    problems = []
    for i, c in enumerate(output.claims):
        if c.chunk_id is not None and c.chunk_id not in chunk_ids:
            problems.append(f"claims[{i}].chunk_id {c.chunk_id!r} is not the id of any given chunk")
        elif c.supported and c.chunk_id is None:
            problems.append(f"claims[{i}] is supported but names no chunk_id")
    return problems


# -- internal ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Claim:
    text: str
    supported: bool
    chunk_id: str | None = None  # the supporting chunk; None when unsupported


@dataclass(slots=True)
class TokenUsage:
    """Tokens billed for one judgement, over all its API calls.

    `input` excludes cached tokens in every backend (Anthropic reports it that way; the OpenAI
    judge subtracts `cached_tokens`), so the four add up to what was sent and received.
    """

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def add(self, other: TokenUsage) -> None:
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write

    def as_dict(self) -> dict[str, int]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
        }


@dataclass(slots=True)
class Judgement:
    """One judged record. Build with `from_output` (success) or `failed` (no scores at all).

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
    answer_admits_uncertainty: bool | None = None
    hallucinated: bool | None = None
    false_refusal: bool | None = None
    answer_relevance: int | None = None
    # The judge's own label of the query (an LLM judge asked with `query_types`), else None.
    # `query_type` above stays the record's label: the caller decides which one to slice by.
    judged_query_type: str | None = None
    tokens: TokenUsage = field(default_factory=TokenUsage)
    cost_usd: float | None = None  # None: model missing from the price table (not "free")
    latency_s: float = 0.0  # judge service time, excluding the wait for a concurrency slot
    requests: int = 0  # HTTP requests sent: a repair and every retry count (0: the offline judge)
    error: str | None = None
    raw: Any = None  # the judge's own output, kept for inspection

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def from_output(
        cls,
        output: JudgeOutput,
        *,
        trace_id: str,
        query_type: str,
        service: str,
        backend: str,
        model: str,
        sampling_weight: float = 1.0,
        raw: Any = None,
    ) -> Judgement:
        """Scores from a validated judge output."""
        return cls.from_verdicts(
            [Claim(c.text, c.supported, c.chunk_id if c.supported else None) for c in output.claims],
            answerable_from_context=output.answerable_from_context,
            answer_admits_uncertainty=output.answer_admits_uncertainty,
            answer_relevance=output.answer_relevance,
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
        answer_admits_uncertainty: bool,
        answer_relevance: Literal[1, 2, 3],
        judged_query_type: str | None = None,
        trace_id: str,
        query_type: str,
        service: str,
        backend: str,
        model: str,
        sampling_weight: float = 1.0,
        raw: Any = None,
    ) -> Judgement:
        """The one place where scores are derived from verdicts, for every backend."""
        supported = sum(c.supported for c in claims)
        answerable = answerable_from_context
        admits = answer_admits_uncertainty
        return cls(
            trace_id=trace_id,
            query_type=query_type,
            service=service,
            backend=backend,
            model=model,
            sampling_weight=sampling_weight,
            claims=claims,
            faithfulness=supported / len(claims) if claims else None,
            answerable_from_context=answerable,
            answer_admits_uncertainty=admits,
            hallucinated=not answerable and not admits,
            false_refusal=answerable and admits,
            answer_relevance=answer_relevance,
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
        if self.faithfulness is None:
            return ("unanswerable", "relevance")
        return CHECKS

    def to_json_dict(self) -> dict[str, Any]:
        """The results line of design.md "Judgement output" (JSON-safe: no NaN, no enums).

        ``judge_query_type`` appears only when the judge labelled the query, so results of judges
        not asked to keep their exact shape."""
        head: dict[str, Any] = {
            "trace_id": self.trace_id,
            "service": self.service,
            "query_type": self.query_type,
        }
        if self.judged_query_type is not None:
            head["judge_query_type"] = self.judged_query_type
        return {
            **head,
            "sampling_weight": self.sampling_weight,
            "claims": [
                {"text": c.text, "supported": c.supported, "chunk_id": c.chunk_id} for c in self.claims
            ],
            "faithfulness": self.faithfulness,
            "answerable_from_context": self.answerable_from_context,
            "answer_admits_uncertainty": self.answer_admits_uncertainty,
            "hallucinated": self.hallucinated,
            "false_refusal": self.false_refusal,
            "answer_relevance": self.answer_relevance,
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
