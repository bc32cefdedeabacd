"""The judge stage: samples topic → budget → judge → results (file, topic, evaluation events) →
judgement metrics and estimates. Drift detection reads the results topic (`monitor.drift.stage`).

Its own consumer group reads the samples the ingest stage produced; an offset is committed once
the results of every sample before it are written. Between fetch and write the samples held are
bounded in count and in bytes (`pipeline.queue_size`, `pipeline.queue_bytes`, plus one fetch):
past either the partitions are paused, not the
fetch loop, so the member keeps polling and is never evicted for a slow judge. A judge outage
opens the circuit breaker (`breaker`): samples wait on their topic, and after recovery every one
gets a real judgement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import TopicPartition

from monitor.contracts.estimate import EstimatePolicy, WindowEstimator
from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Chunk, Judgement, RagRecord
from monitor.contracts.results import ResultLine, encode_result, result_line
from monitor.contracts.samples import BadSample, blake2b_fraction, decode_sample
from monitor.contracts.slices import BoundedLabel, SlicesConfig
from monitor.judge import Judge, skip_reason
from monitor.judge.breaker import OUTAGE, CircuitBreaker, State
from monitor.judge.budget import JudgeBudget
from monitor.judge.calibrate import disagreements
from monitor.judge.citations import check_citations, read_citations
from monitor.judge.config import JudgeConfig, JudgeQueue, ReviewConfig
from monitor.judge.metered import MeteredJudge
from monitor.judge.model import SelfEvaluationGuard
from monitor.judge.review import ReviewQueue, review_queue
from monitor.kafka.config import KafkaConfig
from monitor.kafka.consumer import Batch, KafkaSource, SourceSpec
from monitor.kafka.offsets import MessageRef, OffsetTracker
from monitor.kafka.producer import KafkaOutput
from monitor.outputs.config import EventsConfig, ResultsConfig
from monitor.outputs.export_queue import OUTCOMES
from monitor.outputs.result_sinks import FileSink, ResultSink, TopicSink, reopen_on_sighup
from monitor.outputs.verdict_exports import VerdictExports
from monitor.plumbing.progress import Progress, StageProgress
from monitor.plumbing.tasks import cancel_all

log = logging.getLogger(__name__)

# What the stage asks the judge when one sample keeps failing and no other has been judged since:
# a record any working judge answers, so its success tells "this sample" from "the judge".
CANARY = RagRecord(
    trace_id="0" * 32,
    span_id="0" * 16,
    service="rag-monitor",
    query="What colour is the sky on a clear day?",
    query_type="other",
    chunks=[Chunk("canary", "On a clear day the sky is blue.")],
    answer="The sky is blue.",
)

_WRITE_BATCH = 256


@dataclass(slots=True)
class _Sample:
    record: RagRecord
    weight: float  # 1 / inclusion probability
    ref: MessageRef
    partition: TopicPartition
    service: str  # the bounded label value
    type_source: str  # where query_type came from: span, rules, none; judge once it relabelled
    clipped: dict[str, int] | None  # what the sample left out of the record's text
    attempts: int = 0  # outage errors of this sample
    successes_before: int = -1  # the breaker's success count at this sample's first outage error
    line: bytes = b""  # the results line, once judged
    query_type: str = ""  # the line's: the judge may have relabelled the record
    nbytes: int = 0  # the sample message's size: what holding it costs, near enough
    stratum: str | None = None  # what the sampler sampled it as (absent in older samples)
    record_query_type: str | None = None  # the record's own label, once the judge relabelled it


def _metered(judge: Judge, budget: JudgeBudget | None, config: JudgeConfig, metrics: Metrics) -> MeteredJudge:
    """`judge` behind the budget and the request counters, the spend limit said at start-up; a
    batch judge's batches exported too."""
    if config.budget.default_cap:
        log.warning(
            "judge %s: no judge.budget.usd_per_day configured; capping spend at the default %g USD "
            "a day (set usd_per_day to change it, null to lift it)",
            judge.name,
            config.budget.usd_per_day,
        )
    elif judge.name != "lexical" and config.budget.usd_per_day is None:
        log.warning("judge %s: no USD limit (judge.budget.usd_per_day: null)", judge.name)
    batch_stats = getattr(judge, "batch_stats", None)
    if batch_stats is not None:
        # Imported here: it brings the anthropic SDK (~40 MiB), which only batch mode needs.
        from monitor.judge.batches import BatchCollector

        metrics.registry.register(BatchCollector(batch_stats))
    return MeteredJudge(judge, budget, metrics.judge)


class JudgeStage:
    def __init__(
        self,
        metrics: Metrics,
        output: KafkaOutput,
        judge: Judge | None,
        *,
        kafka: KafkaConfig,
        config: JudgeConfig,
        queue: JudgeQueue,
        slices: SlicesConfig,
        estimates: EstimatePolicy,
        results: ResultsConfig,
        events: EventsConfig,
        review: ReviewConfig | None = None,
    ) -> None:
        """Built from its own sections (the sidecar picks them from the configuration): `config`
        is the `judge` section, `queue` what the stage takes from `pipeline`, `review` the review
        queue's (None, or not enabled: no queue)."""
        self.kafka = kafka
        self.config = config
        self.queue = queue
        self._results = results
        self._events_config = events
        self.metrics = metrics
        self._output = output
        self.tracker = OffsetTracker()
        self.source = self._samples_source(kafka, queue, metrics)
        self._bound_labels(metrics, slices)
        self.budget = JudgeBudget(config.budget) if config.budget.enabled else None
        self.judge = None if judge is None else _metered(judge, self.budget, config, metrics)
        self.breaker = CircuitBreaker(config.breaker, metrics.judge_circuit_open)
        self.estimator = WindowEstimator(estimates, slices.query_types)
        self._repeat = config.repeat_fraction
        self.self_evaluation = SelfEvaluationGuard()
        # The generator model of the last production record its own model judged: a replay of
        # the same service's answers (which name no model) is then self-judged too.
        self.self_judged_model: str | None = None
        self._queue: asyncio.Queue[_Sample] = asyncio.Queue()  # bounded by pausing: see _admit
        self._judged: asyncio.Queue[_Sample] = asyncio.Queue()
        self._held = 0  # samples read and not yet written
        self._held_bytes = 0  # and their messages' bytes
        # Samples written, while any is held and the judge is up (an outage is the breaker's
        # to show, not a stall).
        self._writes = Progress("judgements")
        self.progress = StageProgress("judge", (self.source.input, self._writes))
        self._sinks: list[ResultSink] = []
        self.events: VerdictExports | None = None
        # Per sink: (exported, failed, dropped) already counted in metrics.
        self._events_seen: dict[str, tuple[int, int, int]] = {}
        self.judged_seen = 0
        self.written = 0  # samples whose results are written (judged, skipped or failed)
        # Judged records for people: `monitor.judge.review`.
        self.review: ReviewQueue | None = review_queue(review, metrics.review)

    def _samples_source(self, kafka: KafkaConfig, queue: JudgeQueue, metrics: Metrics) -> KafkaSource:
        # Half the queue a fetch: the next fetch is in flight while one is admitted, so what is
        # held stays under twice the queue whenever the pause comes.
        fetch = min(kafka.max_poll_records, max(1, queue.queue_size // 2))
        spec = SourceSpec(queue.samples_topic, queue.group_id, "earliest", fetch)
        return KafkaSource(kafka, spec, self.tracker, metrics.consumer, self._on_revoked, self._on_assigned)

    def _bound_labels(self, metrics: Metrics, slices: SlicesConfig) -> None:
        """Labels read back from the samples topic are bounded again: anything may write to it."""
        self.query_types = BoundedLabel.query_types(slices.query_types)
        self.services = BoundedLabel.services(slices.services, slices.max_services)
        # Results lines carry the release as the sample names it (cleaned again: anything may write
        # to the topic); the estimate counters' label is bounded.
        self.slices = slices
        self.releases = BoundedLabel.releases(slices.releases, slices.max_releases)
        # Their product is bounded too: past `max_label_sets` a new set's estimate counters fold.
        self.estimate_budget = metrics.series_budget("estimate", slices.max_label_sets)
        self._judge_labels = slices.classify == "judge"

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, left: Callable[[], float]) -> None:
        """Consume until `stop`, then within the seconds `left()` gives: finish the judgements
        in flight, write them, commit, leave the group. What is left unwritten is re-read."""
        self._open_outputs()
        if not await self.source.start(stop):
            await self._close_outputs()
            return
        tasks = [
            asyncio.create_task(self._judge_loop(), name=f"ragmon-judge-{i}") for i in range(self.workers())
        ]
        tasks.append(asyncio.create_task(self._write_loop(), name="ragmon-writer"))
        tasks.append(asyncio.create_task(self._housekeeping(), name="ragmon-judge-housekeeping"))
        if self.review is not None:
            tasks.append(asyncio.create_task(self.review.run(), name="ragmon-review-writer"))
        try:
            await self.source.consume(stop, self._admit)
            # Samples not yet started are left for the next owner; those being judged finish.
            self._drop_queued(lambda s: True)
            await self._settle(lambda: left() - 3.0)
            if self._held:
                log.warning("shutdown: %d judgements unfinished; their samples are re-read", self._held)
            if self.review is not None:
                await self.review.drain(min(5.0, left() - 3.0))
        finally:
            await cancel_all(tasks)
            if self.judge is not None:
                await self.judge.aclose()
            await self.source.stop(grace_seconds=3.0)
            await self._close_outputs()
            self.metrics.inflight.set(self._held)
            log.info("judge stage stopped; %d samples judged", self.judged_seen)

    def owns(self, partition: int) -> bool:
        """Whether this member holds `partition` of the samples topic now (plain attribute reads:
        safe from the HTTP thread). Ownership follows the judge group, so the wiring can elect
        by it the one replica that does what only one may, and failover comes free."""
        return self.source.owns(TopicPartition(self.source.spec.topic, partition))

    def workers(self) -> int:
        """`judge.workers`, raised to what the judge prefers in flight (batch mode: a full batch),
        within the samples held (`pipeline.queue_size`): a worker waiting on a batch is one task."""
        workers = self.config.workers
        wanted = None if self.judge is None else self.judge.preferred_concurrency
        if wanted is not None and wanted > workers:
            workers = min(wanted, max(workers, self.queue.queue_size))
            log.info("judge stage: %d workers, to fill the judge's batches", workers)
        return workers

    async def _settle(self, left: Callable[[], float]) -> None:
        """Until nothing read is unwritten, `left()` runs out, or the judge is down (then none
        of what is held would end)."""
        while self._held and left() > 0 and self.breaker.state is State.CLOSED:  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    async def catch_up(self, left: Callable[[], float]) -> None:
        """Until every sample on the topic now is read and its result written (or `left()` runs
        out): with both stages in one process, what ingest produced on its way out. Read means
        the positions reached the log ends and then stayed put for a second (some brokers'
        ListOffsets lag behind what a fetch returns: tansu counts batches, not records)."""
        ends = await self.source.end_offsets()
        last: dict[TopicPartition, int] = {}
        still = time.monotonic()
        while left() > 0 and self.breaker.state is State.CLOSED:
            positions = await self.source.positions()
            if positions != last:
                last, still = positions, time.monotonic()
            reached = all(positions.get(tp, 0) >= end for tp, end in ends.items())
            if reached and not self._held and time.monotonic() - still >= 1.0:
                return
            await asyncio.sleep(0.05)

    def _open_outputs(self) -> None:
        results = self._results
        if results.file is not None:
            self._sinks.append(
                FileSink(
                    results.file, results.file_max_bytes, results.file_keep, self.metrics.results_write_errors
                )
            )
            reopen_on_sighup()
        if results.topic:
            self._sinks.append(
                TopicSink(
                    self._output,
                    results.topic,
                    self.queue.max_message_bytes,
                    self.metrics.produce_dropped,
                )
            )
        self.events = VerdictExports.from_config(self._events_config)
        if self.events is not None:
            self.events.start()
        if self.review is not None:
            self.review.open_sinks(self._output, self.queue.max_message_bytes, self.metrics.produce_dropped)

    async def _close_outputs(self) -> None:
        for sink in self._sinks:
            await sink.close()
        if self.review is not None:
            await self.review.close()
        if self.events is not None:
            await self.events.close(5.0)
            self._count_events()

    # -- reading samples -------------------------------------------------------------------

    async def _admit(self, batch: Batch) -> None:
        tracker = self.tracker
        limit_bytes = self.queue.queue_bytes
        read = read_bytes = 0
        for tp, messages in batch.items():
            generation = tracker.generation(tp)
            for msg in messages:
                ref = tracker.track(tp, msg.offset, generation)
                if ref is None:
                    break  # revoked since this batch was fetched
                try:
                    sample, record = decode_sample(msg.value)
                except BadSample as exc:
                    self.metrics.bad_samples.inc()
                    log.error("%s/%d@%d: not a sample, skipped: %s", tp.topic, tp.partition, msg.offset, exc)
                    ref.release()
                    continue
                weight = 1.0 / sample.inclusion_probability
                record.query_type, _ = self.query_types.bound(record.query_type)
                service, _ = self.services.bound(sample.service_label)
                # The results line and the estimates carry the bounded label, never the raw value.
                record.release = self.slices.release_value(sample.release_label)
                nbytes = len(msg.value)
                self._held += 1
                self._held_bytes += nbytes
                read += 1
                read_bytes += nbytes
                self._queue.put_nowait(
                    _Sample(
                        record,
                        weight,
                        ref,
                        tp,
                        service,
                        sample.query_type_source,
                        sample.clipped,
                        nbytes=nbytes,
                        stratum=sample.stratum,
                    )
                )
        self._note_waiting()
        # A fetch takes at most half the bytes bound at the last batch's mean sample size, as it
        # takes half the count bound: the next fetch is in flight when the pause comes.
        if read:
            source = self.source
            fit = int(limit_bytes / 2 * read / read_bytes)
            source.max_records = max(1, min(source.spec.max_poll_records, fit))
        # Pausing, not blocking, bounds what is held: the fetch loop keeps polling, so the
        # member stays in its group however long the judge takes. Count or bytes, whichever is
        # reached first: a few large samples weigh as much as many.
        limit = self.queue.queue_size
        if not self.source.paused and (self._held >= limit or self._held_bytes >= limit_bytes):
            self.source.pause()
        elif self.source.paused and self._held <= limit // 2 and self._held_bytes <= limit_bytes // 2:
            self.source.resume()

    def _drop_queued(self, which: Callable[[_Sample], bool]) -> None:
        """Forget queued samples (not those being judged) that `which` selects: on a revoke,
        their partition's new owner judges them; on shutdown, the next start does."""
        keep: list[_Sample] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if which(item):
                self._held -= 1
                self._held_bytes -= item.nbytes
            else:
                keep.append(item)
        for item in keep:
            self._queue.put_nowait(item)

    # -- judging and writing -----------------------------------------------------------------

    async def _judge_loop(self) -> None:
        """One of `judge.workers` tasks: judge, count, hand the results line to the writer."""
        while True:
            item = await self._queue.get()
            line = await self._judge_item(item)
            if line is None:  # an outage: back in the queue, after the others
                self._queue.put_nowait(item)
                continue
            item.line = line
            self._judged.put_nowait(item)

    async def _canary(self) -> bool:
        """Whether the judge can judge a record known to be harmless (one billed call, counted in
        the judge's request and cost series, never in its verdicts)."""
        assert self.judge is not None
        judgement = await self.judge.try_judge(CANARY)
        if judgement is None or judgement.outcome in OUTAGE:
            if judgement is not None:
                await self.breaker.failure(judgement.outcome, False, judgement.error or "")
            return False
        await self.breaker.success()
        log.info("judge canary answered (%s): the sample that keeps failing is given up", judgement.outcome)
        return True

    async def _judge_item(self, item: _Sample) -> bytes | None:
        """The results line of one sample, or None when the judge was down (judge it again)."""
        record, judge = item.record, self.judge
        item.query_type = record.query_type
        if judge is None:
            return encode_result(self._line(item))
        # The judge reads the answer without its citation markers ("[2]" is neither a number of
        # a claim nor a word to cover); the citations are checked against its claims afterwards.
        judged, cited = read_citations(record)
        skip = skip_reason(judged)
        judgement: Judgement | None = None
        if skip is None:
            judgement, again = await self._ask(judge, item, judged)
            if again:
                return None
        if judgement is None:
            skip = skip or "budget"
            self.metrics.judge.skipped.labels(
                service=item.service, query_type=record.query_type, reason=skip
            ).inc()
            return encode_result(self._line(item, skipped=skip))
        self._relabel(item, judgement)
        if self.self_evaluation.check(record.model, judgement):
            self.self_judged_model = record.model
        if judgement.ok:
            judgement.citations = check_citations(record.chunks, cited, judgement)
            self._observe(item, judgement)
        differ = await self._judge_again(judge, item, judged, judgement)
        self.judged_seen += 1
        result = self._line(item, judgement, repeat=differ)
        if self.review is not None:
            self.review.offer(result)  # never waits: a full queue or budget drops (counted)
        return encode_result(result)

    async def _ask(
        self, judge: MeteredJudge, item: _Sample, judged: RagRecord
    ) -> tuple[Judgement | None, bool]:
        """The judge's judgement (None: the budget said no), and whether to judge the sample
        again later instead (the judge is down), through the circuit breaker."""
        probe = await self.breaker.admit()
        judgement = await judge.try_judge(judged, sampling_weight=item.weight)
        if judgement is None:
            if probe:  # the budget said no before the probe could tell: let another probe
                await self.breaker.abandon_probe()
            return None, False
        if judgement.outcome not in OUTAGE:
            await self.breaker.success()
            return judgement, False
        await self.breaker.failure(judgement.outcome, probe, judgement.error or "")
        item.attempts += 1
        if item.successes_before < 0:
            item.successes_before = self.breaker.successes
        # Written failed only when the judge has worked for other samples since: then this
        # sample, not the judge, is the trouble. In an outage nothing is given up.
        served_others = self.breaker.successes > item.successes_before
        spent = item.attempts >= self.config.breaker.max_attempts
        if spent and not served_others:
            # No other sample since (a quiet topic, or this one came last): ask the judge
            # something it can answer rather than hold the partition until traffic comes.
            served_others = await self._canary()
        if not spent or not served_others:
            self.metrics.judge_retries.inc()
            return judgement, True
        return judgement, False

    def _relabel(self, item: _Sample, judgement: Judgement) -> None:
        """The judge read the query: its label beats the rules' for what it judged. Weights stay
        1/p, so per-type estimates are domain estimates, still unbiased."""
        if not (self._judge_labels and item.type_source == "rules" and judgement.judged_query_type):
            return
        judgement.query_type, _ = self.query_types.bound(judgement.judged_query_type)
        item.query_type = judgement.query_type
        item.type_source = "judge"
        # The label the ingest stage watched it under (its retrieval drift, pinned from here).
        item.record_query_type = item.record.query_type

    def _observe(self, item: _Sample, judgement: Judgement) -> None:
        """A judgement that holds, into the verdict counters, the estimates and the events."""
        self.metrics.judge.observe_verdicts(judgement, item.service)
        release, _ = self.releases.bound(item.record.release)
        self.metrics.estimates.observe(judgement, item.service, release, self.estimate_budget)
        if self.events is not None:
            self.events.emit(judgement, item.record)
        self.estimator.observe(judgement)

    async def _judge_again(
        self, judge: MeteredJudge, item: _Sample, judged: RagRecord, judgement: Judgement
    ) -> list[str] | None:
        """For a share of judged records, the checks a second judgement disagrees on (None: not
        repeated). Same budget, and the first thing to give up when it runs short."""
        trace_id = item.record.trace_id
        if not (judgement.ok and self._repeat and blake2b_fraction(trace_id + ":repeat") < self._repeat):
            return None
        again = await judge.try_judge(judged, sampling_weight=item.weight)
        if again is None or not again.ok:
            return None
        differ = disagreements(judgement, again)
        self.metrics.judge.repeats.inc()
        for check in differ:
            self.metrics.judge.disagreements.labels(check=check).inc()
        return differ

    def _line(
        self,
        item: _Sample,
        judgement: Judgement | None = None,
        skipped: str | None = None,
        repeat: list[str] | None = None,
    ) -> ResultLine:
        return result_line(
            item.record,
            sampling_weight=item.weight,
            query_type_source=item.type_source,
            clipped=item.clipped,
            judge_skipped=skipped,
            record_query_type=item.record_query_type,
            judgement=judgement,
            repeat_disagreements=repeat,
            stratum=item.stratum,
        )

    async def _write_loop(self) -> None:
        while True:
            items = [await self._judged.get()]
            while len(items) < _WRITE_BATCH and not self._judged.empty():
                items.append(self._judged.get_nowait())
            if self._sinks:
                await self._write_until_done([(item.query_type, item.line) for item in items])
            for item in items:
                item.ref.release()
                self._held -= 1
                self._held_bytes -= item.nbytes
                self.written += 1
            self._writes.moved()
            self._note_waiting()

    def _note_waiting(self) -> None:
        self._writes.wait(self._held > 0 and self.breaker.state is State.CLOSED)

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

    # -- housekeeping ----------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        interval = self.kafka.commit_interval_seconds
        while True:
            await asyncio.sleep(interval)
            m = self.metrics
            m.inflight.set(self._held)
            self._note_waiting()
            await self.source.commit()
            await self.source.update_lag()
            self._export_estimates()
            self._count_events()
            if self.budget is not None:
                for limit, left in self.budget.remaining().items():
                    m.budget_remaining.labels(limit=limit).set(left)

    def _count_events(self) -> None:
        if self.events is None:
            return
        for sink, stats in self.events.stats().items():
            now = stats.outcomes()
            seen = self._events_seen.get(sink, (0, 0, 0))
            for outcome, new, old in zip(OUTCOMES, now, seen, strict=True):
                if new > old:
                    self.metrics.evaluation_events.labels(sink=sink, outcome=outcome).inc(new - old)
            self._events_seen[sink] = now

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

    def _on_assigned(self, owned: int, total: int) -> None:
        """Budgets (the judge's, the review queue's) are group-wide: this member takes the share
        its partitions carry."""
        if self.budget is not None:
            self.budget.set_group(owned, total)
        if self.review is not None:
            self.review.set_group(owned, total)

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        self._drop_queued(lambda s: s.partition in revoked)
