"""The results topic (and file): the contract between the judge stage and what reads its lines.

One JSON line per sample — judged, failed or skipped — that the judge stage writes to the results
file and topic (`monitor.outputs.result_sinks`), and that the drift stage, `rag-monitor baseline
pin` (`monitor.drift.reference`), dashboards and people read back. docs/contract.md, "Judgement
output", lists the fields.

`ResultLine` is the one model of it for the writer and every reader, as `monitor.contracts.samples` is for
the samples topic:

- written: `result_line` builds it from the record, what the sample said and the judgement, and
  `encode_result` writes the bytes the stage always wrote, `v` (the layout version) first;
- read: `ResultLine.model_validate_json`, once per line. Every field is optional, and a value of
  the wrong type reads as absent (None), as the string-keyed readers before this model took it:
  lines without `v` (they are version 1 all the same), older shapes (no `refuses`, no
  `record_query_type`, no `context_relevance`) and hand-made ones read as they did, and the
  fallbacks for the older shapes are here (`refusal`, `ingest_query_type`). A line of another
  `v`, or not a JSON object, does not validate: readers count it and go on.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
)
from pydantic_core import CoreSchema, core_schema

from monitor.contracts.model import Judgement, RagRecord, Stratum, Undecided, Verdict, undecided_checks

RESULTS_VERSION: Final = 1


class _AbsentIfInvalid:
    """A value that does not validate is None, and the rest of the line is still read."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.with_default_schema(handler(source), default=None, on_error="default")


T = TypeVar("T")
Lenient = Annotated[T | None, _AbsentIfInvalid()]
# Numbers as written: an int stays an int (the bytes written are the bytes read); a bool is none.
Number = StrictInt | StrictFloat


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ChunkLine(_Part):
    id: Lenient[str] = None
    content: Lenient[str] = None
    score: Lenient[Number] = None
    retrieval: Lenient[StrictInt] = None  # 1, 2, … when the record merged several retrievals


class QuoteLine(_Part):
    chunk_id: Lenient[str] = None
    quote: Lenient[str] = None
    found: Lenient[StrictBool] = None


class ClaimLine(_Part):
    text: Lenient[str] = None
    verdict: Lenient[Verdict] = None
    supported: Lenient[StrictBool] = None
    decided: Lenient[StrictBool] = None  # absent in older lines: the verdict says (not `uncertain`)
    chunk_ids: Lenient[list[str]] = None
    evidence: Lenient[list[QuoteLine]] = None
    note: Lenient[str] = None
    cited: Lenient[list[str]] = None  # only when the answer cites chunks


class ChunkRating(_Part):
    chunk_id: Lenient[str] = None
    relevance: Lenient[StrictInt] = None


class TokensLine(_Part):
    input: Lenient[StrictInt] = None
    output: Lenient[StrictInt] = None
    cache_read: Lenient[StrictInt] = None
    cache_write: Lenient[StrictInt] = None


class JudgeLine(_Part):
    backend: Lenient[str] = None
    model: Lenient[str] = None
    outcome: Lenient[str] = None  # a `JudgeOutcome` value; "ok" is a judgement
    requests: Lenient[StrictInt] = None
    latency_s: Lenient[Number] = None
    tokens: Lenient[TokensLine] = None
    cost_usd: Lenient[Number] = None


class ResultLine(_Part):
    """One results line. Field order is the order written; a field the writer did not set is not
    written (`exclude_unset`), so a skipped sample's line has no judgement fields at all."""

    v: Literal[1] = RESULTS_VERSION
    # The record (`RagRecord.to_json_dict`).
    trace_id: Lenient[str] = None
    span_id: Lenient[str] = None
    service: Lenient[str] = None
    query: Lenient[str] = None
    query_type: Lenient[str] = None  # the slice: the judge's label when it replaced the rules'
    chunks: Lenient[list[Lenient[ChunkLine]]] = None
    answer: Lenient[str] = None
    model: Lenient[str] = None
    start: Lenient[Number] = None
    end: Lenient[Number] = None
    replay: Lenient[StrictBool] = None
    # The bounded release label (`slices.release_keys`; unknown, other); absent in older lines.
    release: Lenient[str] = None
    # The conversation and the end user, as the spans named them; absent when they did not.
    session_id: Lenient[str] = None
    user_id: Lenient[str] = None
    # What the sample said, and what the stage did with it.
    sampling_weight: Lenient[Number] = None
    stratum: Lenient[Stratum] = None  # what the sampler sampled it as; absent in older lines
    query_type_source: Lenient[str] = None  # span | rules | none | judge
    clipped: Lenient[dict[str, StrictInt]] = None
    judge_skipped: Lenient[str] = None  # why the sample was not judged (then no judgement fields)
    record_query_type: Lenient[str] = None  # the ingest stage's label, when the judge's replaced it
    # The judgement (`Judgement.to_json_dict`).
    judge_query_type: Lenient[str] = None
    claims: Lenient[list[ClaimLine]] = None
    faithfulness: Lenient[Number] = None
    # Whether every check is decided, and the undecided ones' reasons (check → `Undecided` value);
    # absent in older lines (`undecided_checks` derives them from the verdicts).
    decided: Lenient[StrictBool] = None
    undecided: Lenient[dict[str, Undecided]] = None
    unsupported_claims: Lenient[StrictInt] = None
    asserts_unsupported: Lenient[StrictBool] = None
    evidence_mismatches: Lenient[StrictInt] = None
    claim_coverage: Lenient[Number] = None
    coverage_repair: Lenient[str] = None
    answerable_from_context: Lenient[StrictBool] = None
    refuses: Lenient[StrictBool] = None
    hedges: Lenient[StrictBool] = None
    answer_admits_uncertainty: Lenient[StrictBool] = None
    hallucinated: Lenient[StrictBool] = None
    false_refusal: Lenient[StrictBool] = None
    answer_relevance: Lenient[Number] = None
    context_relevance: Lenient[Number] = None
    chunk_relevance: Lenient[list[ChunkRating]] = None
    citations: Lenient[dict[str, Any]] = None
    self_judged: Lenient[StrictBool] = None
    judge: Lenient[JudgeLine] = None
    error: Lenient[str] = None
    raw: Any = None
    repeat_disagreements: Lenient[list[str]] = None  # records judged twice (judge.repeat_fraction)

    @property
    def judged(self) -> bool:
        """Whether the line carries a judgement (not skipped, not failed)."""
        return self.judge is not None and self.judge.outcome == "ok"

    @property
    def undecided_checks(self) -> dict[str, str] | None:
        """The checks the judge left undecided, with their reasons (None: not judged). Lines
        written before `undecided` was kept derive it from their verdicts as the judge would."""
        if not self.judged:
            return None
        if self.undecided is not None:
            return {check: reason.value for check, reason in self.undecided.items()}
        claims = [
            (c.verdict is not Verdict.UNCERTAIN if c.decided is None else c.decided, c.note)
            for c in self.claims or []
        ]
        faith = self.faithfulness
        derived = undecided_checks(
            None if faith is None else float(faith),
            claims,
            refuses=self.refusal,
            answerable=self.answerable_from_context,
        )
        return {check: reason.value for check, reason in derived.items()}

    @property
    def is_decided(self) -> bool | None:
        """Every check of the judgement decided (None: not judged)."""
        checks = self.undecided_checks
        return None if checks is None else not checks

    @property
    def refusal(self) -> bool | None:
        """Whether the answer refused (a hedge is no refusal). Lines written before the judges
        told the two apart carry only `answer_admits_uncertainty`."""
        return self.refuses if "refuses" in self.model_fields_set else self.answer_admits_uncertainty

    @property
    def time(self) -> float | None:
        """When the request happened, Unix seconds: its end, else its start (None: neither)."""
        for value in (self.end, self.start):
            if value is not None:
                return float(value)
        return None

    @property
    def ingest_query_type(self) -> str | None:
        """The label the ingest stage gave the record (its retrieval drift's slice): the judge's
        label replaced it in `query_type` when `query_type_source` is "judge". Lines written
        before `record_query_type` was kept have none then (None)."""
        return self.record_query_type if self.query_type_source == "judge" else self.query_type


class ReviewReason(StrEnum):
    """Why the judge stage queued a record for a person (`rag_review`)."""

    DISAGREEMENT = "disagreement"  # two judgements of the record differ (judge.repeat_fraction)
    BOUNDARY = "boundary"  # near a decision: undecided claims, a score at the threshold
    ALERT = "alert"  # an example trace of a firing drift alert
    UNIFORM = "uniform"  # the uniform random share: the only reason that estimates without bias


class ReviewMeta(_Part):
    reasons: Lenient[list[ReviewReason]] = None
    # Whether the uniform draw picked the record (it may have other reasons too), and then the
    # weight that makes the uniform share stand for the judged traffic: the record's sampling
    # weight over the uniform share's inclusion probability. Absent: not in the uniform share,
    # so its labels describe hard cases only and agreement estimates leave it out.
    uniform: Lenient[StrictBool] = None
    weight: Lenient[Number] = None
    queued_at: Lenient[Number] = None  # Unix seconds


class ReviewLine(ResultLine):
    """One review-queue line: the sample's results line (the full record and the judge's verdicts),
    and why and with what weight it was queued. The queue's topic and file carry these; `rag-monitor
    review` reads them."""

    review: Lenient[ReviewMeta] = None


def unreadable_reason(exc: ValidationError) -> str:
    """Why a line did not validate as a `ResultLine`, briefly (for a count's label or a log)."""
    first = exc.errors(include_url=False, include_input=False)[0]
    if first["loc"] == ("v",):
        return f"results line version other than {RESULTS_VERSION}"
    return "not a JSON object"


def result_line(
    record: RagRecord,
    *,
    sampling_weight: float,
    query_type_source: str,
    clipped: dict[str, int] | None = None,
    judge_skipped: str | None = None,
    record_query_type: str | None = None,
    judgement: Judgement | None = None,
    repeat_disagreements: list[str] | None = None,
    stratum: str | None = None,
) -> ResultLine:
    """The line of one sample: the record, the sample's weight and label source, and the judgement
    when there is one (its `trace_id`, `service`, `query_type` and `sampling_weight` are the
    record's, or the judge's label)."""
    fields: dict[str, Any] = record.to_json_dict()
    fields.update(v=RESULTS_VERSION, sampling_weight=sampling_weight)
    if stratum is not None:
        fields["stratum"] = stratum
    fields["query_type_source"] = query_type_source
    for name, value in (
        ("clipped", clipped),
        ("judge_skipped", judge_skipped),
        ("record_query_type", record_query_type),
    ):
        if value is not None:
            fields[name] = value
    if judgement is not None:
        fields.update(judgement.to_json_dict())
    if repeat_disagreements is not None:
        fields["repeat_disagreements"] = repeat_disagreements
    return ResultLine.model_validate(fields)


def encode_result(line: ResultLine) -> bytes:
    """The line as written, newline included: the fields set, in field order, as `json` writes
    them (non-ASCII as is)."""
    doc = line.model_dump(exclude_unset=True)
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def read_results(path: Path) -> tuple[list[ResultLine], dict[str, int]]:
    """A results file's lines, and how many could not be read, by reason (OSError: the file)."""
    out: list[ResultLine] = []
    bad: dict[str, int] = {}
    with path.open(encoding="utf-8") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            try:
                out.append(ResultLine.model_validate_json(raw))
            except ValidationError as exc:
                reason = unreadable_reason(exc)
                bad[reason] = bad.get(reason, 0) + 1
    return out, bad
