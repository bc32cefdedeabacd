"""A judgement as a span in the judged trace, so trace UIs that show spans, not logs (Jaeger,
Tempo, Phoenix, Langfuse's OTLP endpoint), show the verdicts inline (`events.mode: span|both`).

One span ``rag.judgement`` a successful judgement, a child of the record's root span (same trace
id, parent = the root's span id), timed over the judge's own latency ending at emit time, kind
INTERNAL, status unset (an unfaithful answer is the service's fault, not this span's). Sent with
the OTel SDK's batch processor over OTLP HTTP or gRPC (`otlp_export.OtlpVerdictSink`).

Attributes:

- ``openinference.span.kind`` = ``EVALUATOR`` (Phoenix's span kind for evaluations);
- ``rag.evaluation.<check>.score`` and ``rag.evaluation.<check>.label`` for every check the log
  events carry (`evaluation_events`): one span has room for one ``gen_ai.evaluation.name``, so the
  semantic-convention attributes go on one ``gen_ai.evaluation.result`` span event per check,
  exactly as the log events carry them, and the flat attributes make the span searchable (TraceQL
  ``{ span.rag.evaluation.faithfulness.label = "fail" }``);
- ``rag.claims.total``, ``rag.claims.supported``, ``rag.claims.unsupported``, ``rag.claims.omitted``
  (beyond ``events.max_claims``), the common ``rag.*`` of the events (service, query type, judge,
  sampling weight, replay, self-judged);
- ``output.value``: the verdicts as a few plain lines (what Phoenix shows first).

Span events: one ``gen_ai.evaluation.result`` per check, then one ``rag.claim`` per claim
(``rag.claim.index``, ``rag.claim.verdict``, ``rag.claim.note`` when the verdict is not the
judge's own; with ``events.include_text``: ``rag.claim.text``, ``rag.claim.chunk_ids``,
``rag.claim.quotes``, each cleaned and clipped by `safe_text.trace_text`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import SpanKind

from monitor.contracts.model import Judgement, RagRecord
from monitor.outputs.config import EventsConfig
from monitor.outputs.evaluation_events import (
    ATTR_LABEL,
    ATTR_NAME,
    ATTR_SCORE,
    EVENT_NAME,
    AttrValue,
    evaluation_events,
    judged_record,
)
from monitor.outputs.export_queue import attributes_size
from monitor.outputs.otlp_export import (
    MAX_EXPORT_BATCH,
    OtlpVerdictSink,
    Provider,
    Settling,
    SettlingSpanExporter,
    otlp_exporter,
)
from monitor.plumbing.safe_text import trace_text

__all__ = ["CLAIM_EVENT", "SPAN_NAME", "JudgementSpan", "JudgementSpanSink", "judgement_span"]

log = logging.getLogger(__name__)

SPAN_NAME = "rag.judgement"
CLAIM_EVENT = "rag.claim"
SpanAttrValue = AttrValue | list[str]


@dataclass(slots=True)
class JudgementSpan:
    """What the span carries: its attributes and its events, in order (pure: tested apart)."""

    attributes: dict[str, SpanAttrValue]
    events: list[tuple[str, dict[str, SpanAttrValue]]] = field(default_factory=list)

    def size(self) -> int:
        return attributes_size(self.attributes) + sum(
            len(name) + attributes_size(attrs) for name, attrs in self.events
        )


def judgement_span(
    judgement: Judgement, *, replay: bool = False, text_limit: int | None = None, max_claims: int = 50
) -> JudgementSpan:
    """The span of one successful judgement (module docstring)."""
    checks = evaluation_events(judgement, replay=replay, text_limit=text_limit)
    attributes: dict[str, SpanAttrValue] = {
        "openinference.span.kind": "EVALUATOR",
        **judged_record(judgement, replay=replay),
    }
    lines = []
    for check in checks:
        name = str(check[ATTR_NAME])
        attributes[f"rag.evaluation.{name}.score"] = check[ATTR_SCORE]
        attributes[f"rag.evaluation.{name}.label"] = check[ATTR_LABEL]
        lines.append(
            f"{name}: {check[ATTR_LABEL]} ({check[ATTR_SCORE]:g}) - {check['gen_ai.evaluation.explanation']}"
        )
    claims = judgement.claims
    supported = sum(c.supported for c in claims)
    attributes["rag.claims.total"] = len(claims)
    attributes["rag.claims.supported"] = supported
    attributes["rag.claims.unsupported"] = judgement.unsupported_claims or 0
    attributes["rag.claims.omitted"] = max(0, len(claims) - max_claims)
    attributes["output.value"] = "\n".join(lines)
    attributes["output.mime_type"] = "text/plain"
    span = JudgementSpan(attributes, [(EVENT_NAME, dict(check)) for check in checks])
    for index, claim in enumerate(claims[:max_claims]):
        event: dict[str, SpanAttrValue] = {"rag.claim.index": index, "rag.claim.verdict": claim.verdict.value}
        if claim.note:
            event["rag.claim.note"] = claim.note
        if text_limit is not None:
            event["rag.claim.text"] = trace_text(claim.text, text_limit)
            event["rag.claim.chunk_ids"] = [trace_text(c, text_limit) for c in claim.chunk_ids]
            event["rag.claim.quotes"] = [trace_text(q.quote, text_limit) for q in claim.evidence]
        span.events.append((CLAIM_EVENT, event))
    return span


class JudgementSpanSink(OtlpVerdictSink):
    """Sends each successful judgement as a `rag.judgement` span over OTLP (real SDK pipeline)."""

    sink = "span"

    def __init__(self, config: EventsConfig) -> None:
        if config.traces_endpoint is None:
            raise ValueError("JudgementSpanSink needs events.traces_endpoint")
        self._max_claims = config.max_claims
        super().__init__(config, config.traces_endpoint)

    @classmethod
    def from_config(cls, config: EventsConfig) -> JudgementSpanSink | None:
        """The sink, or None when the span is off (`mode: logs`)."""
        return cls(config) if config.span_on else None

    def _start(self, config: EventsConfig, url: str) -> tuple[Provider, Settling]:
        exporter = SettlingSpanExporter(otlp_exporter("traces", url, config), self.budget, _span_size)
        # Always sampled and limits of its own: the environment's OTEL_TRACES_SAMPLER or span
        # limits are the application's choice, not a reason to lose or clip a verdict.
        provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=Resource.create(dict(config.resource_attributes)),
            shutdown_on_exit=False,
            span_limits=SpanLimits(
                max_span_attributes=64,
                max_events=config.max_claims + 8,
                max_event_attributes=32,
                max_attribute_length=None,
            ),
        )
        provider.add_span_processor(
            BatchSpanProcessor(
                exporter,
                schedule_delay_millis=config.export_interval_seconds * 1000,
                max_export_batch_size=min(MAX_EXPORT_BATCH, config.max_queue_size),
                max_queue_size=config.max_queue_size,
            )
        )
        self._tracer = provider.get_tracer("monitor.outputs.judgement_span")
        return provider, exporter

    def _emit(self, judgement: Judgement, record: RagRecord, context: Context) -> None:
        if not judgement.ok:
            return
        plan = judgement_span(
            judgement, replay=record.replay, text_limit=self._text_limit, max_claims=self._max_claims
        )
        if not self.budget.admit(plan.size(), log):
            return
        end = time.time_ns()
        span = self._tracer.start_span(
            SPAN_NAME,
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=plan.attributes,
            start_time=end - int(judgement.latency_s * 1e9),
        )
        for name, attributes in plan.events:
            span.add_event(name, attributes, timestamp=end)
        span.end(end_time=end)


def _span_size(span: ReadableSpan) -> int:
    """What `JudgementSpan.size` priced the span at, read back from the span the SDK made."""
    return attributes_size(span.attributes) + sum(
        len(e.name) + attributes_size(e.attributes) for e in span.events
    )
