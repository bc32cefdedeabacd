"""The drift stage: results topic → one detector state per slice → drift metrics and alerts.

One state per slice, whatever the replica count: the judge stage keys results by query type, so
every judgement of a slice lands in one partition of the results topic, in one order, and the
drift group gives each partition to exactly one member. Judge replicas can be scaled freely; the
detectors never see a share of a slice, nor a judgement twice.

Restarts and rebalances neither lose nor double-count: a member that gets a partition reads it
from the start and rebuilds its slices' detectors from every judgement in it (the state is a
function of that sequence alone). Judgements below the group's committed offset were acted on by
the previous owner, so they are replayed quietly — no alarm counted, no alert sent — and once the
replay reaches them, the alarms the state holds are announced again (Alertmanager de-duplicates:
an alarm raised before the restart keeps firing, nothing new pages). The cost is a replay as long
as the topic's retention on every start: ~a second per 30,000 judgements here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from aiokafka import TopicPartition
from pydantic import ValidationError

from monitor.contracts.metrics import Metrics
from monitor.contracts.results import ResultLine, unreadable_reason
from monitor.contracts.slices import BoundedLabel, RecentLabel, SlicesConfig
from monitor.drift.arming import Arming
from monitor.drift.attribution import ChangeAttribution
from monitor.drift.config import AlertsConfig
from monitor.drift.detector import Detector, DriftMonitor
from monitor.drift.examples import ExampleBuffers
from monitor.drift.reference import DriftBaseline, drift_values
from monitor.kafka.config import KafkaConfig
from monitor.kafka.consumer import Batch, KafkaSource, SourceSpec
from monitor.kafka.offsets import OffsetTracker
from monitor.outputs.alerts import AlertDispatcher
from monitor.plumbing.progress import StageProgress
from monitor.plumbing.tasks import cancel_all

log = logging.getLogger(__name__)

MAX_UPDATES = 3  # times a firing alert is sent again because its attribution changed


# Handed the example records of each drift alert this stage raises (the review queue's, when the
# wiring has one: the judge stage's, which this stage does not import).
AlertExamplesHook = Callable[[Sequence[ResultLine]], None]
GroupShareHook = Callable[[int, int], None]  # (partitions owned, partitions in all)


def slice_key(query_type: str) -> bytes:
    """The results topic's message key: a slice's judgements share a partition."""
    return query_type.encode()


class DriftStage:
    def __init__(
        self,
        metrics: Metrics,
        topic: str,
        baseline: DriftBaseline | None,
        *,
        kafka: KafkaConfig,
        group_id: str,
        alerts: AlertsConfig,
        slices: SlicesConfig,
    ) -> None:
        """Reads `topic` (the results topic) in group `group_id`, built from its own sections (the
        sidecar picks them from the configuration). `baseline`: `alerts.drift.baseline_file` as
        loaded (once, by the sidecar: the ingest stage pins from it too), None without one."""
        self.kafka = kafka
        self.metrics = metrics
        self.policy = policy = alerts.drift
        self.baseline = baseline
        pinned = self.baseline.references() if self.baseline else None
        self.monitor = DriftMonitor(policy, metrics.drift, pinned)
        self.alerts = AlertDispatcher(alerts, metrics.alerts_sent)
        self.examples = ExampleBuffers()  # the worst records since each slice's change point
        # The releases and services over-represented since each slice's change point.
        self.attribution = ChangeAttribution(policy.reference_records)
        # Per firing alert: the suspects it names, and how many times it was updated since.
        self._named: dict[tuple[str, ...], tuple[tuple[tuple[str, str], ...], int]] = {}
        self._on_examples: AlertExamplesHook | None = None
        self._on_share: GroupShareHook | None = None
        self.tracker = OffsetTracker()
        spec = SourceSpec(topic, group_id, "earliest", kafka.max_poll_records, replay=True)
        self.source = KafkaSource(
            kafka,
            spec,
            self.tracker,
            metrics.consumer,
            self._on_revoked,
            self._on_assigned,
        )
        self.progress = StageProgress("drift", (self.source.input,))
        self.query_types = BoundedLabel.query_types(slices.query_types)
        # Bounded again (anything may write to the results topic): the `max_releases` + 2 releases
        # first seen most recently, so that attribution names the release that just broke things
        # however many came before it (`RecentLabel`).
        self.releases = RecentLabel(slices.releases, slices.max_releases + 2, on_evict=self._release_evicted)
        self.services = BoundedLabel.services(slices.services, slices.max_services + 2)
        # Which slices' detectors run yet: every slice the labels allow, exported from here on.
        known = [self.query_types.bound(qt)[0] for qt in slices.query_types]
        self.arming = Arming(policy, metrics.drift, known, pinned)
        self._slices: dict[TopicPartition, set[str]] = {}  # the query types seen in each partition
        self._replaying: set[TopicPartition] = set()
        self.seen = 0  # judgements read (replayed ones included)
        self._bad = 0

    def _release_evicted(self, gone: str) -> None:
        """A release's first-seen series goes with its attribution slot."""
        with contextlib.suppress(KeyError):
            self.metrics.drift.release_first_seen.remove(gone)

    def send_examples_to(self, hook: AlertExamplesHook, share: GroupShareHook | None = None) -> None:
        """Hand `hook` the results lines of a raised alert's examples, worst first: alerts raised
        live, not those announced again after a replay (their examples went when first raised).
        The example buffers then keep whole lines (at most five per slice and metric). `share` is
        told, after each rebalance, how many of the results topic's partitions this member owns:
        a receiver bounded group-wide takes that share."""
        self._on_examples = hook
        self._on_share = share
        self.examples.keep_lines = True

    def _on_assigned(self, owned: int, total: int) -> None:
        if self._on_share is not None:
            self._on_share(owned, total)

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`. Nothing is held across a stop: the next owner rebuilds from the topic."""
        if self.baseline is None:
            log.warning(
                "drift: no pinned baseline; each slice's reference is its first %d judgements in %s, "
                "and its detector is silent until then (ragmon_drift_armed; a line a minute into "
                "the traffic says when each slice will arm). Armed from the start: rag-monitor "
                "baseline pin",
                self.policy.reference_records,
                self.source.spec.topic,
            )
        else:
            log.info("drift: baseline %s (%d slices)", self.baseline.version, len(self.baseline.slices))
            if lacking := self.baseline.without_strata():
                log.warning(
                    "drift: baseline %s has no per-stratum references for %s (pinned before strata, "
                    "or from a golden replay): those slices keep the weighted CUSUM; re-pin from "
                    "results (rag-monitor baseline pin) for the stratified detector",
                    self.baseline.version,
                    ", ".join(lacking),
                )
        if not await self.source.start(stop):
            return
        tasks = [
            asyncio.create_task(self.alerts.run(), name="ragmon-alerts"),
            asyncio.create_task(self._housekeeping(), name="ragmon-drift-housekeeping"),
        ]
        try:
            await self.source.consume(stop, self._handle)
        finally:
            await cancel_all(tasks)
            await self.source.stop(grace_seconds=3.0)

    async def _handle(self, batch: Batch) -> None:
        replay_until = self.source.replay_until
        for tp, messages in batch.items():
            generation = self.tracker.generation(tp)
            until = replay_until.get(tp, 0)
            if tp not in self._slices:
                self._slices[tp] = set()
                if messages and messages[0].offset < until:
                    self._replaying.add(tp)
            for msg in messages:
                ref = self.tracker.track(tp, msg.offset, generation)
                if ref is None:
                    break  # revoked since the fetch
                if tp in self._replaying and msg.offset >= until:
                    self._go_live(tp)
                self._observe(tp, msg.value, live=msg.offset >= until)
                ref.release()
            if tp in self._replaying and messages and messages[-1].offset + 1 >= until:
                self._go_live(tp)

    def _observe(self, tp: TopicPartition, value: bytes | None, *, live: bool) -> None:
        self.seen += 1
        try:
            line = ResultLine.model_validate_json(value or b"")
        except ValidationError as exc:
            self._bad += 1
            self.metrics.drift.unreadable.inc()
            if self._bad == 1:
                log.error(
                    "%s: a results message that is not a results line (%s), skipped (counted)",
                    tp.topic,
                    unreadable_reason(exc),
                )
            return
        release, _ = self.releases.bound(line.release, line.time)
        if not line.replay and line.query_type:
            seen_qt, _ = self.query_types.bound(line.query_type)
            named = release not in (self.releases.fallback, self.releases.missing)  # no marker for these
            if self.attribution.seen(seen_qt, release, line.time) and named:
                at = self.attribution.release_first_seen[release]
                self.metrics.drift.release_first_seen.labels(release=release).set(at)
        judged = drift_values(line)
        if isinstance(judged, str):
            return  # skipped or failed judgements, golden replays: nothing to detect on
        raw_qt, w, values = judged
        qt, _ = self.query_types.bound(raw_qt)  # anything may write to the results topic
        self._slices[tp].add(qt)
        changed = self.monitor.observe(qt, w, values, live=live, stratum=line.stratum or "")
        if self.arming.pending.get(qt):
            self.arming.observed(qt, values, line.time, self.monitor.detectors, live=live)
        labels = (release, self.services.bound(line.service)[0])
        for metric, y in values:  # before alerting: the record that raises an alarm counts too
            detector = self.monitor.detectors[(qt, metric)]
            self.attribution.observe(qt, detector, y, labels, line.time)
            if detector.reference.frozen:
                self.examples.observe(qt, detector, y, line)
            if live and detector.active:
                self._reattribute(detector, qt)
        for detector, query_type, raised in changed:
            self._alert(detector, query_type, raised)
            if raised and self._on_examples is not None:
                self._on_examples(self.examples.pick_lines(query_type, detector))

    def _reattribute(self, detector: Detector, query_type: str) -> None:
        """A firing alert names suspects as the failing records since its change point accrue
        (it may fire on one): when the names change, it is updated, at most `MAX_UPDATES` times."""
        key = ("drift", query_type, detector.metric)
        named = self._named.get(key)
        if named is None or named[1] >= MAX_UPDATES:
            return
        attribution = self.attribution.attribute(query_type, detector)
        if attribution is None or attribution.names() == named[0]:
            return
        self._named[key] = (attribution.names(), named[1] + 1)
        self.alerts.update(key, attribution)

    def _go_live(self, tp: TopicPartition) -> None:
        self._replaying.discard(tp)
        active = self.monitor.went_live(self._slices.get(tp, set()))
        self.arming.replayed()
        log.info(
            "%s/%d: replay done, %d alarms held; %d of %d slices armed",
            tp.topic,
            tp.partition,
            len(active),
            self.arming.armed,
            self.arming.slices,
        )
        for detector, query_type in active:
            self._alert(detector, query_type, True)

    def _alert(self, detector: Detector, query_type: str, raised: bool) -> None:
        key = ("drift", query_type, detector.metric)
        if not raised:
            self._named.pop(key, None)
            self.alerts.resolve(key)
            return
        attribution = self.attribution.attribute(query_type, detector)
        self._named[key] = (attribution.names() if attribution else (), 0)
        ref = detector.reference
        baseline = ref.mean
        current, se, n = detector.current()
        lower, upper = current - 1.96 * se, current + 1.96 * se
        metric = detector.metric
        version = self.baseline.version if self.baseline and self._pinned(query_type, metric) else None
        reference = f"baseline {version}" if version else f"the slice's first {ref.records} judgements"
        self.alerts.fire(
            key,
            {
                "alertname": "RagmonDriftDetected",
                "query_type": query_type,
                "metric": metric,
                "severity": "warning",
            },
            {
                "summary": f"the share of {query_type} records the judge could not decide drifted "
                "from its reference"
                if metric == "undecided"
                else f"{metric} of {query_type} queries drifted from its reference",
                "description": (
                    f"{metric} of {query_type}: {current:.3f} (95% {lower:.3f} to {upper:.3f}, "
                    f"{n} judged records since the estimated change, weighted) against "
                    f"{baseline:.3f} ({reference}, {ref.records} records); "
                    f"drift statistic {detector.statistic:.1f} >= threshold {detector.threshold:.1f}"
                ),
                "baseline": f"{baseline:.4f}",
                "baseline_version": version or "first-records",
                "current": f"{current:.4f}",
                "lower": f"{lower:.4f}",
                "upper": f"{upper:.4f}",
                "samples": str(n),
            },
            self.examples.pick(query_type, detector),
            attribution,
        )

    def _pinned(self, query_type: str, metric: str) -> bool:
        return self.baseline is not None and metric in self.baseline.slices.get(query_type, {})

    async def _housekeeping(self) -> None:
        interval = self.kafka.commit_interval_seconds
        while True:
            await asyncio.sleep(interval)
            replaying = bool(self._replaying)
            self.arming.tick(time.monotonic(), self.seen, self.monitor.detectors, replaying=replaying)
            await self.source.commit()
            await self.source.update_lag()

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        gone: set[str] = set()
        for tp in revoked:
            gone |= self._slices.pop(tp, set())
            self._replaying.discard(tp)
        self.monitor.forget(gone)
        self.arming.reset(gone)
        self.examples.forget(gone)
        self.attribution.forget(gone)
        for key in [k for k in self._named if k[1] in gone]:
            del self._named[key]
