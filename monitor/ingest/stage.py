"""The ingest stage: spans from Kafka → decode → assemble → slice → sample → record metrics, and
each sampled record onto the samples topic.

It never waits for a judge: the only thing downstream of it is the samples topic, and an input
offset is committed once every record it fed is counted and, if sampled, acknowledged by the
broker. Everything here is per span or per message, so it is kept lean: plain attribute access,
labelled metric children cached, no per-record validation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import TopicPartition

from monitor.contracts.metrics import HistogramTally, Metrics, RecordSeries, ServiceSeries
from monitor.contracts.model import Reject
from monitor.contracts.samples import TextLimits, TypeSource, encode_sample
from monitor.contracts.slices import BoundedLabel, SlicesConfig
from monitor.ingest.accounting import ACCOUNTING, NEW_REFS, Accounting, Labels, PriceBook, RetrievalObserver
from monitor.ingest.assemble import ASSEMBLER, Assembler, Finished
from monitor.ingest.classify import QueryClassifier
from monitor.ingest.config import AssemblyConfig, IngestLimits, SamplingPolicy
from monitor.ingest.decode import OTLP_PROTO_DECODER, compiled_feed, decode, set_release_keys
from monitor.ingest.rejects import Rejections
from monitor.ingest.sampler import Sampler
from monitor.ingest.unreadable import REASONS as UNREADABLE_REASONS
from monitor.ingest.unreadable import UnreadableTraces
from monitor.kafka.config import Encoding, KafkaConfig
from monitor.kafka.consumer import Batch, KafkaSource, SourceSpec
from monitor.kafka.delivery import Delivery, DeliveryMetrics
from monitor.kafka.offsets import MessageRef, OffsetTracker, release_all
from monitor.kafka.producer import KafkaOutput
from monitor.kafka.records import READER_KIND
from monitor.llm.usage import DEFAULT_PRICES, Price
from monitor.plumbing.progress import StageProgress

log = logging.getLogger(__name__)

# Messages between pauses that let the fetcher and heartbeats run: at most 256, and about as many
# bytes as asyncio reads from a socket in a turn (256 KiB). The next fetch's response arrives
# while a batch is handled, and is read only in those pauses: with a pause per 256 messages of
# 8.7 KB (the production mix), a 5.7 MB response took the whole batch to come in, and the
# sidecar idled a third of a drain waiting for it.
_RUN = 256
_RUN_BYTES = 256 * 1024
_MAX_RAW_LABELS = 4096  # raw (service, query_type, release) remembered with their bounded labels


def _deliveries(
    metrics: Metrics, output: KafkaOutput, kafka: KafkaConfig, limits: IngestLimits
) -> tuple[Delivery, Delivery | None]:
    """The samples topic's delivery, and the dead-letter topic's where one is set: both counted
    in the same produce metrics."""
    produced = DeliveryMetrics(metrics.produce_errors, metrics.produce_pending, metrics.produce_dropped)
    samples = Delivery(
        output,
        limits.samples_topic,
        "samples",
        limits.max_inflight_produces,
        produced,
        limits.max_message_bytes,
    )
    dead_letters = (
        Delivery(output, kafka.dead_letter_topic, "dead_letter", kafka.dead_letter_max_inflight, produced)
        if kafka.dead_letter_topic
        else None
    )
    return samples, dead_letters


class IngestStage:
    def __init__(
        self,
        metrics: Metrics,
        output: KafkaOutput,
        *,
        kafka: KafkaConfig,
        assembly: AssemblyConfig,
        slices: SlicesConfig,
        sampling: SamplingPolicy,
        limits: IngestLimits,
        retrieval_drift: RetrievalObserver | None,
        prices: Mapping[str, Price] = DEFAULT_PRICES,
    ) -> None:
        """Built from its own sections (the sidecar picks them from the configuration);
        `retrieval_drift`: where every record's retrieval goes (the drift stage's label-free
        monitor, built by the sidecar with the drift section's policy and the pinned baseline);
        None: no retrieval drift is watched. `prices`: USD per million tokens of the service's
        generator models (`metrics.service_prices`), for `ragmon_generator_cost_usd_total`."""
        self.kafka = kafka
        self.metrics = metrics
        self.tracker = OffsetTracker(NEW_REFS)
        self.assembler = Assembler(assembly)
        self.rejections = Rejections(metrics)
        self.unreadable = UnreadableTraces(metrics.unreadable_traces)
        self._bound_labels(metrics, slices)
        self.sampler = Sampler(sampling)
        # Every record, not only the sample: chunk count and top score against a frozen reference.
        self.retrieval_drift = retrieval_drift
        spec = SourceSpec(kafka.topic, kafka.group_id, kafka.auto_offset_reset, kafka.max_poll_records)
        self.source = KafkaSource(
            kafka,
            spec,
            self.tracker,
            metrics.consumer,
            self._on_revoked,
            self._on_assigned,
        )
        self.samples, self.dead_letters = _deliveries(metrics, output, kafka, limits)
        self._text_limits = TextLimits(limits.sample_max_chunks, limits.sample_max_chunk_chars)
        outputs = (self.samples, self.dead_letters) if self.dead_letters else (self.samples,)
        self.progress = StageProgress("ingest", (self.source.input, *(d.progress for d in outputs)))
        self._encoding = Encoding(kafka.encoding)
        # The compiled decoder's loop over plain messages (None: each through `_message`).
        self._feed = compiled_feed(self._encoding)
        # Labelled series per bounded (service, query_type), counted locally and flushed once
        # per batch: `.labels()` and a Prometheus observation cost more than the rest of a
        # record's accounting. Both label sets are bounded, so this dict is too.
        self._series: dict[tuple[str, str], RecordSeries] = {}
        # The RED series per bounded (service, query_type, release) within the budget, likewise;
        # and per label set folded into, those of the records folded (they count the fold).
        self._red: dict[tuple[str, str, str], ServiceSeries] = {}
        self._folded_red: dict[tuple[str, str, str], ServiceSeries] = {}
        # The per-record state (labels by raw values, sampler, retrieval drift, lag, prices),
        # compiled or not.
        self.accounting = Accounting(
            self.sampler, retrieval_drift, HistogramTally(metrics.record_lag), PriceBook(prices)
        )
        self._account: Callable[[list[Finished], int, float], int] | None = self.accounting.account
        self.records_seen = 0

    def _bound_labels(self, metrics: Metrics, slices: SlicesConfig) -> None:
        """The labels a record is counted under, each bounded, and their product too."""
        self.query_types = BoundedLabel.query_types(slices.query_types)
        self.services = BoundedLabel.services(slices.services, slices.max_services)
        # Read by the decoder (process-wide, as its key tables are); bounded for sampled records.
        set_release_keys(slices.release_keys)
        self.releases = BoundedLabel.releases(slices.releases, slices.max_releases)  # RED series
        self.slices = slices  # samples carry the release itself (`SlicesConfig.release_value`)
        # Their product is bounded too: past `max_label_sets` a new set's RED series fold.
        self.red_budget = metrics.series_budget("red", slices.max_label_sets)
        self.classifier = QueryClassifier(slices.query_types) if slices.classify != "off" else None

    async def run(self, stop: asyncio.Event, left: Callable[[], float]) -> None:
        """Consume until `stop`, then within the seconds `left()` gives: emit complete traces,
        wait for their samples to be acknowledged, commit, leave the group."""
        log.info(
            "span path: Kafka record reader %s, otlp_proto decoder %s, trace assembler %s, "
            "record accounting %s",
            READER_KIND,
            OTLP_PROTO_DECODER,
            ASSEMBLER,
            ACCOUNTING,
        )
        if not await self.source.start(stop):
            return
        keeper = asyncio.create_task(self._housekeeping(), name="ragmon-ingest-housekeeping")
        try:
            await self.source.consume(stop, self._process, self.assembler.next_due)
            self._finish_all(self.assembler.flush(complete_only=True), time.time())
            self._flush_counts()
            await self._flush(force=True)
            for delivery in (self.samples, self.dead_letters):
                # Room is left for the final commit and leaving the group.
                if delivery is not None and not await delivery.drain(left() - 3.0):
                    log.warning(
                        "shutdown: %d %s messages unacknowledged; their input is re-read",
                        delivery.in_flight,
                        delivery.topic,
                    )
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            await self.source.stop(grace_seconds=3.0)
            for delivery in (self.samples, self.dead_letters):
                if delivery is not None:
                    await delivery.cancel()
            self.metrics.open_traces.set(self.assembler.open_traces)
            log.info("ingest stopped; %d records assembled", self.records_seen)

    # -- the hot path ----------------------------------------------------------------------

    async def _process(self, batch: Batch) -> None:
        """Decode and assemble one fetched batch (possibly empty), then emit what is due."""
        now = time.monotonic()
        wall_ns = time.time_ns()
        max_bytes = self.kafka.max_message_bytes
        add_spans = self.assembler.add_spans
        feed = self._feed
        auto = self._encoding is Encoding.AUTO
        tracker = self.tracker
        finished: list[Finished] = []
        for tp, messages in batch.items():
            # Ownership is checked per run of messages against the generation the batch was
            # fetched in: a rebalance during one of the pauses between runs makes the rest of it
            # someone else's.
            generation = tracker.generation(tp)
            size = len(messages[0].value or b"") + 1 if messages else 1  # one message's, as the others'
            step = max(1, min(_RUN, _RUN_BYTES // size))
            for first in range(0, len(messages), step):
                if first:
                    await asyncio.sleep(0)  # let the fetcher and heartbeats run
                run = messages[first : first + step]
                refs = tracker.track_run(tp, run, generation)
                i, n = 0, len(refs)
                while i < n:
                    if feed is not None:  # the plain messages, up to one it leaves to `_message`
                        i = feed(
                            messages=run,
                            refs=refs,
                            start=i,
                            now_ns=wall_ns,
                            auto=auto,
                            max_bytes=max_bytes,
                            add_spans=add_spans,
                            now=now,
                            finished=finished,
                        )
                        if i == n:
                            break
                    self._message(tp, run[i], refs[i], wall_ns, now, finished)
                    i += 1
                if n < len(run):
                    break  # the rest is no longer this generation's, or was seen already
        finished.extend(self.assembler.poll(now))
        # One wall clock for the batch's records: lag and sampling windows need no finer one.
        self._finish_all(finished, time.time())
        self._flush_counts()
        # Nothing fetched: the stage is caught up, and no more samples are coming to fill a
        # produce request; those queued go now, not `Delivery`'s quarter second later.
        await self._flush(force=not batch)

    def _message(
        self, tp: TopicPartition, msg: Any, ref: MessageRef, wall_ns: int, now: float, out: list[Finished]
    ) -> None:
        """One message: rejected whole, or its spans assembled and its flat records finished."""
        value = msg.value
        if not value:
            self._reject_message(Reject.EMPTY, "message has no value", tp, msg, ref)
            return
        size = len(value)
        max_bytes = self.kafka.max_message_bytes
        if size > max_bytes:
            detail = f"{size} bytes > max_message_bytes {max_bytes}"
            self._reject_message(Reject.TOO_LARGE, detail, tp, msg, ref)
            return
        decoded = decode(value, self._encoding, wall_ns, for_assembly=True)
        if decoded.error is not None:
            self._reject_message(decoded.error, decoded.detail, tp, msg, ref)
            return
        if decoded.problems:
            where = f"{tp.topic}/{tp.partition}@{msg.offset}"
            for problem in decoded.problems:
                self.rejections.count(problem, decoded.detail, where)
        spans = decoded.spans
        if spans:
            # The whole message: charged once while any open trace holds spans of it.
            self.assembler.add_spans(spans, ref, size, now, out, decoded.others)
        for record in decoded.records:
            ref.acquire()
            out.append(Finished(record.trace_id, record, None, [ref]))
        ref.release()

    def _flush_counts(self) -> None:
        """The batch's record counts into their Prometheus series: a scrape is at most a batch
        behind."""
        for series in self._series.values():
            series.flush()
        for red in self._red.values():
            red.flush()
        for red in self._folded_red.values():
            red.flush()
        self.accounting.lag.flush()

    async def _flush(self, force: bool = False) -> None:
        await self.samples.flush(force)
        if self.dead_letters is not None:
            await self.dead_letters.flush(force)

    def _reject_message(
        self, reason: Reject, detail: str, tp: TopicPartition, msg: Any, ref: MessageRef
    ) -> None:
        self.rejections.count(reason, detail, f"{tp.topic}/{tp.partition}@{msg.offset}")
        if self.dead_letters is not None and msg.value is not None:  # b"" too: it is what was sent
            # The offset is held until the broker has the copy: a crash before re-reads the original.
            self.dead_letters.add(msg.key, msg.value, [ref])
        else:
            ref.release()

    def _finish_all(self, finished: list[Finished], now: float) -> None:
        """`_finish` each; where the accounting is the compiled twin, its `account` counts those
        that take the common path (the same objects written the same way) and hands `_finish` the
        others (the reference's hands it all)."""
        account = self._account
        i, n = 0, len(finished)
        while i < n:
            if account is not None:
                j = account(finished, i, now)
                self.records_seen += j - i
                if j == n:
                    return
                i = j
            self._finish(finished[i], now)
            i += 1

    def _finish(self, fin: Finished, now: float) -> None:
        """Count, slice and sample one finished trace; `now` is wall-clock seconds."""
        record = fin.record
        if record is None:
            if fin.reason is not None:
                self.rejections.count(fin.reason, f"trace {fin.trace_id}")
                if fin.reason in UNREADABLE_REASONS:
                    self.unreadable.count(fin.reason, fin.spans)
            release_all(fin.refs)
            return
        if record.replay:
            # Golden-replay traffic is measured by the replay run, never as production quality.
            self.metrics.replay_records.inc()
            release_all(fin.refs)
            return
        source: TypeSource = "span"
        if not record.query_type:
            source = "none"
            if self.classifier is not None:
                record.query_type = self.classifier(record.query)
                source = "rules"
        key = (record.service, record.query_type, record.release)
        labels = self.accounting.labels.get(key)
        if labels is None:
            labels = self._bound(key)
        service, qt, outside, series, red = labels
        if outside:
            self.rejections.count(
                Reject.QUERY_TYPE_UNKNOWN, "rag.query_type not in the allow-list; counted as 'other'"
            )
        record.query_type = qt
        self.records_seen += 1
        probability = self.accounting.count(record, series, red, now)
        if probability is None:
            release_all(fin.refs)
            return
        release = self.slices.release_value(record.release)
        value = encode_sample(
            record, probability, service, source, now, self._text_limits, release, self.sampler.stratum
        )
        self.samples.add(record.trace_id.encode(), value, fin.refs)

    def _bound(self, key: tuple[str, str, str]) -> Labels:
        """Bounded labels and series of a raw (service, query_type, release), remembered: `bound`
        gives the same answer for a value once it has seen it (allow-lists only grow, to
        capacity)."""
        service, _ = self.services.bound(key[0])
        qt, outside = self.query_types.bound(key[1])
        release, _ = self.releases.bound(key[2])
        series = self._series.get((service, qt))
        if series is None:
            series = self._series[(service, qt)] = self.metrics.record_series(service, qt)
        red_key = (service, qt, release)
        red = self._red.get(red_key)
        if red is None:  # a new label set: within the series budget, or folded
            red = self._red_series(red_key)
        cache = self.accounting.labels
        if len(cache) >= _MAX_RAW_LABELS:
            cache.clear()  # raw values are unbounded; the bounded series are not
        labels = cache[key] = (service, qt, outside, series, red)
        return labels

    def _red_series(self, key: tuple[str, str, str]) -> ServiceSeries:
        """The RED series a bounded label set not met yet counts into: its own within the series
        budget (or when it is its own fold); past it, those of the set it folds to, which count
        the fold (created once per such set)."""
        admitted = self.red_budget.admit(key)
        if admitted == key:
            red = self._red[key] = self.metrics.service_series(*key)
            return red
        folded = self._folded_red.get(admitted)
        if folded is None:
            folded = self.metrics.service_series(*admitted, folded=self.red_budget.folded)
            self._folded_red[admitted] = folded
        return folded

    # -- housekeeping ----------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        interval = self.kafka.commit_interval_seconds
        while True:
            await asyncio.sleep(interval)
            self.metrics.open_traces.set(self.assembler.open_traces)
            await self.source.commit()
            await self.source.update_lag()

    def _on_assigned(self, owned: int, total: int) -> None:
        """Floors are group-wide: this member takes the share its partitions carry."""
        self.sampler.set_share(owned / total)
        log.info("owning %d of %d partitions: floor share %.3g", owned, total, owned / total)

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        dropped = self.assembler.drop_partitions(set(revoked))
        # Holds on partitions still owned must go too, or their offsets could never advance.
        release_all(dropped)
        if dropped:
            log.info("rebalance: %d open trace holds dropped; the new owner re-reads them", len(dropped))
