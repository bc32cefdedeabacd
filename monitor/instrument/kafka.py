"""A span exporter that writes to Kafka exactly what the Collector's kafkaexporter would write.

Each export groups the spans by trace and sends one message per trace: the value is an OTLP
``ExportTraceServiceRequest`` made by the SDK's own `encode_spans` (the ``otlp_proto`` encoding),
the key is the trace id in hex (the kafkaexporter's ``partition_traces_by_id``), so all spans of a
trace land in one partition and the sidecar reads them with the default settings.

Why aiokafka on a private event loop in a background thread: aiokafka is already the project's
Kafka client (known to work against the embedded broker and real Kafka), it is pure Python (no
librdkafka to ship), and a private loop keeps it away from the service's own event loop, if any.
It is an extra (`rag-monitor[kafka]`): a service that exports OTLP does not carry a Kafka client, and
one that asks for this exporter without it gets one line saying so at construction, not a thread
that dies on its first connect.
The exporter's `export` (called in the BatchSpanProcessor's thread) only encodes and enqueues; it
never waits for the network. The queue between the two threads is bounded in messages and bytes:
when Kafka is slow or down, new traces are dropped and counted, and the service never blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from monitor.instrument.stats import SpanStats

__all__ = ["KafkaSpanExporter", "encode_trace_messages"]

log = logging.getLogger(__name__)


def encode_trace_messages(spans: Sequence[ReadableSpan]) -> list[tuple[bytes, bytes, int]]:
    """(key, value, span count) per trace, in first-seen order: the kafkaexporter's message layout."""
    by_trace: dict[int, list[ReadableSpan]] = {}
    for s in spans:
        ctx = s.context
        if ctx is None:
            continue
        by_trace.setdefault(ctx.trace_id, []).append(s)
    return [
        (f"{tid:032x}".encode(), bytes(encode_spans(group).SerializeToString()), len(group))
        for tid, group in by_trace.items()
    ]


class KafkaSpanExporter(SpanExporter):
    """OTLP protobuf to a Kafka topic, one message per trace keyed by trace id; never blocks.

    `max_pending_messages` / `max_pending_bytes` bound what waits for Kafka (queued or in flight);
    past them new traces are dropped and counted in `stats.dropped`. Messages the broker never
    acknowledges (timeout, error) count in `stats.failed`, acknowledged spans in `stats.exported`.
    While Kafka cannot be reached the exporter keeps reconnecting with backoff.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = "otlp_spans",
        *,
        stats: SpanStats | None = None,
        max_pending_messages: int = 4096,
        max_pending_bytes: int = 64 * 1024 * 1024,
        client_id: str = "rag-monitor-instrument",
        request_timeout_ms: int = 10_000,
        linger_ms: int = 20,
        reconnect_backoff_max_seconds: float = 5.0,
        **producer_options: Any,
    ) -> None:
        if max_pending_messages < 1 or max_pending_bytes < 1:
            raise ValueError("max_pending_messages and max_pending_bytes must be >= 1")
        if importlib.util.find_spec("aiokafka") is None:
            raise ModuleNotFoundError(
                "the Kafka span exporter needs aiokafka: pip install 'rag-monitor[kafka]'", name="aiokafka"
            )
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.stats = stats if stats is not None else SpanStats()
        self._max_msgs = max_pending_messages
        self._max_bytes = max_pending_bytes
        self._backoff_max = reconnect_backoff_max_seconds
        self._producer_options: dict[str, Any] = {
            "client_id": client_id,
            "request_timeout_ms": request_timeout_ms,
            "linger_ms": linger_ms,
            "acks": 1,
            "max_batch_size": 1 << 20,
            **producer_options,
        }
        self._queue: deque[tuple[bytes, bytes, int]] = deque()
        self._pending_msgs = 0  # queued + in flight
        self._pending_bytes = 0
        self._pending_spans = 0
        self._cond = threading.Condition()
        self._inflight_spans = 0  # sent, not yet acknowledged (loop thread only)
        self._closed = False
        self._connected = False
        self._shutdown_timeout = 10.0
        self._start_thread()
        if hasattr(os, "register_at_fork"):  # pre-fork servers (gunicorn --preload): restart in the child
            ref = weakref.WeakMethod(self._after_fork)
            os.register_at_fork(after_in_child=lambda: (m := ref()) is not None and m())

    def _start_thread(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._wake = asyncio.Event()  # something was queued, or closing
        self._closing = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="rag-kafka-span-exporter", daemon=True)
        self._thread.start()

    def _after_fork(self) -> None:
        """The parent's thread and loop do not exist in a forked child: start afresh, queue empty."""
        self._queue.clear()
        self._pending_msgs = self._pending_bytes = self._pending_spans = self._inflight_spans = 0
        self._cond = threading.Condition()
        self._connected = False
        self.stats.reset_after_fork()
        if not self._closed:
            self._start_thread()

    # --- called from the BatchSpanProcessor's thread ------------------------------------------

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            self.stats.add(dropped=len(spans))
            return SpanExportResult.FAILURE
        try:
            messages = encode_trace_messages(spans)
        except Exception:
            log.exception("encoding %d spans failed", len(spans))
            self.stats.add(failed=len(spans))
            return SpanExportResult.FAILURE
        dropped = 0
        added = False
        with self._cond:
            for m in messages:
                size = len(m[1])
                if self._pending_msgs >= self._max_msgs or self._pending_bytes + size > self._max_bytes:
                    dropped += m[2]
                    continue
                self._queue.append(m)
                self._pending_msgs += 1
                self._pending_bytes += size
                self._pending_spans += m[2]
                added = True
        if dropped:
            self.stats.add(dropped=dropped)
        if added:
            with contextlib.suppress(RuntimeError):  # loop already closed by shutdown
                self._loop.call_soon_threadsafe(self._wake.set)
        return SpanExportResult.FAILURE if dropped else SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until everything queued is acknowledged or failed; False on timeout."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._cond:
            while self._pending_msgs:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def shutdown(self, timeout_millis: int = 10_000) -> None:
        """Send what is queued (up to the timeout), then stop; what is left counts as dropped."""
        if self._closed:
            return
        self._shutdown_timeout = timeout_millis / 1000
        self._closed = True
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._wake.set)
            self._loop.call_soon_threadsafe(self._closing.set)
        self._thread.join(timeout_millis / 1000 + 5)

    @property
    def pending(self) -> int:
        """Messages queued or in flight."""
        return self._pending_msgs

    @property
    def pending_spans(self) -> int:
        """Spans in the messages queued or in flight."""
        return self._pending_spans

    @property
    def connected(self) -> bool:
        return self._connected

    # --- the exporter's own thread --------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except Exception:
            log.exception("Kafka span exporter thread failed")
        finally:
            self._drop_queued()
            if self._inflight_spans:  # never acknowledged before the producer stopped
                self.stats.add(failed=self._inflight_spans)
            self._loop.close()

    def _settle(self, n_spans: int, size: int, *, ok: bool) -> None:
        self._inflight_spans -= n_spans
        if ok:
            self.stats.add(exported=n_spans)
        else:
            self.stats.add(failed=n_spans)
        with self._cond:
            self._pending_msgs -= 1
            self._pending_bytes -= size
            self._pending_spans -= n_spans
            self._cond.notify_all()

    def _acked(self, n_spans: int, size: int, fut: asyncio.Future[Any]) -> None:
        self._settle(n_spans, size, ok=not fut.cancelled() and fut.exception() is None)

    def _drop_queued(self) -> None:
        with self._cond:
            n = sum(m[2] for m in self._queue)
            self._queue.clear()
            self._pending_msgs = 0
            self._pending_bytes = 0
            self._pending_spans = 0
            self._cond.notify_all()
        if n:
            self.stats.add(dropped=n)

    async def _connect(self) -> Any:
        from aiokafka import AIOKafkaProducer

        backoff = 0.1
        warned = False
        while not self._closed:
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, **self._producer_options)
            try:
                await producer.start()
            except Exception as exc:
                # Once per outage at WARNING: a long outage must not flood the service's log.
                log.log(
                    logging.DEBUG if warned else logging.WARNING,
                    "Kafka span exporter: cannot reach %s (%s); spans queue up to the bound, then drop",
                    self.bootstrap_servers,
                    exc,
                )
                warned = True
                with contextlib.suppress(Exception):
                    await producer.stop()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(backoff):
                        await self._closing.wait()
                backoff = min(backoff * 2, self._backoff_max)
                continue
            self._connected = True
            return producer
        return None

    async def _main(self) -> None:
        producer = await self._connect()
        if producer is None:
            return
        try:
            while True:
                while self._queue:
                    key, value, n = self._queue.popleft()
                    self._inflight_spans += n
                    try:
                        fut = await producer.send(self.topic, value=value, key=key)
                    except Exception as exc:
                        log.warning("Kafka span exporter: send failed (%s)", exc)
                        self._settle(n, len(value), ok=False)
                        continue
                    fut.add_done_callback(functools.partial(self._acked, n, len(value)))
                if self._closed:
                    break
                await self._wake.wait()
                self._wake.clear()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._shutdown_timeout):
                    await producer.flush()
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await producer.stop()
            self._connected = False
