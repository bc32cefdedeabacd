"""What the two OTLP verdict exporters share (the log events, `evaluation_events.py`; the
judgement span, `judgement_span.py`): the anchor on the judged root span, the exporter for the
configured transport, and a sink skeleton around the OTel SDK's batch processor.

`emit` only appends to the batch processor's queue; serialisation and the request happen on the
SDK's worker thread, never on the event loop. Admission is bounded in items and bytes
(`PendingBudget`); shutdown is bounded in time.
"""

from __future__ import annotations

import logging
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from monitor.contracts.model import Judgement, RagRecord
from monitor.outputs.config import EventsConfig, safe_url
from monitor.outputs.export_queue import PendingBudget, SinkStats

__all__ = ["OtlpVerdictSink", "Provider", "Settling", "anchor", "id_problem", "otlp_exporter"]

log = logging.getLogger(__name__)

_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")
_SPAN_ID = re.compile(r"[0-9a-fA-F]{16}")
MAX_EXPORT_BATCH = 512


def id_problem(record: RagRecord, judgement: Judgement) -> str | None:
    """Why the record's root span ids cannot anchor verdicts (None: they can). Ids are echoed
    truncated: they came from spans, so they are bounded by decode, but a log line should not
    trust that."""
    trace_id, span_id = record.trace_id, record.span_id
    if not _TRACE_ID.fullmatch(trace_id) or trace_id == "0" * 32:
        return f"invalid trace id {trace_id[:40]!r}"
    if not _SPAN_ID.fullmatch(span_id) or span_id == "0" * 16:
        return f"invalid span id {span_id[:40]!r} in trace {trace_id}"
    if judgement.trace_id != trace_id:
        return f"judgement of trace {judgement.trace_id[:40]!r} paired with record of trace {trace_id}"
    return None


def anchor(record: RagRecord, judgement: Judgement) -> Context | str:
    """The context of the record's root span (remote, sampled) to attach verdicts to, or why its ids
    cannot anchor them (`id_problem`)."""
    problem = id_problem(record, judgement)
    if problem is not None:
        return problem
    trace_id, span_id = record.trace_id, record.span_id
    parent = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent), Context())


def otlp_exporter(signal: Literal["logs", "traces"], url: str, config: EventsConfig) -> Any:
    """The SDK's OTLP exporter of `signal` for `config.protocol`. gRPC is imported only when
    chosen: grpcio is heavy, and most set-ups send HTTP to a Collector."""
    gzip = config.compression == "gzip"
    if config.protocol == "grpc":
        from grpc import Compression as GrpcCompression
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        grpc_cls: Any = GrpcLogs if signal == "logs" else GrpcSpans
        return grpc_cls(
            endpoint=url,
            insecure=url.startswith("http://"),
            headers=tuple((k.lower(), v) for k, v in config.headers.items()),
            timeout=config.timeout_seconds,
            compression=GrpcCompression.Gzip if gzip else GrpcCompression.NoCompression,
        )
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    http_cls: Any = OTLPLogExporter if signal == "logs" else OTLPSpanExporter
    return http_cls(
        endpoint=url,
        headers=config.headers,
        timeout=config.timeout_seconds,
        compression=Compression.Gzip if gzip else Compression.NoCompression,
    )


class Settling:
    """Wraps an OTLP exporter to learn what left the queue and how (the SDK's own counters are off
    unless its internal metrics are enabled by environment), and to make shutdown idempotent: the
    sink may abort the exporter while the provider's shutdown later calls it again."""

    def __init__(self, inner: Any, budget: PendingBudget, size: Callable[[Any], int]) -> None:
        self._inner = inner
        self._budget = budget
        self._size = size
        self._shut = False
        self._shut_lock = threading.Lock()

    def _settle_export(self, batch: Sequence[Any], success: object) -> Any:
        sizes = [self._size(item) for item in batch]
        try:
            result = self._inner.export(batch)
        except Exception:
            self._budget.settle(sizes, ok=False)
            raise
        self._budget.settle(sizes, ok=result is success)
        return result

    def shutdown(self) -> None:
        with self._shut_lock:
            if self._shut:
                return
            self._shut = True
        stop: Callable[[], None] = self._inner.shutdown  # untyped in the SDK
        stop()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))


class SettlingLogExporter(Settling, LogRecordExporter):
    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        result: LogRecordExportResult = self._settle_export(batch, LogRecordExportResult.SUCCESS)
        return result


class SettlingSpanExporter(Settling, SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result: SpanExportResult = self._settle_export(spans, SpanExportResult.SUCCESS)
        return result


class Provider(Protocol):
    """The SDK's LoggerProvider or TracerProvider, as far as the sink uses it."""

    def shutdown(self) -> object: ...


class OtlpVerdictSink(ABC):
    """One OTLP verdict exporter: its own provider (never the global one: the application's
    telemetry is not exported, and shutdown is ours to time), a batch processor, a budget.
    Thread-safe; `emit` is meant for the event loop (it never does I/O)."""

    sink: str  # the `sink` label value

    def __init__(self, config: EventsConfig, url: str) -> None:
        self.budget = PendingBudget(self.sink, config.max_queue_size, config.max_queue_bytes)
        self._text_limit = config.text_limit
        self._shutdown_result: bool | None = None
        self._provider, self._exporter = self._start(config, url)
        shown = config.redacted()
        log.info(
            "%s: exporting over OTLP/%s to %s (headers: %s)",
            self.sink,
            config.protocol,
            safe_url(url),
            shown["headers"],
        )

    @abstractmethod
    def _start(self, config: EventsConfig, url: str) -> tuple[Provider, Settling]:
        """Build the provider and its batch processor; it, and the settling exporter it sends
        through."""

    @abstractmethod
    def _emit(self, judgement: Judgement, record: RagRecord, context: Context) -> None:
        """Queue the items of one judgement (each admitted through `self.budget`)."""

    def emit(self, judgement: Judgement, record: RagRecord) -> None:
        """Queue the verdicts of one judgement of `record`. Never blocks, never raises: past the
        budget new items are dropped and counted, so a dead receiver costs bounded memory, not
        back-pressure."""
        try:
            context = anchor(record, judgement)
            if isinstance(context, str):
                self.budget.skipped()
                log.warning("%s: verdicts skipped: %s", self.sink, context)
                return
            self._emit(judgement, record, context)
        except Exception as exc:  # a bug here must not cost a judge worker
            log.warning("%s: verdicts for trace %s not emitted: %r", self.sink, record.trace_id[:40], exc)

    def stats(self) -> SinkStats:
        return self.budget.stats()

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Flush what is queued and stop, in at most ~`timeout` seconds. Blocking: from async code
        call it via `asyncio.to_thread`. True if everything queued was exported.

        The SDK's own shutdown waits up to 30 s per processor whatever it is told, so it runs on a
        helper thread; past `timeout` the exporter is shut down, which aborts its retries, and the
        rest is counted as failed. Never raises.
        """
        if not self.budget.close():
            return bool(self._shutdown_result)
        worker = threading.Thread(
            target=self._stop_provider, name=f"ragmon-{self.sink}-shutdown", daemon=True
        )
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            try:
                self._exporter.shutdown()
            except Exception as exc:
                log.warning("%s: exporter shutdown failed: %r", self.sink, exc)
        s = self.stats()
        pending = s.queued - s.exported - s.failed
        ok = not worker.is_alive() and s.failed == 0 and pending == 0
        if not ok:
            log.warning(
                "%s: %d exported, %d failed, %d not delivered by shutdown (%.1fs)",
                self.sink,
                s.exported,
                s.failed,
                pending,
                timeout,
            )
        self._shutdown_result = ok
        return ok

    def _stop_provider(self) -> None:
        """Flush and stop the provider (blocking: the SDK's may take 30 s)."""
        try:
            self._provider.shutdown()
        except Exception as exc:
            log.warning("%s: shutdown failed: %r", self.sink, exc)
