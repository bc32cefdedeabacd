"""`rag-monitor run`: wires the stages its role asks for, shares one producer between them, and
owns start-up and shutdown. No stage logic lives here."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from monitor.app.config import Settings
from monitor.contracts.metrics import Metrics
from monitor.drift.reference import DriftBaseline, load_baseline
from monitor.drift.retrieval import RetrievalDriftMonitor
from monitor.drift.stage import DriftStage
from monitor.ingest.stage import IngestStage
from monitor.judge import Judge, create_judge
from monitor.judge.backends import LLM_BACKENDS
from monitor.judge.review import ReviewQueue, alert_queue
from monitor.judge.stage import JudgeStage
from monitor.kafka.client import client_kwargs
from monitor.kafka.consumer import KafkaSource
from monitor.kafka.producer import KafkaOutput
from monitor.outputs.http import Readiness, Route
from monitor.plumbing.progress import StageProgress

if TYPE_CHECKING:
    from monitor.golden.service import GoldenService

log = logging.getLogger(__name__)

# Seconds without any answer from the broker after which /readyz says so.
_BROKER_SILENCE = 30.0
# Of `shutdown_seconds`, what is kept for cancelling stages that overran it (1 s) and closing
# the producer (2 s).
_CLOSE_SECONDS = 3.0


def build_judge(settings: Settings) -> Judge | None:
    """The configured judge; ValueError when it cannot start (no API key, bad option)."""
    jc = settings.judge
    if jc.backend == "none":
        return None
    options = jc.options
    if jc.backend in LLM_BACKENDS:
        # The workers are the in-flight bound; the backend's own semaphore must not halve it.
        options = {"max_concurrency": jc.workers, **options}
        if settings.slices.classify == "judge":  # `unknown` means "no label": not a choice for the judge
            labels = [t for t in settings.slices.query_types if t != "unknown"]
            options = {"query_types": labels, **options}
    return create_judge(jc.backend, options)


def load_drift_baseline(settings: Settings, metrics: Metrics) -> DriftBaseline | None:
    """`alerts.drift.baseline_file`, read once for the drift stage (CUSUM references) and the
    ingest stage (retrieval references); BaselineFileError: a start-up error, one line.
    `ragmon_drift_baseline_info{version}` names the one in use ("none" without a file)."""
    path = settings.alerts.drift.baseline_file
    baseline = load_baseline(path) if path is not None else None
    metrics.drift.baseline.labels(version=baseline.version if baseline is not None else "none").set(1)
    return baseline


def ingest_stage(
    settings: Settings, metrics: Metrics, output: KafkaOutput, baseline: DriftBaseline | None = None
) -> IngestStage:
    """The ingest stage, from its sections; its retrieval drift monitor pinned to `baseline`
    (`alerts.drift.baseline_file` as loaded, None: no retrieval reference is pinned)."""
    retrieval_drift = RetrievalDriftMonitor.from_baseline(
        settings.alerts.drift.retrieval, metrics.retrieval_drift, baseline
    )
    return IngestStage(
        metrics,
        output,
        kafka=settings.kafka,
        assembly=settings.assembly,
        slices=settings.slices,
        sampling=settings.sampling,
        limits=settings.pipeline.ingest_limits(),
        retrieval_drift=retrieval_drift,
        prices=settings.metrics.service_prices,
    )


def judge_stage(settings: Settings, metrics: Metrics, output: KafkaOutput, judge: Judge | None) -> JudgeStage:
    """The judge stage, from its sections."""
    return JudgeStage(
        metrics,
        output,
        judge,
        kafka=settings.kafka,
        config=settings.judge,
        queue=settings.pipeline.judge_queue(),
        slices=settings.slices,
        estimates=settings.estimates,
        results=settings.results,
        events=settings.events,
        review=settings.review,
    )


def drift_stage(
    settings: Settings, metrics: Metrics, topic: str, baseline: DriftBaseline | None
) -> DriftStage:
    """The drift stage on the results topic `topic`, from its sections."""
    return DriftStage(
        metrics,
        topic,
        baseline,
        kafka=settings.kafka,
        group_id=settings.pipeline.drift_group_id,
        alerts=settings.alerts,
        slices=settings.slices,
    )


def build_golden(settings: Settings, metrics: Metrics, stage: JudgeStage) -> GoldenService | None:
    """The golden replay beside the judge stage, when `golden.file` and `golden.target` are set:
    it judges with the stage's judge (same budget, same cost metrics) and runs on the member that
    owns partition 0 of the samples topic. ValueError: a bad trigger token or replay secret."""
    golden = settings.golden
    if golden.file is None or not golden.target:
        return None
    # Imported here: a sidecar without a golden set does without the replay's modules.
    from monitor.golden.gauges import GoldenGauges
    from monitor.golden.service import GoldenService, load_replay_secret

    return GoldenService(
        golden,
        stage.judge,
        GoldenGauges(metrics.registry),
        lambda: stage.owns(0),
        replay_secret=load_replay_secret(golden),
        samples_topic=settings.pipeline.samples_topic,
        generator_model=lambda: stage.self_judged_model,
    )


def tune_gc() -> None:
    """Per-span objects are short-lived and acyclic (reference counting frees them); the default
    thresholds made collections ~9% of the drain. Long-lived start-up objects are frozen out of
    every later collection."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


class Sidecar:
    """The stages of one process: all three by default, or the one `pipeline.role` names."""

    def __init__(
        self, settings: Settings, metrics: Metrics | None = None, judge: Judge | None = None
    ) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        role = settings.pipeline.role
        if judge is None and role in ("all", "judge"):
            judge = build_judge(settings)  # first: it may refuse to start (no API key)
        results_topic = settings.results.topic
        if role == "drift" and not results_topic:
            raise ValueError("role drift reads the results topic: set results.topic")
        baseline = None  # next: a bad baseline file refuses to start too
        if role in ("all", "drift", "ingest"):
            baseline = load_drift_baseline(settings, self.metrics)
        self.drift = None
        if role in ("all", "drift"):
            if results_topic:
                self.drift = drift_stage(settings, self.metrics, results_topic, baseline)
            else:
                log.warning("results.topic is not set: no drift detection")
        self.output = KafkaOutput(settings.kafka)
        self.ingest = None
        if role in ("all", "ingest"):
            self.ingest = ingest_stage(settings, self.metrics, self.output, baseline)
        self.judge_stage = None
        if role in ("all", "judge"):
            self.judge_stage = judge_stage(settings, self.metrics, self.output, judge)
        self.golden = None
        if self.judge_stage is not None:
            self.golden = build_golden(settings, self.metrics, self.judge_stage)
        # The examples of the alerts the drift stage raises go to the review queue: the judge
        # stage's when both are here, else one of the drift member's own, for alerts only.
        self.review: ReviewQueue | None = None if self.judge_stage is None else self.judge_stage.review
        if self.drift is not None:
            if self.review is not None:
                self.drift.send_examples_to(self.review.alert_examples)
            elif self.judge_stage is None and (queue := alert_queue(settings.review, self.metrics.review)):
                dropped = self.metrics.produce_dropped
                queue.open_sinks(self.output, settings.pipeline.max_message_bytes, dropped)
                self.drift.send_examples_to(queue.alert_examples, queue.set_group)
                self.review = queue

        self.stages = [s.progress for s in (self.ingest, self.judge_stage, self.drift) if s is not None]
        for stage in self.stages:
            self.metrics.stage_stalled.labels(stage=stage.stage).set_function(self._stalled_gauge(stage))

    @property
    def sources(self) -> list[KafkaSource]:
        return [s.source for s in (self.ingest, self.judge_stage, self.drift) if s is not None]

    def http_routes(self) -> dict[str, Route]:
        """Routes for the metrics server beside /metrics, /healthz, /readyz: `POST /golden/replay`
        on a judge member with a golden set and a trigger token."""
        return {} if self.golden is None else self.golden.routes()

    async def wait_assigned(self) -> None:
        """Until every stage's consumer holds partitions (tests, the demo)."""
        for source in self.sources:
            await source.assigned.wait()

    def readiness(self) -> Readiness:
        """For /readyz (called from the HTTP thread: plain attribute reads only)."""
        checks: dict[str, str] = {}
        ready = True
        now = time.monotonic()
        for source in self.sources:
            name = source.spec.topic
            owned = len(source.owned)
            checks[name] = f"{owned} partitions assigned"
            ready &= owned > 0
            contact = source.last_contact
            if contact is None or now - contact > _BROKER_SILENCE:
                ready = False
                checks["broker"] = "unreachable" if contact is None else f"silent for {now - contact:.0f}s"
        checks.setdefault("broker", "reachable")
        stalled = self._stalled(now, self.settings.pipeline.stall_seconds)
        checks.update(stalled)
        return Readiness(ready and not stalled, checks)

    def liveness(self) -> Readiness:
        """For /healthz: failing only after a long stall, which a restart may cure."""
        stalled = self._stalled(time.monotonic(), self.settings.pipeline.liveness_stall_seconds)
        return Readiness(not stalled, stalled)

    def _stalled_gauge(self, stage: StageProgress) -> Callable[[], float]:
        """`ragmon_stage_stalled{stage}`, read at scrape time on the HTTP thread."""
        limit = self.settings.pipeline.stall_seconds
        return lambda: float(stage.stalled(time.monotonic())[0] >= limit)

    def _stalled(self, now: float, limit: float) -> dict[str, str]:
        out = {}
        for stage in self.stages:
            seconds, part = stage.stalled(now)
            if seconds >= limit:
                out[stage.stage] = f"stalled: its {part} has not moved for {seconds:.0f}s with work waiting"
        return out

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`; then within `pipeline.shutdown_seconds` of it: ingest emits its open
        traces and has their samples acknowledged, the judge stage (when here too) judges what
        ingest just produced, and each commits and leaves its group."""
        if not await self._start_output(stop):
            return
        tune_gc()
        deadline = [float("inf")]  # set when `stop` is; the producer's close gets the last 2 s

        def left() -> float:
            return deadline[0] - time.monotonic()

        async def on_stop() -> None:
            await stop.wait()
            deadline[0] = time.monotonic() + self.settings.pipeline.shutdown_seconds - 2.0

        tasks = [asyncio.create_task(on_stop(), name="deadline")]
        judge_stop = stop
        if self.ingest is not None:
            tasks.append(asyncio.create_task(self.ingest.run(stop, left), name="ingest"))
            if self.judge_stage is not None:
                judge_stop = asyncio.Event()
                after_ingest = self._stop_judge_after_ingest(tasks[-1], judge_stop, left)
                tasks.append(asyncio.create_task(after_ingest, name="judge catch-up"))
        if self.judge_stage is not None:
            stage_stop = judge_stop
            if self.golden is not None:
                # It judges with the stage's judge: it stops first, then the stage (which closes it).
                golden = asyncio.create_task(self.golden.run(judge_stop), name="golden")
                stage_stop = asyncio.Event()
                tasks += [golden, asyncio.create_task(_after(golden, stage_stop), name="judge after golden")]
            tasks.append(asyncio.create_task(self.judge_stage.run(stage_stop, left), name="judge"))
        if self.drift is not None:
            # Last to stop when here with the judge: it alerts on what the judge just wrote.
            drift_stop = stop if self.judge_stage is None else asyncio.Event()
            if self.judge_stage is not None:
                tasks.append(asyncio.create_task(_after(tasks[-1], drift_stop), name="drift after judge"))
            tasks.append(asyncio.create_task(self.drift.run(drift_stop), name="drift"))
            if self.judge_stage is None and self.review is not None:
                # The drift member's own review queue writes the last alerts' examples, then stops.
                review_stop = asyncio.Event()
                tasks.append(asyncio.create_task(_after(tasks[-1], review_stop), name="review after drift"))
                drain = self.review.serve(review_stop, lambda: left() - 3.0)
                tasks.append(asyncio.create_task(drain, name="review"))
        stages = asyncio.create_task(_all(tasks))
        overdue = asyncio.create_task(self._overdue(stop))
        try:
            await asyncio.wait({stages, overdue}, return_when=asyncio.FIRST_COMPLETED)
            if stages.done():
                stages.result()  # a stage's error is the run's
            else:
                running = sorted(t.get_name() for t in tasks if not t.done())
                log.error(
                    "shutdown: still waiting after %.0fs (%s); stopped without finishing, what is"
                    " not acknowledged is re-read",
                    self.settings.pipeline.shutdown_seconds - _CLOSE_SECONDS,
                    ", ".join(running),
                )
        finally:
            overdue.cancel()
            stages.cancel()
            for task in tasks:
                task.cancel()
            # A stage's own clean-up (leaving its group, closing a sink) may hang on the same
            # broker that held it: it gets a second, not the rest of the deadline.
            await asyncio.wait([overdue, *tasks], timeout=1.0)
            stages.add_done_callback(_retrieve)
            try:
                async with asyncio.timeout(_CLOSE_SECONDS - 1.0):
                    await self.output.close()
            except TimeoutError:
                log.warning("producer did not close within %.0fs", _CLOSE_SECONDS - 1.0)

    async def _overdue(self, stop: asyncio.Event) -> None:
        """Ends when the stages should long have: `shutdown_seconds` after `stop` less the time
        the producer's close and the cancelled stages' clean-up get."""
        await stop.wait()
        await asyncio.sleep(max(0.0, self.settings.pipeline.shutdown_seconds - _CLOSE_SECONDS))

    async def _stop_judge_after_ingest(
        self, ingest: asyncio.Task[None], judge_stop: asyncio.Event, left: Callable[[], float]
    ) -> None:
        """Both stages here: the judge stops once ingest has stopped and the samples it produced
        are judged and written — or when a third of the time is left for its own shutdown."""
        assert self.judge_stage is not None
        try:
            await asyncio.wait({ingest})
            await self.judge_stage.catch_up(lambda: left() - 5.0)
        finally:
            judge_stop.set()

    async def _start_output(self, stop: asyncio.Event) -> bool:
        kafka = self.settings.kafka
        delay = 0.25
        while not stop.is_set():
            try:
                await self.output.start()
                break
            except Exception as exc:  # the producer raises several KafkaError kinds on connect
                log.warning("producer cannot connect (%s); retrying", type(exc).__name__)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop.wait()
                delay = min(delay * 2, kafka.reconnect_backoff_max_seconds)
        else:
            return False
        await self._ensure_topics()
        return True

    async def _ensure_topics(self) -> None:
        """Create the samples and results topics (and the review topic, with a review queue here)
        when missing, with the input topic's partition
        count (so the judge group scales as far as the ingest group) and
        `pipeline.topics_replication`; with `pipeline.create_topics` off, only say which are
        missing. Where the cluster forbids it, a warning says to provision them."""
        kafka = self.settings.kafka
        topics = [self.settings.pipeline.samples_topic, self.settings.results.topic]
        if self.review is not None:
            topics.append(self.settings.review.topic)
        wanted = [t for t in topics if t]
        admin = AIOKafkaAdminClient(
            **client_kwargs(kafka, client=AIOKafkaAdminClient, client_id=f"{kafka.client_id}-admin")
        )
        try:
            async with asyncio.timeout(10.0):
                await admin.start()
                try:
                    existing = set(await admin.list_topics())
                    missing = [t for t in wanted if t not in existing]
                    if not missing:
                        return
                    if not self.settings.pipeline.create_topics:
                        log.error(
                            "topics %s are missing and pipeline.create_topics is off: provision them", missing
                        )
                        return
                    partitions = 3
                    if kafka.topic in existing:
                        described = await admin.describe_topics([kafka.topic])
                        partitions = max(1, len(described[0].get("partitions", ())) or 3)
                    replication = self.settings.pipeline.topics_replication
                    for topic in missing:
                        with contextlib.suppress(TopicAlreadyExistsError):  # another replica won
                            await admin.create_topics([NewTopic(topic, partitions, replication)])
                        log.info(
                            "created topic %s with %d partitions, replication %d",
                            topic,
                            partitions,
                            replication,
                        )
                finally:
                    await admin.close()
        except (KafkaError, TimeoutError, OSError) as exc:
            log.warning("cannot check or create topics %s (%s): provision them", wanted, type(exc).__name__)


async def _all(tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.gather(*tasks)


def _retrieve(future: asyncio.Task[None]) -> None:
    """Mark a cancelled gather's outcome seen (it was logged, or raised, already)."""
    if not future.cancelled():
        future.exception()


async def _after(task: asyncio.Task[None], then: asyncio.Event) -> None:
    """Set `then` once `task` has ended, however it ended."""
    try:
        await asyncio.wait({task})
    finally:
        then.set()
