"""The sidecar: wires source → decode → assemble → slice → sample → output, and owns shutdown.

Tasks share one event loop: the consumer (decode and assembly, the hot path), judge workers, the
writer (results to the sinks) and housekeeping (commits and gauges). Bounded queues between them turn
a slow judge or sink into back-pressure on Kafka rather than memory growth.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition

if TYPE_CHECKING:
    from monitor.golden import GoldenGauges

from monitor.config import Settings
from monitor.estimate import WindowEstimator
from monitor.ingest.assemble import Assembler, Finished
from monitor.ingest.classify import QueryClassifier
from monitor.ingest.decode import Encoding, decode
from monitor.ingest.sample import Sampler, trace_fraction
from monitor.judge import Judge, Judgement, JudgeOutcome, create_judge, skip_reason
from monitor.judge.base import LLMJudgeConfig, price_for
from monitor.judge.budget import JudgeBudget, upper_bound
from monitor.judge.calibrate import disagreements
from monitor.kafka.consumer import KafkaSource
from monitor.kafka.offsets import MessageRef, OffsetTracker
from monitor.kafka.producer import KafkaOutput
from monitor.metrics import Metrics, RecordSeries
from monitor.model import RagRecord, Reject
from monitor.outputs.evaluation_events import EvaluationEventSink
from monitor.outputs.results import FileSink, ResultSink, TopicSink, encode_line
from monitor.rejects import Rejections
from monitor.slices import BoundedLabel

log = logging.getLogger(__name__)

_WRITE_BATCH = 256


@dataclass(slots=True)
class _Sampled:
    record: RagRecord
    weight: float  # 1 / inclusion probability
    refs: list[MessageRef]
    service: str  # the bounded label value
    type_source: str  # where query_type came from: span, rules (the judge may relabel), none
    line: bytes = b""  # the results line, once judged


class Sidecar:
    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.tracker = OffsetTracker()
        self.assembler = Assembler(settings.assembly)
        self.rejections = Rejections(self.metrics)
        self.query_types = BoundedLabel(settings.slices.query_types, fallback="other", missing="unknown")
        self.services = BoundedLabel(
            settings.slices.services,
            fallback="other",
            missing="unknown_service",
            capacity=settings.slices.max_services,
            normalize=False,
        )
        classify = settings.slices.classify
        self.classifier = QueryClassifier(settings.slices.query_types) if classify != "off" else None
        self._judge_labels = classify == "judge"
        self.sampler = Sampler(settings.sampling)
        self.budget = JudgeBudget(settings.judge.budget) if settings.judge.budget.enabled else None
        self.estimator = WindowEstimator(settings.estimates, settings.slices.query_types)
        self.source = KafkaSource(settings.kafka, self.tracker, self._on_revoked, self._on_assigned)
        self._queue: asyncio.Queue[_Sampled] = asyncio.Queue(maxsize=settings.pipeline.queue_size)
        self._judged: asyncio.Queue[_Sampled] = asyncio.Queue(maxsize=settings.pipeline.queue_size)
        jc = settings.judge
        self._repeat = jc.repeat_fraction
        options = jc.options
        if jc.backend in ("anthropic", "openai"):
            # The workers are the in-flight bound; the backend's own semaphore must not halve it.
            options = {"max_concurrency": jc.workers, **options}
            if self._judge_labels:  # `unknown` means "no label": not a choice for the judge
                labels = [t for t in settings.slices.query_types if t != "unknown"]
                options = {"query_types": labels, **options}
        self.judge: Judge | None = None if jc.backend == "none" else create_judge(jc.backend, options)
        self._sinks: list[ResultSink] = []
        self.events: EvaluationEventSink | None = None
        self._events_seen = (0, 0, 0)  # exported, failed, dropped: already counted in metrics
        self._output: KafkaOutput | None = None
        self._encoding = Encoding(settings.kafka.encoding)
        # Labelled children cached per (service, query_type): `.labels()` costs more than the
        # observation itself, and both label sets are bounded, so the cache is too.
        self._series: dict[tuple[str, str], RecordSeries] = {}
        self.records_seen = 0
        self.golden_gauges: GoldenGauges | None = None
        if settings.golden.file is not None and settings.golden.target:
            from monitor.golden import GoldenGauges

            self.golden_gauges = GoldenGauges(self.metrics.registry)

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop` is set, then drain: emit complete traces, write what is queued,
        commit, leave the group."""
        await self._open_outputs(stop)
        # Per-span objects are short-lived; the default GC thresholds made collections ~9% of
        # the drain. Long-lived start-up objects are frozen out of every later collection.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
        if not await self.source.start(stop):
            await self._close_outputs()
            return
        workers = [
            asyncio.create_task(self._judge_loop(), name=f"ragmon-judge-{i}")
            for i in range(self.settings.judge.workers)
        ]
        writer = asyncio.create_task(self._write_loop(), name="ragmon-writer")
        keeper = asyncio.create_task(self._housekeeping(), name="ragmon-housekeeping")
        golden = self.settings.golden
        if golden.file is not None and golden.target:
            workers.append(asyncio.create_task(self._golden_loop(), name="ragmon-golden"))
        try:
            await self._consume(stop)
            for fin in self.assembler.flush(complete_only=True):
                await self._finish(fin)
            try:
                async with asyncio.timeout(self.settings.pipeline.drain_timeout_seconds):
                    await self._queue.join()
                    await self._judged.join()
            except TimeoutError:
                unwritten = self._queue.qsize() + self._judged.qsize()
                log.warning("drain timed out with %d records unwritten; they will be re-read", unwritten)
        finally:
            await _cancel_all([keeper, writer, *workers])
            if self.judge is not None:
                await self.judge.aclose()
            await self.source.stop()  # final commit
            await self._close_outputs()
            self.metrics.open_traces.set(self.assembler.open_traces)
            self.metrics.inflight.set(self._queue.qsize() + self._judged.qsize())
            log.info("stopped; %d records assembled", self.records_seen)

    async def _open_outputs(self, stop: asyncio.Event) -> None:
        kafka_cfg = self.settings.kafka
        results = self.settings.results
        if results.file is not None:
            self._sinks.append(FileSink(results.file))
        self.events = EvaluationEventSink.from_config(self.settings.events)
        if results.topic or kafka_cfg.dead_letter_topic:
            self._output = KafkaOutput(kafka_cfg)
            delay = 0.25
            while not stop.is_set():
                try:
                    await self._output.start()
                    break
                except Exception as exc:  # the producer raises several KafkaError kinds on connect
                    log.warning("output producer cannot connect (%s); retrying", type(exc).__name__)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, kafka_cfg.reconnect_backoff_max_seconds)
            if results.topic:
                self._sinks.append(TopicSink(self._output, results.topic))

    async def _close_outputs(self) -> None:
        for sink in self._sinks:
            await sink.close()
        if self.events is not None:
            await asyncio.to_thread(self.events.shutdown, 5.0)
            self._count_events()
        if self._output is not None:
            await self._output.close()

    # -- the hot path ----------------------------------------------------------------------

    async def _consume(self, stop: asyncio.Event) -> None:
        max_bytes = self.settings.kafka.max_message_bytes
        encoding = self._encoding
        assembler = self.assembler
        tracker = self.tracker
        stopping = asyncio.ensure_future(stop.wait())
        fetch: asyncio.Future[dict[TopicPartition, list[Any]]] | None = None
        try:
            while not stop.is_set():
                if fetch is None:
                    fetch = asyncio.ensure_future(self.source.fetch(timeout_ms=100))
                # The assembler's clock keeps ticking even while a rebalance holds the fetch.
                await asyncio.wait((fetch, stopping), timeout=0.2, return_when=asyncio.FIRST_COMPLETED)
                batch: dict[TopicPartition, list[Any]] = {}
                if fetch.done():
                    batch = fetch.result()
                    # Ask for the next batch before working on this one: aiokafka only refills
                    # its buffer when asked, and the broker round trip overlaps the decoding.
                    fetch = asyncio.ensure_future(self.source.fetch(timeout_ms=100))
                await self._process(batch, max_bytes, encoding, assembler, tracker)
        finally:
            stopping.cancel()
            if fetch is not None:
                # Whatever it brings is uncommitted, so the next owner reads it again.
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await fetch

    async def _process(
        self,
        batch: dict[TopicPartition, list[Any]],
        max_bytes: int,
        encoding: Encoding,
        assembler: Assembler,
        tracker: OffsetTracker,
    ) -> None:
        """Decode and assemble one fetched batch (possibly empty), then emit what is due."""
        now = time.monotonic()
        wall_ns = time.time_ns()
        finished: list[Finished] = []
        for tp, messages in batch.items():
            for i, msg in enumerate(messages):
                if i and not i % 256:
                    await asyncio.sleep(0)  # let the fetcher and heartbeats run
                ref = tracker.track(tp, msg.offset)
                value = msg.value
                if not value:
                    self._reject_message(Reject.EMPTY, "message has no value", tp, msg.offset, value, ref)
                    continue
                size = len(value)
                if size > max_bytes:
                    self._reject_message(
                        Reject.TOO_LARGE,
                        f"{size} bytes > max_message_bytes {max_bytes}",
                        tp,
                        msg.offset,
                        value,
                        ref,
                    )
                    continue
                decoded = decode(value, encoding, wall_ns)
                if decoded.error is not None:
                    self._reject_message(decoded.error, decoded.detail, tp, msg.offset, value, ref)
                    continue
                for problem in decoded.problems:
                    self.rejections.count(problem, decoded.detail, f"{tp.topic}/{tp.partition}@{msg.offset}")
                spans = decoded.spans
                if spans:
                    per_span = size // len(spans) + 1
                    for span in spans:
                        finished.extend(assembler.add(span, ref, per_span, now))
                for record in decoded.records:
                    ref.acquire()
                    finished.append(Finished(record.trace_id, record, None, [ref]))
                ref.release()
        finished.extend(assembler.poll(now))
        for fin in finished:
            await self._finish(fin)

    def _reject_message(
        self,
        reason: Reject,
        detail: str,
        tp: TopicPartition,
        offset: int,
        value: bytes | None,
        ref: MessageRef,
    ) -> None:
        self.rejections.count(reason, detail, f"{tp.topic}/{tp.partition}@{offset}")
        dlq = self.settings.kafka.dead_letter_topic
        if dlq and self._output is not None and value is not None:  # b"" too: it is what was sent
            # Held until the broker has the copy: a crash before that re-reads the original.
            task = asyncio.ensure_future(self._output.send_many(dlq, [(None, value)]))
            task.add_done_callback(lambda t: _dlq_done(t, ref))
        else:
            ref.release()

    async def _finish(self, fin: Finished) -> None:
        record = fin.record
        if record is None:
            if fin.reason is not None:
                self.rejections.count(fin.reason, f"trace {fin.trace_id}")
            _release(fin.refs)
            return
        if record.replay:
            # Golden-replay traffic is measured by the replay run, never as production quality.
            self.metrics.replay_records.inc()
            _release(fin.refs)
            return
        source = "span"
        if not record.query_type:
            source = "none"
            if self.classifier is not None:
                record.query_type = self.classifier(record.query)
                source = "rules"
        qt, outside = self.query_types.bound(record.query_type)
        if outside:
            self.rejections.count(
                Reject.QUERY_TYPE_UNKNOWN, "rag.query_type not in the allow-list; counted as 'other'"
            )
        record.query_type = qt
        service, _ = self.services.bound(record.service)
        series = self._series.get((service, qt))
        if series is None:
            series = self._series[(service, qt)] = self.metrics.record_series(service, qt)
        series.records.inc()
        series.chunks.observe(len(record.chunks))
        if record.chunks and record.chunks[0].score is not None:
            series.top_score.observe(record.chunks[0].score)
        if record.end_ns:
            self.metrics.record_lag.observe(max(0.0, time.time() - record.end_ns / 1e9))
        self.records_seen += 1
        probability = self.sampler.decide(record, time.time())
        if probability is None or (self.judge is None and not self._sinks):
            _release(fin.refs)
            return
        await self._queue.put(_Sampled(record, 1.0 / probability, fin.refs, service, source))

    # -- writer and housekeeping -------------------------------------------------------------

    async def _judge_loop(self) -> None:
        """One of `judge.workers` tasks: judge, count, hand the results line to the writer."""
        while True:
            item = await self._queue.get()
            result = item.record.to_json_dict()
            result["sampling_weight"] = item.weight
            result["query_type_source"] = item.type_source
            if self.judge is not None:
                skip = skip_reason(item.record)
                judgement = None if skip is not None else await self._judge_within_budget(item)
                if judgement is None:
                    skip = skip or "budget"
                    if skip == "budget":
                        self.sampler.unsample(item.record.query_type)  # the floor tries again
                    self.metrics.judge.skipped.labels(
                        service=item.service, query_type=item.record.query_type, reason=skip
                    ).inc()
                    result["judge_skipped"] = skip
                else:
                    if self._judge_labels and item.type_source == "rules" and judgement.judged_query_type:
                        # The judge read the query: its label beats the rules' for what it judged.
                        # Weights stay 1/p, so per-type estimates are domain estimates, still unbiased.
                        judgement.query_type, _ = self.query_types.bound(judgement.judged_query_type)
                        result["query_type_source"] = "judge"
                    self.metrics.judge.observe(judgement, item.service)
                    if self.events is not None:
                        self.events.emit(judgement, item.record)
                    self.estimator.observe(judgement)
                    result.update(judgement.to_json_dict())
                    if self._repeat and trace_fraction(item.record.trace_id + ":repeat") < self._repeat:
                        # Same budget, and the first thing to give up when it runs short.
                        again = await self._judge_within_budget(item)
                        if again is not None:
                            differ = disagreements(judgement, again)
                            self.metrics.judge.repeats.inc()
                            for check in differ:
                                self.metrics.judge.disagreements.labels(check=check).inc()
                            result["repeat_disagreements"] = differ
            item.line = encode_line(result)
            await self._judged.put(item)
            self._queue.task_done()

    async def _judge_within_budget(self, item: _Sampled) -> Judgement | None:
        """A judgement, or None when the budget cannot cover its upper-bound cost."""
        if self.budget is None:
            return await self._judge_safely(item)
        grant = self.budget.try_acquire(*self._judge_cost_bound(item.record))
        if grant is None:
            return None
        judgement = await self._judge_safely(item)
        self.budget.settle(grant, sum(judgement.tokens.as_dict().values()), judgement.cost_usd)
        return judgement

    def _judge_cost_bound(self, record: RagRecord) -> tuple[int, float]:
        """Upper bounds of one judgement's tokens and USD, so a budget is never overrun."""
        cfg = getattr(self.judge, "config", None)
        if not isinstance(cfg, LLMJudgeConfig):
            return 0, 0.0  # an offline judge costs nothing but still counts against calls/minute
        return upper_bound(
            record,
            max_output_tokens=cfg.max_tokens,
            price=price_for(cfg.model, cfg.prices),
            max_chunks=cfg.max_chunks,
            max_chunk_chars=cfg.max_chunk_chars,
        )

    async def _judge_safely(self, item: _Sampled) -> Judgement:
        """Judges report their own failures; a bug in one must still cost one judgement, not a
        worker (a dead worker would stall the queue and, behind it, the partition)."""
        assert self.judge is not None
        try:
            return await self.judge.judge(item.record, sampling_weight=item.weight)
        except Exception as exc:
            log.exception("judge %s failed unexpectedly on trace %s", self.judge.name, item.record.trace_id)
            return Judgement.failed(
                JudgeOutcome.INTERNAL_ERROR,
                f"unexpected {type(exc).__name__}",
                trace_id=item.record.trace_id,
                query_type=item.record.query_type,
                service=item.record.service,
                backend=self.judge.name,
                model=self.judge.model,
                sampling_weight=item.weight,
            )

    async def _write_loop(self) -> None:
        while True:
            items = [await self._judged.get()]
            while len(items) < _WRITE_BATCH and not self._judged.empty():
                items.append(self._judged.get_nowait())
            if self._sinks:
                await self._write_until_done([(item.record.trace_id, item.line) for item in items])
            for item in items:
                _release(item.refs)
                self._judged.task_done()

    async def _write_until_done(self, lines: list[tuple[str, bytes]]) -> None:
        delay = 0.5
        for sink in self._sinks:
            while True:
                try:
                    await sink.write(lines)
                    break
                except Exception as exc:  # a sink error must stall output, never lose it
                    log.warning(
                        "results sink %s failed (%s); retrying in %.1fs", type(sink).__name__, exc, delay
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)

    async def _housekeeping(self) -> None:
        interval = self.settings.kafka.commit_interval_seconds
        while True:
            await asyncio.sleep(interval)
            m = self.metrics
            m.open_traces.set(self.assembler.open_traces)
            m.inflight.set(self._queue.qsize() + self._judged.qsize())
            for partition, lag in (await self.source.lag()).items():
                m.consumer_lag.labels(partition=str(partition)).set(lag)
            await self.source.commit()
            self._export_estimates()
            self._count_events()
            if self.budget is not None:
                for limit, left in self.budget.remaining().items():
                    m.budget_remaining.labels(limit=limit).set(left)

    def _count_events(self) -> None:
        if self.events is None:
            return
        s = self.events.stats()
        now = (s.exported, s.failed, s.dropped)
        for outcome, new, old in zip(("exported", "failed", "dropped"), now, self._events_seen, strict=True):
            if new > old:
                self.metrics.evaluation_events.labels(outcome=outcome).inc(new - old)
        self._events_seen = now

    def _export_estimates(self) -> None:
        m = self.metrics
        for qt, snap in self.estimator.snapshot().items():
            m.window_samples.labels(query_type=qt).set(snap.samples)
            for gauge, est in (
                (m.faithfulness_window, snap.faithfulness),
                (m.hallucination_window, snap.hallucination_rate),
            ):
                for bound in ("estimate", "lower", "upper"):
                    if est is None:  # no sample in the window: no number, rather than a stale or NaN one
                        with contextlib.suppress(KeyError):
                            gauge.remove(qt, bound)
                    else:
                        gauge.labels(query_type=qt, bound=bound).set(getattr(est, bound))

    async def _golden_loop(self) -> None:
        """Replay the golden set every interval, on exactly one replica: the owner of partition 0
        of the input topic (ownership follows the consumer group, so failover is free)."""
        from monitor.golden import BaselineError, ReplayFailed, load_baseline, load_golden, run_replay

        cfg = self.settings.golden
        assert cfg.file is not None and cfg.target is not None
        leader = TopicPartition(self.settings.kafka.topic, 0)
        while True:
            await asyncio.sleep(cfg.interval_seconds)
            if not self.source.owns(leader):
                continue
            try:
                check = await asyncio.to_thread(load_golden, cfg.file)
                if not check.ok:
                    log.error(
                        "golden file %s has errors: %s", cfg.file, "; ".join(map(str, check.errors[:3]))
                    )
                    continue
                baseline = await asyncio.to_thread(load_baseline, cfg.baseline) if cfg.baseline else None
                report = await run_replay(
                    check.rows,
                    cfg.target,
                    k=cfg.k,
                    judge=self.judge,
                    concurrency=cfg.concurrency,
                    baseline=baseline,
                    golden_sha256=check.sha256,
                    golden_path=str(cfg.file),
                    gauges=self.golden_gauges,
                )
                log.info(
                    "golden replay: exit code %d, %d regression(s)", report.exit_code, len(report.regressions)
                )
            except (ReplayFailed, BaselineError, OSError) as exc:
                log.error("golden replay failed: %s", exc)

    def _on_assigned(self, owned: int, total: int) -> None:
        """Floors and budgets are group-wide: this member takes the share its partitions carry."""
        self.sampler.set_share(owned / total)
        if self.budget is not None:
            self.budget.set_group(owned, total)
        log.info("owning %d of %d partitions: floor share %.3g", owned, total, owned / total)

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        dropped = self.assembler.drop_partitions(set(revoked))
        # Holds on partitions still owned must go too, or their offsets could never advance.
        _release(dropped)
        if dropped:
            log.info("rebalance: %d open trace holds dropped; the new owner re-reads them", len(dropped))


async def _cancel_all(tasks: list[asyncio.Task[None]], grace: float = 5.0) -> None:
    """Cancel and reap `tasks`, bounded: a task that swallows its cancellation (Python 3.11's
    `wait_for` does, when its inner future completes at the same moment) is cancelled again, and
    after `grace` seconds abandoned with a warning, so shutdown never hangs on it. A task that
    died of an error re-raises it here, once all are reaped."""
    pending = set(tasks)
    deadline = time.monotonic() + grace
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - time.monotonic()
        if left <= 0:
            names = sorted(t.get_name() for t in pending)
            log.warning("shutdown: abandoning tasks that ignore cancellation: %s", names)
            break
        _, pending = await asyncio.wait(pending, timeout=min(left, 0.5))
    for task in tasks:
        error = task.exception() if task.done() and not task.cancelled() else None
        if error is not None:
            raise error


def _release(refs: list[MessageRef]) -> None:
    for ref in refs:
        ref.release()


def _dlq_done(task: asyncio.Future[None], ref: MessageRef) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("dead-letter write failed: %s", type(task.exception()).__name__)
    ref.release()
