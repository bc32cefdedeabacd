"""The review queue: which judged records a person should look at, and why (docs/judges.md, "The
review queue"; the line is `monitor.contracts.results.ReviewLine`).

A judged record is queued for any of four reasons (`ReviewReason`):

- `disagreement`: judged twice (`judge.repeat_fraction`), the two judgements differ;
- `boundary`: the judge's verdict is close to going the other way (`at_boundary`);
- `alert`: an example trace of a drift alert (handed over by the wiring: to the judge stage's queue
  when both stages run in one process, else to a drift member's own queue of alerts only,
  `alert_queue`);
- `uniform`: a random share of judged records, drawn per trace id whatever the record looks like.

The first three are hard cases: what a reviewer learns most from, and exactly what must not be
used to estimate the judge's agreement with people (it would describe the judge on hard cases
only). The uniform share is the unbiased sample: its lines carry `weight` = the record's sampling
weight / `uniform_share`, so that its labels, weighted, stand for the judged traffic.

Bounded: at most `max_per_hour` lines in any 60 minutes (`HourlyBudget`: `uniform_budget` of them
kept for the uniform share, the rest split evenly between the hard reasons, none borrowing from
another; each judge replica takes its partitions' share), each trace once (`SeenTraces`, the last
days' queued ids), and at most `queue_size` lines and `queue_max_bytes` bytes of them waiting for the
sinks (a record may be megabytes of chunks: the count alone bounds no memory). Writing happens on a task
of its own (`run`), so a slow or failing sink costs review lines (counted), never the judge
stage's progress.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from prometheus_client import Counter

from monitor.contracts.metrics import ReviewMetrics
from monitor.contracts.model import NOTE_NOT_JUDGED, EvidenceFailure, Verdict
from monitor.contracts.results import ResultLine, ReviewLine, ReviewReason, encode_result
from monitor.contracts.samples import blake2b_fraction
from monitor.judge.config import ReviewConfig
from monitor.kafka.producer import KafkaOutput
from monitor.outputs.result_sinks import FileSink, ResultSink, TopicSink
from monitor.plumbing.tasks import cancel_all

log = logging.getLogger(__name__)

WINDOW_SECONDS = 3600.0
# Hard reasons in the order a record with several is charged: the rarest first.
HARD_REASONS = (ReviewReason.ALERT, ReviewReason.DISAGREEMENT, ReviewReason.BOUNDARY)
_UNSUPPORTED = (Verdict.CONTRADICTED, Verdict.NOT_IN_CONTEXT)
_OVERRIDDEN = frozenset(f.value for f in EvidenceFailure)
_WRITE_BATCH = 256
_ORDER = {reason: i for i, reason in enumerate(ReviewReason)}


def uniform_draw(trace_id: str) -> float:
    """The review queue's own uniform number of a trace, independent of the sampling draw (a
    salted hash, as the judge's repeat draw): every replica, and every restart, draws alike."""
    return blake2b_fraction(trace_id + ":review")


def at_boundary(line: ResultLine) -> bool:
    """Whether the judge's verdict on the record is close to going the other way:

    - a claim left undecided: `uncertain` (the offline judge could not tell) or `not_judged` (an
      answer sentence the judge gave no verdict);
    - a claim whose verdict the evidence check overrode (the judge said supported or contradicted
      and its quote was not there: the judge and the code disagree);
    - the record-level decision hangs on one claim: of two or more decided claims, exactly one is
      unsupported (faithfulness (n-1)/n), so one verdict flips "faithful".

    No judge here reports a confidence; a judge that does would add its low-confidence case here.
    """
    claims = line.claims or ()
    decided = unsupported = 0
    for claim in claims:
        if claim.verdict is Verdict.UNCERTAIN or claim.note == NOTE_NOT_JUDGED:
            return True
        if claim.note in _OVERRIDDEN:
            return True
        if claim.verdict is not None:
            decided += 1
            unsupported += claim.verdict in _UNSUPPORTED
    return decided >= 2 and unsupported == 1


def budget_split(config: ReviewConfig) -> dict[ReviewReason, int]:
    """Per reason, the lines it may queue in any 60 minutes; they add up to `max_per_hour`.

    The uniform share gets `uniform_budget` of it (rounded up, when the share is drawn at all); the
    hard reasons the rest, evenly, the remainder to the rarer first. A reason turned off gets none,
    and what it would have had goes to the others."""
    total = config.max_per_hour
    enabled = set(config.reasons)
    uniform_on = ReviewReason.UNIFORM in enabled and config.uniform_share > 0
    hard = [r for r in HARD_REASONS if r in enabled]
    split = dict.fromkeys(ReviewReason, 0)
    uniform = total if not hard else math.ceil(total * config.uniform_budget) if uniform_on else 0
    if uniform_on:
        split[ReviewReason.UNIFORM] = uniform
    rest = total - split[ReviewReason.UNIFORM]
    for i, reason in enumerate(hard):
        split[reason] = rest // len(hard) + (i < rest % len(hard))
    return split


class HourlyBudget:
    """Sliding 60-minute windows, one per reason: a reason may queue `split[reason]` lines in any
    60 minutes, or this member's share of them (`set_share`). Memory: one timestamp per line in
    the window, at most `max_per_hour`."""

    def __init__(self, split: dict[ReviewReason, int], clock: Callable[[], float] = time.monotonic) -> None:
        self.split = split
        self.caps = dict(split)
        self._clock = clock
        self._taken: dict[ReviewReason, collections.deque[float]] = {r: collections.deque() for r in split}

    def set_share(self, share: float) -> None:
        """This member's part of the group-wide bound: each reason's part times `share`, rounded,
        at least 1 where the part is not 0 (so every reason keeps a line an hour on every member)."""
        self.caps = {r: max(1, round(n * share)) if n and share > 0 else 0 for r, n in self.split.items()}

    def __len__(self) -> int:
        """The lines taken in the window (expired ones until their reason takes again)."""
        return sum(len(taken) for taken in self._taken.values())

    def take(self, reason: ReviewReason) -> bool:
        """Whether `reason` has room now; if it has, the room is taken."""
        now = self._clock()
        taken = self._taken[reason]
        while taken and taken[0] <= now - WINDOW_SECONDS:
            taken.popleft()
        if len(taken) >= self.caps[reason]:
            return False
        taken.append(now)
        return True


class SeenTraces:
    """The trace ids queued last, at most `capacity` (the oldest forgotten first)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ids: dict[str, None] = {}

    def __contains__(self, trace_id: object) -> bool:
        return trace_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, trace_id: str) -> None:
        self._ids[trace_id] = None
        if len(self._ids) > self.capacity:
            del self._ids[next(iter(self._ids))]


def dedup_capacity(config: ReviewConfig) -> int:
    """A week of the hourly bound, within 1,000 and 100,000 ids (~10 MB at most): a trace
    re-judged after a rebalance or a restart comes back within minutes, not weeks."""
    return max(1_000, min(100_000, config.max_per_hour * 24 * 7))


class ReviewQueue:
    """Selects judged records for review and writes them to its sinks (the review topic and/or
    file). `offer` and `alert_examples` run on the event loop and never wait; `run` writes."""

    def __init__(
        self,
        config: ReviewConfig,
        metrics: ReviewMetrics,
        sinks: Sequence[ResultSink] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        only: Collection[ReviewReason] | None = None,
    ) -> None:
        """`only`: the reasons this queue selects for, of those configured (`alert_queue`); the
        hourly bound is still split over every configured reason, so each keeps its share."""
        self.config = config
        self.sinks = list(sinks)  # the wiring may add them until `run`
        self._metrics = metrics
        self._reasons = frozenset(config.reasons) & frozenset(ReviewReason if only is None else only)
        self._share = config.uniform_share if ReviewReason.UNIFORM in self._reasons else 0.0
        self.budget = HourlyBudget(budget_split(config), clock)
        self.seen = SeenTraces(dedup_capacity(config))
        self._pending: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(config.queue_size)
        self.pending_bytes = 0  # of the lines in `_pending` and the batch being written
        self._wall = wall
        self._clock = clock
        self._warned: dict[str, float] = {}
        self.queued = 0  # lines handed to the writer
        self.written = 0  # lines the sinks took

    def set_group(self, owned: int, total: int) -> None:
        """After a rebalance: this member owns `owned` of the samples topic's `total` partitions,
        and takes that share of `max_per_hour` (traces are keyed to partitions, so each member
        sees its share of the traffic and the group stays near the bound)."""
        if total > 0:
            self.budget.set_share(owned / total)

    def open_sinks(self, output: KafkaOutput, max_message_bytes: int, produce_dropped: Counter) -> None:
        """The configured sinks: `file` (rotated) and `topic` (through the process's producer)."""
        config = self.config
        if config.file is not None:
            errors = self._metrics.write_errors
            self.sinks.append(FileSink(config.file, config.file_max_bytes, config.file_keep, errors))
        if config.topic:
            self.sinks.append(TopicSink(output, config.topic, max_message_bytes, produce_dropped, "review"))

    # -- selecting: on the event loop, never waiting -------------------------------------------

    def reasons(self, line: ResultLine) -> list[ReviewReason]:
        """Why a judged line would be reviewed, in `ReviewReason` order (none: not at all)."""
        if not line.judged or not line.trace_id:
            return []
        out = []
        want = self._reasons
        if ReviewReason.DISAGREEMENT in want and line.repeat_disagreements:
            out.append(ReviewReason.DISAGREEMENT)
        if ReviewReason.BOUNDARY in want and at_boundary(line):
            out.append(ReviewReason.BOUNDARY)
        if self._share > 0 and uniform_draw(line.trace_id) < self._share:
            out.append(ReviewReason.UNIFORM)
        return out

    def offer(self, line: ResultLine) -> list[ReviewReason]:
        """Queue a judged results line if it is to be reviewed; the reasons it was queued for
        (none: not selected, or dropped and counted)."""
        return self._queue(line, self.reasons(line))

    def alert_examples(self, lines: Sequence[ResultLine]) -> None:
        """The example records of a drift alert just raised (the drift stage's hook), queued for
        `alert` beside their own reasons."""
        if ReviewReason.ALERT not in self._reasons:
            return
        for line in lines:
            if line.judged and line.trace_id:
                reasons = {*self.reasons(line), ReviewReason.ALERT}
                self._queue(line, sorted(reasons, key=_ORDER.__getitem__))

    def _queue(self, line: ResultLine, reasons: list[ReviewReason]) -> list[ReviewReason]:
        if not reasons:
            return []
        trace_id = line.trace_id
        assert trace_id is not None  # `reasons` gives none without
        uniform = ReviewReason.UNIFORM in reasons
        if trace_id in self.seen:
            return self._drop("duplicate", uniform)
        if self._pending.full():
            return self._drop("queue_full", uniform)
        # The uniform share is charged to its own part of the budget whatever its other reasons:
        # whether a record of the share is queued must not depend on what it looks like.
        charge = [ReviewReason.UNIFORM] if uniform else [r for r in HARD_REASONS if r in reasons]
        if not any(self.budget.take(r) for r in charge):
            return self._drop("rate_limited", uniform)
        meta: dict[str, Any] = {"reasons": [r.value for r in reasons], "uniform": uniform}
        if uniform:
            meta["weight"] = (line.sampling_weight or 1.0) / self._share
        meta["queued_at"] = round(self._wall(), 3)
        fields = line.model_dump(exclude_unset=True)
        fields["review"] = meta
        review = ReviewLine.model_validate(fields)
        encoded = encode_result(review)
        if self.pending_bytes + len(encoded) > self.config.queue_max_bytes:
            return self._drop("queue_bytes", uniform)
        self._pending.put_nowait((trace_id, encoded))
        self.pending_bytes += len(encoded)
        self.seen.add(trace_id)
        self.queued += 1
        for reason in reasons:
            self._metrics.queued.labels(reason=reason.value).inc()
        return reasons

    def _drop(self, why: str, uniform: bool) -> list[ReviewReason]:
        self._metrics.dropped.labels(reason=why, uniform="true" if uniform else "false").inc()
        if why != "duplicate":
            now = self._clock()
            if now - self._warned.get(why, -math.inf) >= WINDOW_SECONDS:
                self._warned[why] = now
                log.warning(
                    "review queue: a selected record dropped (%s%s); counted in"
                    " ragmon_review_dropped_total, logged once an hour",
                    why,
                    ", from the uniform share" if uniform else "",
                )
        return []

    # -- writing: a task of its own ------------------------------------------------------------

    async def run(self) -> None:
        """Write queued lines to every sink, in batches, until cancelled. A sink that fails is
        retried with backoff while the queue absorbs the lines (beyond: `queue_full`)."""
        pending = self._pending
        while True:
            batch = [await pending.get()]
            while len(batch) < _WRITE_BATCH and not pending.empty():
                batch.append(pending.get_nowait())
            try:
                await self._write(batch)
            finally:
                self.pending_bytes -= sum(len(line) for _, line in batch)
                for _ in batch:
                    pending.task_done()

    async def _write(self, batch: list[tuple[str, bytes]]) -> None:
        for sink in self.sinks:
            delay = 0.5
            while True:
                try:
                    await sink.write(batch)
                    break
                except Exception as exc:  # any sink error: retry, the queue bounds what waits
                    log.warning(
                        "review sink %s failed (%s); retrying in %.1fs", type(sink).__name__, exc, delay
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)
        self.written += len(batch)

    async def drain(self, seconds: float) -> None:
        """Until the writer (`run`, still running) has written what is queued, for at most
        `seconds`: at shutdown, before the writer is cancelled."""
        try:
            async with asyncio.timeout(max(0.0, seconds)):
                await self._pending.join()
        except TimeoutError:
            log.warning("shutdown: %d review lines not written", self._pending.qsize())

    async def close(self) -> None:
        for sink in self.sinks:
            await sink.close()

    async def serve(self, stop: asyncio.Event, left: Callable[[], float]) -> None:
        """Write until `stop`, then what is queued within the seconds `left()` gives, and close:
        the queue's life where no judge stage holds it (a drift member's `alert_queue`)."""
        writer = asyncio.create_task(self.run(), name="ragmon-review-writer")
        try:
            await stop.wait()
            await self.drain(min(5.0, left()))
        finally:
            await cancel_all([writer])
            await self.close()


def review_queue(
    config: ReviewConfig | None, metrics: ReviewMetrics, only: Collection[ReviewReason] | None = None
) -> ReviewQueue | None:
    """The review queue `config` asks for, selecting for `only` of its reasons (default: all):
    None when reviewing is off, none of those reasons is configured, or there is no sink (said)."""
    if config is None or not config.enabled:
        return None
    if only is not None and not set(only) & set(config.reasons):
        return None
    if not config.topic and config.file is None:
        log.warning("review.enabled without review.topic or review.file: no review queue")
        return None
    return ReviewQueue(config, metrics, only=only)


def alert_queue(config: ReviewConfig, metrics: ReviewMetrics) -> ReviewQueue | None:
    """A drift member's review queue, where no judge stage runs beside it (split roles): the
    drift alerts' example records, for `alert` only (the judge members queue the other reasons)."""
    return review_queue(config, metrics, only=(ReviewReason.ALERT,))
