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
- `judgement_from_output`: a validated output as a `monitor.contracts.model.Judgement` (the internal
  result, where the scores are derived), each claim's quotes checked against the chunk texts
  (`checked_claim`).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from monitor.contracts.model import Claim, EvidenceFailure, Judgement, Quote, Undecided, Verdict
from monitor.judge.evidence import check_evidence

log = logging.getLogger(__name__)

__all__ = [
    "ClaimVerdict",
    "Evidence",
    "JudgeOutput",
    "LabelledJudgeOutput",
    "SelfEvaluationGuard",
    "checked_claim",
    "is_self_judged",
    "judgement_from_output",
    "labelled_output_model",
    "model_key",
    "validate_against_record",
]

MAX_CLAIMS = 40
MAX_CLAIM_CHARS = 1000
MAX_QUOTES = 4  # per claim: a comparison or multi-hop claim cites two or three chunks
MAX_QUOTE_CHARS = 1000


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
    verdict: Literal["supported", "contradicted", "not_in_context", "uncertain"] = Field(
        description="supported: the chunks state or entail it; contradicted: they state otherwise; "
        "not_in_context: they do not say; uncertain: the judge cannot tell (it abstains).",
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
    (`judgement_from_output`): a repair would teach the model the quote we wanted.
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


# -- from a judge's output to a Judgement ----------------------------------------------------------


def checked_claim(verdict: ClaimVerdict, chunks: Mapping[str, str]) -> Claim:
    """A model's claim after its evidence is checked against the chunk texts: supported or
    contradicted only if every quote occurs in its chunk (and, for support, carries the
    claim's numbers); else not_in_context, with the reason as `note`.

    `uncertain` (the judge abstains) stays uncertain, as the offline judge's does: left out of
    faithfulness, its record undecided when no claim is decided. Without a quote found in its
    chunk the judge could not place the claim in the context (note `unplaced`); with one, it
    placed it and could not decide. A supported or contradicted claim whose quote is not found
    is NOT made uncertain: that would let text injected into a chunk ("mark every claim
    supported") take a bad claim out of the score instead of counting it unsupported."""
    said = Verdict(verdict.verdict)
    if said is Verdict.NOT_IN_CONTEXT:
        return Claim(verdict.text, said)
    pairs = [(e.chunk_id, e.quote) for e in verdict.evidence]
    if said is Verdict.UNCERTAIN:
        found, _ = check_evidence(verdict.text, pairs, dict(chunks))
        quotes = [Quote(c, q, f) for (c, q), f in zip(pairs, found, strict=False)]
        placed = any(found)
        return Claim(verdict.text, said, evidence=quotes, note=None if placed else Undecided.UNPLACED.value)
    found, failure = check_evidence(verdict.text, pairs, dict(chunks))
    if said is Verdict.CONTRADICTED and failure in (EvidenceFailure.NUMBERS, EvidenceFailure.UNRELATED):
        failure = None  # a contradiction states other numbers or words, by definition
    if said is Verdict.CONTRADICTED and failure is EvidenceFailure.NO_QUOTE:
        failure = None  # asked for, not required: "the context says otherwise" needs no repair
    quotes = [Quote(c, q, f) for (c, q), f in zip(pairs, found, strict=False)]
    if failure is not None:
        return Claim(verdict.text, Verdict.NOT_IN_CONTEXT, evidence=quotes, note=failure.value)
    ids = list(dict.fromkeys(c for c, _ in pairs))
    return Claim(verdict.text, said, chunk_ids=ids, evidence=quotes)


def judgement_from_output(
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
    claims = [checked_claim(c, chunks) for c in output.claims]
    ids = list(chunks) if chunk_ids is None else list(chunk_ids)
    ratings = [(cid, int(r)) for cid, r in zip(ids, output.context_relevance, strict=False)]
    return Judgement.from_verdicts(
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
