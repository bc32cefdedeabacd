"""`configure`: one call that gives a RAG service a tracer provider, an exporter and content rules.

Two ways out of the process, both behind a BatchSpanProcessor (spans leave in batches from its own
thread, never in the request path):

- ``"otlp"``: OTLP/HTTP protobuf to an OpenTelemetry Collector, whose kafkaexporter writes the topic
  the sidecar reads. The standard deployment.
- ``"kafka"``: `KafkaSpanExporter` straight to the topic, same bytes, no Collector to run.

Queues are bounded everywhere and drop (counted in `Instrumentation.stats`) instead of blocking.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from monitor.instrument import spans as _spans
from monitor.instrument.content import ContentPolicy
from monitor.instrument.kafka import KafkaSpanExporter
from monitor.instrument.stats import SpanStats

__all__ = ["CountingExporter", "Instrumentation", "configure", "current", "shutdown"]

log = logging.getLogger(__name__)

ExporterName = Literal["otlp", "kafka", "none"]
TRACER_NAME = "monitor.instrument"


class CountingExporter(SpanExporter):
    """Wraps an exporter whose `export` reports delivery (OTLP): counts exported and failed spans."""

    def __init__(self, inner: SpanExporter, stats: SpanStats) -> None:
        self.inner = inner
        self.stats = stats

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:
            log.exception("span export failed")
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.stats.add(exported=len(spans))
        else:
            self.stats.add(failed=len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _CountingQueue(collections.deque[Any]):
    """The batch processor's bounded deque, counting what a full queue evicts.

    The processor appends from the service's threads and pops from its worker; one lock around both
    makes "full, so this append evicts a span" exact (a bare length check before the append would
    race with the worker's pop and count drops that never happened).
    """

    def __init__(self, maxlen: int, stats: SpanStats) -> None:
        super().__init__((), maxlen)
        self._stats = stats
        self._lock = threading.Lock()

    def appendleft(self, item: Any) -> None:
        with self._lock:
            full = len(self) == self.maxlen
            super().appendleft(item)
        if full:
            self._stats.add(dropped=1)

    def pop(self) -> Any:  # type: ignore[override]  # deque.pop takes no index
        with self._lock:
            return super().pop()


class _CountingBatchProcessor(BatchSpanProcessor):
    """A BatchSpanProcessor whose full-queue drops are counted (the SDK only logs them).

    Swaps in `_CountingQueue` for the SDK's private deque (SDK >= 1.31); where that is not found,
    queue drops go uncounted rather than breaking the processor.
    """

    def __init__(self, exporter: SpanExporter, stats: SpanStats, max_queue_size: int, **kw: Any) -> None:
        super().__init__(exporter, max_queue_size=max_queue_size, **kw)
        inner = getattr(self, "_batch_processor", None)
        if isinstance(getattr(inner, "_queue", None), collections.deque):
            inner._queue = _CountingQueue(max_queue_size, stats)  # type: ignore[union-attr]
        else:
            log.debug("BatchSpanProcessor internals changed: queue drops are not counted")


@dataclass(slots=True)
class Instrumentation:
    """What `configure` set up. `stats` counts exported / dropped / failed spans."""

    provider: TracerProvider | None
    exporter: SpanExporter | None
    stats: SpanStats
    policy: ContentPolicy
    owns_provider: bool

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Push ended spans to the exporter and wait for Kafka to acknowledge them."""
        ok = True
        if self.provider is not None:
            ok = self.provider.force_flush(timeout_millis)
        exp = self.exporter.inner if isinstance(self.exporter, CountingExporter) else self.exporter
        if isinstance(exp, KafkaSpanExporter):
            ok = exp.force_flush(timeout_millis) and ok
        return ok

    def shutdown(self) -> None:
        """Flush, stop the exporter and turn tracing off (if this is still the active configuration)."""
        global _current
        if _current is self:
            _spans._install(None, self.policy)
            _current = None
        if self.provider is not None and self.owns_provider:
            self.provider.shutdown()


_current: Instrumentation | None = None


def current() -> Instrumentation | None:
    """The active configuration, if any."""
    return _current


def shutdown() -> None:
    """Shut the active configuration down (flushes its spans); tracing is off afterwards."""
    if _current is not None:
        _current.shutdown()


def _make_exporter(
    exporter: ExporterName | SpanExporter,
    stats: SpanStats,
    otlp_endpoint: str | None,
    otlp_headers: Mapping[str, str] | None,
    kafka_bootstrap_servers: str | None,
    kafka_topic: str,
    kafka_options: Mapping[str, Any] | None,
) -> SpanExporter | None:
    if isinstance(exporter, SpanExporter):
        return exporter if isinstance(exporter, KafkaSpanExporter) else CountingExporter(exporter, stats)
    if exporter == "none":
        return None
    if exporter == "kafka":
        if not kafka_bootstrap_servers:
            raise ValueError("exporter='kafka' needs kafka_bootstrap_servers")
        options = dict(kafka_options or {})
        return KafkaSpanExporter(kafka_bootstrap_servers, kafka_topic, stats=stats, **options)
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # endpoint=None: the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, else localhost:4318.
        otlp = OTLPSpanExporter(endpoint=otlp_endpoint, headers=dict(otlp_headers) if otlp_headers else None)
        return CountingExporter(otlp, stats)
    raise ValueError(f"unknown exporter {exporter!r} (otlp, kafka, none, or a SpanExporter)")


def configure(
    service_name: str = "rag-service",
    *,
    exporter: ExporterName | SpanExporter = "otlp",
    otlp_endpoint: str | None = None,
    otlp_headers: Mapping[str, str] | None = None,
    kafka_bootstrap_servers: str | None = None,
    kafka_topic: str = "otlp_spans",
    kafka_options: Mapping[str, Any] | None = None,
    content: ContentPolicy | None = None,
    enabled: bool = True,
    tracer_provider: trace_api.TracerProvider | None = None,
    set_global: bool = False,
    resource_attributes: Mapping[str, str] | None = None,
    batch: bool = True,
    max_queue_size: int = 2048,
    max_export_batch_size: int = 512,
    schedule_delay_millis: float = 500,
) -> Instrumentation:
    """Turn the decorators on: a `TracerProvider` with resource ``service.name`` and the exporter.

    `exporter`: ``"otlp"`` (OTLP/HTTP to `otlp_endpoint`, e.g. ``http://collector:4318/v1/traces``),
    ``"kafka"`` (`KafkaSpanExporter` to `kafka_bootstrap_servers` / `kafka_topic`; `kafka_options`
    go to it), ``"none"``, or any `SpanExporter`. `tracer_provider`: use an existing provider (the
    application's own) instead; exporter settings are then ignored. `set_global` also installs the
    new provider as OpenTelemetry's global one, so third-party instrumentations share it (possible
    once per process). `batch=False` exports synchronously (tests only). A second call replaces the
    first configuration (shutting it down). `enabled=False` leaves every decorator a pass-through.
    """
    global _current
    if _current is not None:
        _current.shutdown()
    policy = content or ContentPolicy()
    stats = exporter.stats if isinstance(exporter, KafkaSpanExporter) else SpanStats()
    if not enabled:
        _spans._install(None, policy)
        _current = Instrumentation(None, None, stats, policy, owns_provider=False)
        return _current

    if tracer_provider is not None:
        _spans._install(tracer_provider.get_tracer(TRACER_NAME), policy)
        sdk = tracer_provider if isinstance(tracer_provider, TracerProvider) else None
        _current = Instrumentation(sdk, None, stats, policy, owns_provider=False)
        return _current

    resource = Resource.create({**(resource_attributes or {}), "service.name": service_name})
    # Room for max_documents x (id, content, score) on a retriever span; the SDK default is 128.
    limits = SpanLimits(max_span_attributes=max(128, 3 * policy.max_documents + 32))
    provider = TracerProvider(resource=resource, span_limits=limits)
    exp = _make_exporter(
        exporter,
        stats,
        otlp_endpoint,
        otlp_headers,
        kafka_bootstrap_servers,
        kafka_topic,
        kafka_options,
    )
    if exp is not None:
        if batch:
            provider.add_span_processor(
                _CountingBatchProcessor(
                    exp,
                    stats,
                    max_queue_size,
                    max_export_batch_size=max_export_batch_size,
                    schedule_delay_millis=schedule_delay_millis,
                )
            )
        else:
            provider.add_span_processor(SimpleSpanProcessor(exp))
    if set_global:
        trace_api.set_tracer_provider(provider)
    _spans._install(provider.get_tracer(TRACER_NAME), policy)
    _current = Instrumentation(provider, exp, stats, policy, owns_provider=True)
    return _current
