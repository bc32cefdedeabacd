"""The review queue's selection, hourly bound and de-duplication, without a broker: which judged
lines are queued, with which reasons and weight, and that a flood stays within its bounds."""

from __future__ import annotations

import asyncio
import gc
import json
import time
import tracemalloc
from hashlib import blake2b
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.contracts.metrics import ReviewMetrics
from monitor.contracts.results import ResultLine, ReviewLine, ReviewReason
from monitor.judge.config import ReviewConfig
from monitor.judge.review import ReviewQueue, at_boundary, budget_split


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Sink:
    """Collects what the queue writes; `gate` closed holds every write (a sink that is behind)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, bytes]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def write(self, lines: list[tuple[str, bytes]]) -> None:
        await self.gate.wait()
        self.lines.extend(lines)

    async def close(self) -> None:
        pass


def drawn(trace_id: str) -> float:
    """The uniform draw as documented: BLAKE2b-64 of "<trace id>:review", over 2**64."""
    return int.from_bytes(blake2b(f"{trace_id}:review".encode(), digest_size=8).digest(), "big") / 2.0**64


def tid(i: int) -> str:
    return f"{i:032x}"


def judged(
    i: int, verdicts: tuple[str, ...] = ("supported",), *, weight: float = 4.0, **extra: Any
) -> ResultLine:
    doc: dict[str, Any] = {
        "v": 1,
        "trace_id": tid(i),
        "query": f"question {i}",
        "answer": "An answer.",
        "sampling_weight": weight,
        "claims": [{"text": f"claim {n}", "verdict": v} for n, v in enumerate(verdicts)],
        "judge": {"backend": "lexical", "outcome": "ok"},
        **extra,
    }
    return ResultLine.model_validate(doc)


def queue(clock: Clock | None = None, **config: Any) -> tuple[ReviewQueue, CollectorRegistry]:
    registry = CollectorRegistry()
    cfg = ReviewConfig(enabled=True, **config)
    wall = lambda: 1_800_000_000.0  # noqa: E731
    return ReviewQueue(cfg, ReviewMetrics(registry), clock=clock or Clock(), wall=wall), registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_boundary_means_undecided_overridden_or_one_claim_from_faithful() -> None:
    assert at_boundary(judged(1, ("supported", "uncertain")))  # the offline judge could not tell
    assert at_boundary(judged(2, ("supported", "supported", "not_in_context")))  # one claim decides
    assert at_boundary(judged(3, ("contradicted", "supported")))
    overridden = judged(4, ("supported",)).model_copy()
    assert overridden.claims is not None
    overridden.claims[0].note = "not_in_chunk"  # the judge said supported; its quote was not there
    assert at_boundary(overridden)
    not_judged = judged(5, ("not_in_context",))
    assert not_judged.claims is not None
    not_judged.claims[0].note = "not_judged"
    assert at_boundary(not_judged)
    # Clear either way: all supported, a lone unsupported claim, two unsupported, no claim.
    for verdicts in (("supported", "supported"), ("not_in_context",), ("contradicted", "not_in_context"), ()):
        assert not at_boundary(judged(6, verdicts)), verdicts


def test_reasons_weight_and_the_line_carry_the_whole_record() -> None:
    q, registry = queue(uniform_share=0.3)
    ids = range(200)
    uniform = {tid(i) for i in ids if drawn(tid(i)) < 0.3}
    assert 40 < len(uniform) < 80
    for i in ids:
        if i % 10 == 0:
            line = judged(i, repeat_disagreements=["relevance"])
        elif i % 10 == 1:
            line = judged(i, ("supported", "uncertain"))
        else:
            line = judged(i)
        reasons = q.offer(line)
        assert (ReviewReason.UNIFORM in reasons) == (tid(i) in uniform)
        assert (ReviewReason.DISAGREEMENT in reasons) == (i % 10 == 0)
        assert (ReviewReason.BOUNDARY in reasons) == (i % 10 == 1)
    # Not judged: never queued, whatever else it says.
    skipped = ResultLine.model_validate({"trace_id": tid(999), "judge_skipped": "budget"})
    assert q.offer(skipped) == []
    lines = drain(q)
    assert len(lines) == len(uniform | {tid(i) for i in ids if i % 10 in (0, 1)}) == q.queued
    for key, raw in lines:
        review = ReviewLine.model_validate_json(raw)
        assert review.review is not None and review.trace_id == key
        meta = review.review
        assert meta.uniform == (key in uniform) and meta.queued_at == 1_800_000_000.0
        assert meta.weight == (pytest.approx(4.0 / 0.3) if meta.uniform else None)
        # The results line itself, whole, then `review`.
        doc = json.loads(raw)
        assert list(doc)[-1] == "review" and doc["query"].startswith("question ")
        assert doc["claims"][0]["text"] == "claim 0"
    for reason in ReviewReason:
        counted = sum(reason.value in json.loads(raw)["review"]["reasons"] for _, raw in lines)
        assert value(registry, "ragmon_review_queued_total", reason=reason.value) == counted


def drain(q: ReviewQueue) -> list[tuple[str, bytes]]:
    sink = Sink()
    q.sinks.append(sink)

    async def go() -> None:
        writer = asyncio.create_task(q.run())
        await q.drain(5.0)
        writer.cancel()

    asyncio.run(go())
    return sink.lines


def test_each_trace_is_queued_once() -> None:
    q, registry = queue(uniform_share=1.0)
    assert q.offer(judged(1)) == [ReviewReason.UNIFORM]
    assert q.offer(judged(1)) == []  # judged again after a rebalance
    q.alert_examples([judged(1)])  # then an alert's example
    assert len(drain(q)) == 1
    assert value(registry, "ragmon_review_dropped_total", reason="duplicate", uniform="true") == 2


def test_the_budget_adds_up_and_keeps_the_uniform_part() -> None:
    split = budget_split(ReviewConfig(max_per_hour=200))
    assert split == {"uniform": 100, "alert": 34, "disagreement": 33, "boundary": 33}
    assert sum(budget_split(ReviewConfig(max_per_hour=7, uniform_budget=0.2)).values()) == 7
    only_hard = budget_split(ReviewConfig(max_per_hour=10, reasons=["boundary", "disagreement"]))
    assert only_hard == {"uniform": 0, "alert": 0, "disagreement": 5, "boundary": 5}
    assert budget_split(ReviewConfig(max_per_hour=10, reasons=["uniform"]))["uniform"] == 10


def test_hard_cases_never_starve_the_uniform_share_and_the_hour_slides() -> None:
    clock = Clock()
    q, registry = queue(clock, uniform_share=0.1, max_per_hour=40)  # 20 uniform, 7/7/6 hard
    # A flood of boundary records first, every one of them at the boundary.
    boundary = [judged(i, ("supported", "uncertain")) for i in range(1000)]
    queued = [q.offer(line) for line in boundary]
    uniform_ids = [tid(i) for i in range(1000) if drawn(tid(i)) < 0.1]
    assert len(uniform_ids) > 20  # more than the uniform part: it is bound too
    kept = [r for r in queued if r]
    assert len(kept) == 20 + 6  # the uniform part, full; the boundary part, full
    assert sum(ReviewReason.UNIFORM in r for r in kept) == 20
    assert sum(ReviewReason.UNIFORM not in r for r in kept) == 6
    # The disagreement part was untouched by the flood.
    i = next(i for i in range(5000, 6000) if drawn(tid(i)) >= 0.1)
    assert q.offer(judged(i, repeat_disagreements=["faithful"])) == [ReviewReason.DISAGREEMENT]
    dropped = value(registry, "ragmon_review_dropped_total", reason="rate_limited", uniform="false")
    assert dropped == 1000 - len(uniform_ids) - 6
    # An hour after the first lines, the window has room again.
    clock.now += 3600.0
    i = next(i for i in range(6000, 7000) if drawn(tid(i)) >= 0.1)
    assert q.offer(judged(i, ("supported", "uncertain"))) == [ReviewReason.BOUNDARY]


def test_a_flood_stays_bounded_and_never_waits() -> None:
    """10,000 judged records, every one selected, while the sinks are stuck: offers return at
    once, what waits is `queue_size` lines, and memory does not grow with the records."""

    async def go() -> tuple[float, int, int]:
        q, registry = queue(uniform_share=1.0, max_per_hour=100_000, queue_size=100)
        sink = Sink()
        sink.gate.clear()
        q.sinks.append(sink)
        writer = asyncio.create_task(q.run())

        def flood(start: int, n: int) -> None:
            for i in range(start, start + n):
                q.offer(judged(i))

        flood(0, 1_000)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        t0 = time.perf_counter()
        flood(1_000, 10_000)
        seconds = time.perf_counter() - t0
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert value(registry, "ragmon_review_dropped_total", reason="queue_full", uniform="true") >= 10_000
        sink.gate.set()
        await q.drain(5.0)
        writer.cancel()
        print(f"10,000 offers: {seconds:.3f} s, {grown} bytes grown")
        return seconds, grown, len(sink.lines)

    seconds, grown, written = asyncio.run(go())
    assert written == 100  # what waited for the stuck sink: queue_size lines, then written
    # Offers never wait: a wait on the stuck sink would last for ever; ~80 µs a record on a quiet
    # machine (building it and tracemalloc included), the bound allows a loaded one.
    assert seconds < 60.0
    # The de-duplication set holds the queued ids only (100), not the flood's.
    assert grown < 1_000_000, grown


def test_each_replica_takes_its_partitions_share_of_the_hour() -> None:
    q, _ = queue(uniform_share=1.0, max_per_hour=60)  # 30 uniform, 10/10/10 hard
    q.set_group(1, 3)
    assert q.budget.caps == {"uniform": 10, "alert": 3, "disagreement": 3, "boundary": 3}
    assert sum(bool(q.offer(judged(i))) for i in range(100)) == 10
    q.set_group(3, 3)  # the others left: the whole bound again
    assert sum(bool(q.offer(judged(i))) for i in range(100, 200)) == 20


def test_large_records_are_bounded_in_bytes_not_only_in_lines() -> None:
    """Records of 1 MB each (an answer with its chunks) while the sinks are stuck: what waits is at
    most `queue_max_bytes`, not `queue_size` records (1,000 of them: 1 GB); the rest dropped and
    counted as `queue_bytes`, and what waited is written once the sink moves."""

    async def go() -> tuple[int, int, float]:
        q, registry = queue(uniform_share=1.0, max_per_hour=100_000, queue_max_bytes=8 * 1024 * 1024)
        sink = Sink()
        sink.gate.clear()
        q.sinks.append(sink)
        writer = asyncio.create_task(q.run())
        big = "x" * 1_000_000
        for i in range(40):
            q.offer(judged(i, answer=big))
        await asyncio.sleep(0)
        waiting = q.pending_bytes
        dropped = value(registry, "ragmon_review_dropped_total", reason="queue_bytes", uniform="true")
        sink.gate.set()
        await q.drain(5.0)
        writer.cancel()
        assert q.pending_bytes == 0  # the written lines are no longer counted
        return waiting, len(sink.lines), dropped

    waiting, written, dropped = asyncio.run(go())
    assert waiting <= 8 * 1024 * 1024  # before: 40 MB waited (queue_size 1,000 lines)
    assert written == 8  # 8 lines of ~1 MB fit in 8 MiB
    assert dropped == 40 - 8
