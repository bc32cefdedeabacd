"""Judgements as OpenTelemetry GenAI evaluation events, so trace UIs show verdicts on the judged trace.

Each judgement becomes a few OTel log records with event name ``gen_ai.evaluation.result`` (GenAI
semantic conventions, development stability), carrying the trace id and span id of the record's
root span (trace flags: sampled) so a log backend correlated with traces (Loki beside Tempo)
attaches them to that span. They go over OTLP (HTTP or gRPC) through the SDK's own pipeline
(`otlp_export.OtlpVerdictSink`: bounded, never on the event loop). The same mapping feeds the
judgement span's events (`judgement_span.py`) and the Phoenix annotations
(`phoenix_annotations.py`).

Events of a successful judgement, one per check that produced a verdict:

=================  ===================================  ===========================  =================
evaluation.name    emitted when                         score.value                  score.label
=================  ===================================  ===========================  =================
faithfulness       one claim at least is decided        supported / decided claims   pass (all) / fail
hallucination      context cannot answer the query      1.0 / 0.0                    hallucinated /
                                                                                     admitted_uncertainty
false_refusal      context can answer the query         1.0 / 0.0                    false_refusal /
                                                                                     answered
answer_relevance   always                               3.0 / 2.0 / 1.0              relevant / partial
                                                                                     / irrelevant
=================  ===================================  ===========================  =================

Score polarity follows the check's name: 1.0 is good for faithfulness, bad for hallucination and
false_refusal. ``gen_ai.evaluation.explanation`` is a fixed phrase or a count ("3 of 4 claims
supported").

A failed judgement (timeout, invalid output...) yields one event instead, named ``rag.judgement``,
with ``error.type`` = the outcome (``timeout``, ``rate_limited``...: `JudgeOutcome`, a closed set)
and no score: which checks would have applied is unknown, and one event per failure keeps a
judge outage from tripling the event volume. Its severity is WARN; results are INFO.

Attributes on every event (all low-cardinality; the trace id is the record's identity):

- ``gen_ai.evaluation.name`` (see above); ``gen_ai.evaluation.score.value`` (double),
  ``gen_ai.evaluation.score.label``, ``gen_ai.evaluation.explanation`` on results;
  ``error.type`` on a failure.
- ``rag.service``, ``rag.query_type``: the slice of the judged record.
- ``rag.judge.backend``, ``rag.judge.model``: who judged. Not ``gen_ai.request.model``: in GenAI
  telemetry that names the evaluated model, which would mislabel the judge.
- ``rag.sampling_weight`` (double): 1 / inclusion probability, to re-weight sampled verdicts.
- ``rag.replay`` (the record is a marked replay, not production traffic), ``rag.self_judged`` (the
  judge model wrote the answer): verdicts to read with care.
- ``event.name``: the event name again, for backends that predate the OTLP ``EventName`` field
  (the SDK also sets that field).

Never exported: query, answer, chunk text and the judge's error message; claim text only with
``events.include_text`` (faithfulness's explanation then names up to three unsupported claims,
each through `safe_text.trace_text`). Span text is user data; copying it into another telemetry
backend must be a deliberate choice, not a default.
"""

from __future__ import annotations

import logging
import time

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from monitor.contracts.model import Claim, Judgement, RagRecord
from monitor.outputs.config import EventsConfig
from monitor.outputs.export_queue import attributes_size
from monitor.outputs.otlp_export import (
    MAX_EXPORT_BATCH,
    OtlpVerdictSink,
    Provider,
    Settling,
    SettlingLogExporter,
    otlp_exporter,
)
from monitor.plumbing.safe_text import trace_text

__all__ = [
    "EVENT_NAME",
    "FAILED_EVALUATION_NAME",
    "AttrValue",
    "EvaluationEventSink",
    "evaluation_events",
    "judged_record",
]

log = logging.getLogger(__name__)

EVENT_NAME = "gen_ai.evaluation.result"
FAILED_EVALUATION_NAME = "rag.judgement"

ATTR_NAME = "gen_ai.evaluation.name"
ATTR_SCORE = "gen_ai.evaluation.score.value"
ATTR_LABEL = "gen_ai.evaluation.score.label"
ATTR_EXPLANATION = "gen_ai.evaluation.explanation"
ATTR_ERROR_TYPE = "error.type"
ATTR_EVENT_NAME = "event.name"  # deprecated in semconv in favour of the EventName field; see docstring

AttrValue = str | bool | int | float

_NAMED_CLAIMS = 3  # unsupported claims an explanation names

_RELEVANCE: dict[int, tuple[str, str]] = {
    3: ("relevant", "answers the query directly"),
    2: ("partial", "answers the query partially or indirectly"),
    1: ("irrelevant", "off-topic or no answer"),
}


# -- mapping: pure, so it is tested without an exporter --------------------------------------------


def judged_record(judgement: Judgement, *, replay: bool) -> dict[str, AttrValue]:
    """The ``rag.*`` attributes every verdict carries, whichever way it leaves: the slice, the
    judge, the weight, and the marks of a replay and of a self-judged answer."""
    return {
        "rag.service": judgement.service,
        "rag.query_type": judgement.query_type,
        "rag.judge.backend": judgement.backend,
        "rag.judge.model": judgement.model,
        "rag.sampling_weight": float(judgement.sampling_weight),
        "rag.replay": replay,
        "rag.self_judged": judgement.self_judged,
    }


def evaluation_events(
    judgement: Judgement, *, replay: bool = False, text_limit: int | None = None
) -> list[dict[str, AttrValue]]:
    """The attributes of each `gen_ai.evaluation.result` event for one judgement (table above).

    Only verdicts, counts and closed label sets, unless `text_limit` is set (`events.include_text`):
    then faithfulness's explanation names the unsupported claims, each cleaned and clipped.
    """
    common = judged_record(judgement, replay=replay)
    if not judgement.ok:
        return [{ATTR_NAME: FAILED_EVALUATION_NAME, ATTR_ERROR_TYPE: judgement.outcome.value, **common}]

    events: list[dict[str, AttrValue]] = []

    def add(name: str, score: float, label: str, explanation: str) -> None:
        events.append(
            {
                ATTR_NAME: name,
                ATTR_SCORE: float(score),
                ATTR_LABEL: label,
                ATTR_EXPLANATION: explanation,
                **common,
            }
        )

    decided = [c for c in judgement.claims if c.decided]
    if decided:  # an undecided record (no decided claim) is scored neither pass nor fail
        supported = sum(c.supported for c in decided)
        total = len(decided)
        undecided = len(judgement.claims) - total
        add(
            "faithfulness",
            supported / total,
            "pass" if supported == total else "fail",
            f"{supported} of {total} claims supported"
            + (f" ({undecided} undecided left out)" if undecided else "")
            + _unsupported_named(decided, text_limit),
        )
    if judgement.answerable_from_context is False:
        if judgement.hallucinated:
            add("hallucination", 1.0, "hallucinated", "context lacks the answer; the answer does not say so")
        else:
            add("hallucination", 0.0, "admitted_uncertainty", "context lacks the answer; the answer says so")
    elif judgement.answerable_from_context is True:
        if judgement.false_refusal:
            add("false_refusal", 1.0, "false_refusal", "context holds the answer; the answer declines")
        else:
            add("false_refusal", 0.0, "answered", "context holds the answer; the answer does not decline")
    relevance = _RELEVANCE.get(judgement.answer_relevance or 0)
    if relevance is not None:
        assert judgement.answer_relevance is not None
        add("answer_relevance", judgement.answer_relevance, *relevance)
    return events


def _unsupported_named(claims: list[Claim], text_limit: int | None) -> str:
    """ "; unsupported: "…" (not_in_context), …": the first few, only when text may leave."""
    if text_limit is None:
        return ""
    named = [f'"{trace_text(c.text, text_limit)}" ({c.verdict.value})' for c in claims if not c.supported]
    if not named:
        return ""
    more = f" and {len(named) - _NAMED_CLAIMS} more" if len(named) > _NAMED_CLAIMS else ""
    return "; unsupported: " + "; ".join(named[:_NAMED_CLAIMS]) + more


# -- the sink ---------------------------------------------------------------------------------------


class EvaluationEventSink(OtlpVerdictSink):
    """Sends judgements as `gen_ai.evaluation.result` log events over OTLP (real OTel SDK pipeline)."""

    sink = "logs"

    def __init__(self, config: EventsConfig) -> None:
        if config.endpoint is None:
            raise ValueError("EvaluationEventSink needs events.endpoint")
        super().__init__(config, config.endpoint)

    def _start(self, config: EventsConfig, url: str) -> tuple[Provider, Settling]:
        exporter = SettlingLogExporter(
            otlp_exporter("logs", url, config),
            self.budget,
            lambda r: attributes_size(r.log_record.attributes),
        )
        provider = LoggerProvider(
            resource=Resource.create(dict(config.resource_attributes)), shutdown_on_exit=False
        )
        provider.add_log_record_processor(
            BatchLogRecordProcessor(
                exporter,
                schedule_delay_millis=config.export_interval_seconds * 1000,
                max_export_batch_size=min(MAX_EXPORT_BATCH, config.max_queue_size),
                max_queue_size=config.max_queue_size,
            )
        )
        self._logger = provider.get_logger("monitor.outputs.evaluation_events")
        return provider, exporter

    @classmethod
    def from_config(cls, config: EventsConfig) -> EvaluationEventSink | None:
        """The sink, or None when log events are off (no endpoint, or `mode: span`)."""
        return cls(config) if config.logs_on else None

    def _emit(self, judgement: Judgement, record: RagRecord, context: Context) -> None:
        now = time.time_ns()
        for attributes in evaluation_events(judgement, replay=record.replay, text_limit=self._text_limit):
            attributes[ATTR_EVENT_NAME] = EVENT_NAME
            if not self.budget.admit(attributes_size(attributes), log):
                continue
            failed = ATTR_ERROR_TYPE in attributes
            self._logger.emit(
                LogRecord(
                    timestamp=now,
                    context=context,
                    severity_number=SeverityNumber.WARN if failed else SeverityNumber.INFO,
                    severity_text="WARN" if failed else "INFO",
                    attributes=attributes,
                    event_name=EVENT_NAME,
                )
            )
