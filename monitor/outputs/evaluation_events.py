"""Judgements as OpenTelemetry GenAI evaluation events, so trace UIs show verdicts on the judged trace.

Each judgement becomes a few OTel log records with event name ``gen_ai.evaluation.result`` (GenAI
semantic conventions, development stability), carrying the trace id and span id of the record's
root span (trace flags: sampled) so Tempo, Jaeger, Phoenix or Langfuse attach them to that span.
They go over OTLP/HTTP to a Collector through the SDK's own pipeline: ``emit`` only appends to the
batch processor's queue; serialisation and HTTP happen on the SDK's worker thread, never on the
event loop.

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
- ``event.name``: the event name again, for backends that predate the OTLP ``EventName`` field
  (the SDK also sets that field).

Never exported: claim text, query, answer, chunk text and the judge's error message. Span text is
user data; copying it into another telemetry backend must be a deliberate choice, not a default.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from pydantic import BaseModel, ConfigDict, Field, field_validator

from monitor.model import Judgement, RagRecord

__all__ = [
    "EVENT_NAME",
    "FAILED_EVALUATION_NAME",
    "AttrValue",
    "EvaluationEventSink",
    "EventsConfig",
    "SinkStats",
    "evaluation_events",
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

_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")
_SPAN_ID = re.compile(r"[0-9a-fA-F]{16}")
_MAX_EXPORT_BATCH = 512

_RELEVANCE: dict[int, tuple[str, str]] = {
    3: ("relevant", "answers the query directly"),
    2: ("partial", "answers the query partially or indirectly"),
    1: ("irrelevant", "off-topic or no answer"),
}


class EventsConfig(BaseModel):
    """`events` section: where evaluation events go. Off unless `endpoint` is set."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str | None = Field(
        None, description="OTLP/HTTP logs URL, e.g. http://collector:4318/v1/logs; None = off"
    )
    # Often credentials (Authorization, API keys): kept out of repr, and only names are ever logged.
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    timeout_seconds: float = Field(10.0, gt=0, description="per export request, retries included")
    max_queue_size: int = Field(2048, gt=0, description="events waiting for export; beyond: dropped")
    export_interval_seconds: float = Field(1.0, gt=0, description="longest wait before a batch is sent")
    compression: Literal["none", "gzip"] = "none"
    resource_attributes: dict[str, str] = Field(default_factory=lambda: {"service.name": "rag-monitor"})

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is None:
            return None
        parts = urlsplit(v)
        try:
            parts.port  # noqa: B018 - raises on a malformed port
        except ValueError:
            raise ValueError("has an invalid port") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL such as http://collector:4318/v1/logs")
        return v

    def redacted(self) -> dict[str, object]:
        """The config as a dict fit for a log line: header values and URL credentials masked."""
        out = self.model_dump()
        out["headers"] = dict.fromkeys(self.headers, "***")
        out["endpoint"] = _safe_url(self.endpoint) if self.endpoint else None
        return out


# -- mapping: pure, so it is tested without an exporter --------------------------------------------


def evaluation_events(judgement: Judgement) -> list[dict[str, AttrValue]]:
    """The attributes of each `gen_ai.evaluation.result` event for one judgement (table above).

    Only verdicts, counts and closed label sets: no text of the record or of the judge's output.
    """
    common: dict[str, AttrValue] = {
        "rag.service": judgement.service,
        "rag.query_type": judgement.query_type,
        "rag.judge.backend": judgement.backend,
        "rag.judge.model": judgement.model,
        "rag.sampling_weight": float(judgement.sampling_weight),
    }
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
            + (f" ({undecided} undecided left out)" if undecided else ""),
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


# -- the sink ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SinkStats:
    """Event counts since start (exported as Prometheus counters by the caller, if wanted).

    ``queued - exported - failed`` is what is still waiting or in flight.
    """

    queued: int = 0  # handed to the SDK's batch queue
    exported: int = 0  # acknowledged by the receiver
    failed: int = 0  # export gave up (after the exporter's own retries) or was aborted at shutdown
    dropped: int = 0  # refused: max_queue_size events pending, or emitted after shutdown
    skipped_records: int = 0  # judgements not emitted: invalid or mismatched ids


class _CountingExporter(LogRecordExporter):
    """Wraps the OTLP exporter to learn what left the queue and how (the SDK's own counters are
    off unless its internal metrics are enabled by environment), and to make shutdown idempotent:
    the sink may abort the exporter while the provider's shutdown later calls it again."""

    def __init__(self, inner: LogRecordExporter, sink: EvaluationEventSink) -> None:
        self._inner = inner
        self._sink = sink
        self._shut = False
        self._shut_lock = threading.Lock()

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        try:
            result = self._inner.export(batch)
        except Exception:
            self._sink._done(len(batch), ok=False)
            raise
        self._sink._done(len(batch), ok=result is LogRecordExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        with self._shut_lock:
            if self._shut:
                return
            self._shut = True
        stop: Callable[[], None] = self._inner.shutdown  # untyped in the SDK
        stop()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class EvaluationEventSink:
    """Sends judgements as `gen_ai.evaluation.result` events over OTLP/HTTP (real OTel SDK pipeline).

    Its own LoggerProvider, never the global one: the application's logging is not exported, and
    shutdown is ours to time. Thread-safe; `emit` is meant for the event loop (it never does I/O).
    """

    def __init__(self, config: EventsConfig) -> None:
        if config.endpoint is None:
            raise ValueError("EvaluationEventSink needs events.endpoint")
        self._max_queue = config.max_queue_size
        self._lock = threading.Lock()
        self._queued = self._exported = self._failed = self._dropped = self._skipped = 0
        self._dropping = False
        self._closed = False
        self._shutdown_result: bool | None = None
        otlp = OTLPLogExporter(
            endpoint=config.endpoint,
            headers=config.headers,
            timeout=config.timeout_seconds,
            compression=Compression.Gzip if config.compression == "gzip" else Compression.NoCompression,
        )
        self._exporter = _CountingExporter(otlp, self)
        self._provider = LoggerProvider(
            resource=Resource.create(dict(config.resource_attributes)), shutdown_on_exit=False
        )
        self._provider.add_log_record_processor(
            BatchLogRecordProcessor(
                self._exporter,
                schedule_delay_millis=config.export_interval_seconds * 1000,
                max_export_batch_size=min(_MAX_EXPORT_BATCH, config.max_queue_size),
                max_queue_size=config.max_queue_size,
            )
        )
        self._logger = self._provider.get_logger("monitor.outputs.evaluation_events")
        shown = config.redacted()
        log.info("evaluation events: exporting to %s (headers: %s)", shown["endpoint"], shown["headers"])

    @classmethod
    def from_config(cls, config: EventsConfig) -> EvaluationEventSink | None:
        """The sink, or None when no endpoint is configured (the feature is off)."""
        return None if config.endpoint is None else cls(config)

    def emit(self, judgement: Judgement, record: RagRecord) -> None:
        """Queue the events of one judgement of `record`. Never blocks, never raises.

        At most `max_queue_size` events wait for export; beyond that new events are dropped and
        counted (`stats().dropped`), so a dead receiver costs bounded memory, not back-pressure.
        """
        try:
            self._emit(judgement, record)
        except Exception as exc:  # a bug here must not cost a judge worker
            log.warning("evaluation events for trace %s not emitted: %r", record.trace_id, exc)

    def _emit(self, judgement: Judgement, record: RagRecord) -> None:
        trace_id, span_id = record.trace_id, record.span_id
        problem = _id_problem(trace_id, span_id, judgement.trace_id)
        if problem is not None:
            with self._lock:
                self._skipped += 1
            log.warning("evaluation events skipped: %s", problem)
            return
        context = trace.set_span_in_context(
            NonRecordingSpan(
                SpanContext(
                    trace_id=int(trace_id, 16),
                    span_id=int(span_id, 16),
                    is_remote=True,
                    trace_flags=TraceFlags(TraceFlags.SAMPLED),
                )
            ),
            Context(),
        )
        now = time.time_ns()
        for attributes in evaluation_events(judgement):
            if not self._admit():
                continue
            failed = ATTR_ERROR_TYPE in attributes
            self._logger.emit(
                LogRecord(
                    timestamp=now,
                    context=context,
                    severity_number=SeverityNumber.WARN if failed else SeverityNumber.INFO,
                    severity_text="WARN" if failed else "INFO",
                    attributes={**attributes, ATTR_EVENT_NAME: EVENT_NAME},
                    event_name=EVENT_NAME,
                )
            )

    def _admit(self) -> bool:
        """Room for one more event? Counts pending ones (queued or in flight) against
        max_queue_size, so the SDK's queue (same size) never overflows and silently evicts."""
        with self._lock:
            if not self._closed and self._queued - self._exported - self._failed < self._max_queue:
                self._queued += 1
                self._dropping = False
                return True
            self._dropped += 1
            first, self._dropping = not self._dropping, True
            closed = self._closed
        if first:  # once per overflow episode, not per event
            if closed:
                log.warning("evaluation events emitted after shutdown are dropped")
            else:
                log.warning("evaluation event queue full (%d pending): dropping events", self._max_queue)
        return False

    def _done(self, count: int, *, ok: bool) -> None:
        with self._lock:
            if ok:
                self._exported += count
            else:
                self._failed += count

    def stats(self) -> SinkStats:
        with self._lock:
            return SinkStats(self._queued, self._exported, self._failed, self._dropped, self._skipped)

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Flush what is queued and stop, in at most ~`timeout` seconds. Blocking: from async code
        call it via `asyncio.to_thread`. True if everything queued was exported.

        The SDK's own shutdown waits up to 30 s per processor whatever it is told, so it runs on a
        helper thread; past `timeout` the exporter is shut down, which aborts its retries, and the
        rest is counted as failed. Never raises.
        """
        with self._lock:
            if self._closed:
                return bool(self._shutdown_result)
            self._closed = True
        worker = threading.Thread(target=self._provider_shutdown, name="ragmon-events-shutdown", daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            try:
                self._exporter.shutdown()
            except Exception as exc:
                log.warning("evaluation events exporter shutdown failed: %r", exc)
        s = self.stats()
        pending = s.queued - s.exported - s.failed
        ok = not worker.is_alive() and s.failed == 0 and pending == 0
        if not ok:
            log.warning(
                "evaluation events: %d exported, %d failed, %d not delivered by shutdown (%.1fs)",
                s.exported,
                s.failed,
                pending,
                timeout,
            )
        self._shutdown_result = ok
        return ok

    def _provider_shutdown(self) -> None:
        try:
            self._provider.shutdown()
        except Exception as exc:
            log.warning("evaluation events shutdown failed: %r", exc)


def _id_problem(trace_id: str, span_id: str, judged_trace_id: str) -> str | None:
    """Why these ids cannot anchor an event (None: they can). Ids are echoed truncated: they came
    from spans, so they are bounded by decode, but a log line should not trust that."""
    if not _TRACE_ID.fullmatch(trace_id) or trace_id == "0" * 32:
        return f"invalid trace id {trace_id[:40]!r}"
    if not _SPAN_ID.fullmatch(span_id) or span_id == "0" * 16:
        return f"invalid span id {span_id[:40]!r} in trace {trace_id}"
    if judged_trace_id != trace_id:
        return f"judgement of trace {judged_trace_id[:40]!r} paired with record of trace {trace_id}"
    return None


def _safe_url(url: str) -> str:
    """The URL without credentials or query string, for log lines."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"
