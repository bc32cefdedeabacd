"""Label-free retrieval drift (monitor/drift/retrieval.py): the chunk count and top score of every
record against a frozen reference, by PSI. It raises on a real retrieval failure within a stated
number of records, stays silent on stable traffic, keeps missing scores apart, has hysteresis, and
its series come out of the ingest stage fed through the real broker. A pinned reference watches
from the first record (pinning from results files: tests/drift/test_drift_baseline.py)."""

from __future__ import annotations

import itertools
import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import eventually, running, sample, settings_for

from monitor.app.config import ConfigError, load_settings
from monitor.contracts.metrics import Metrics
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import produce
from monitor.drift import RetrievalDriftMonitor, RetrievalDriftPolicy, RetrievalReference
from monitor.drift.reference import RetrievalStats, pin
from monitor.drift.retrieval import SliceDrift, score_edges, weighted_score_edges

POLICY = RetrievalDriftPolicy()
Record = tuple[int, float | None]


def records(rng: random.Random, change: str | None = None) -> Iterator[Record]:
    """A top-5 retriever with a score cut-off (as bench/retrieval_drift.py): mostly 5 chunks, 2 %
    none; top score ~ Normal(0.7, 0.1), absent without chunks and on 3 % of the others."""
    while True:
        if change == "zero_chunks" and rng.random() < 0.3:
            yield 0, None
            continue
        count = rng.choices((5, 4, 3, 2, 1, 0), (0.80, 0.08, 0.05, 0.03, 0.02, 0.02))[0]
        if count == 0 or rng.random() < 0.03:
            yield count, None
            continue
        score = rng.gauss(0.7, 0.1) - (0.2 if change == "score_drop" else 0.0)
        yield count, min(max(score, 0.0), 1.0)


def feed(d: SliceDrift, stream: Iterator[Record], n: int) -> None:
    for _ in range(n):
        d.observe(*next(stream))


def watched(seed: int, policy: RetrievalDriftPolicy = POLICY) -> tuple[SliceDrift, random.Random]:
    """A slice past its reference, its window full of stable records."""
    rng = random.Random(seed)
    d = SliceDrift(policy)
    feed(d, records(rng), policy.reference_records + policy.window_records)
    assert d.frozen and d.window_size == policy.window_records
    return d, rng


def active(d: SliceDrift) -> dict[str, bool]:
    return {f.name: f.active for f in d.features}


def first_alarm(d: SliceDrift, stream: Iterator[Record], within: int) -> dict[str, int]:
    """Records after the change until each feature's alarm (features that never alarm are absent)."""
    first: dict[str, int] = {}
    for k in range(1, within + 1):
        d.observe(*next(stream))
        for f in d.features:
            if f.active:
                first.setdefault(f.name, k)
    return first


@pytest.mark.parametrize("seed", range(5))
def test_no_chunks_for_30_percent_of_records_raises_within_700_records(seed: int) -> None:
    d, rng = watched(seed)
    first = first_alarm(d, records(rng, "zero_chunks"), 1000)
    # bench/retrieval_drift.py: median 400-500 records (PSI checked every 100).
    assert first["chunk_count"] <= 700
    # Records without chunks have no score: the top score's "no score" bin moves too.
    assert "top_score" in first


@pytest.mark.parametrize("seed", range(5))
def test_top_scores_dropping_by_0_2_raise_within_500_records(seed: int) -> None:
    d, rng = watched(seed)
    first = first_alarm(d, records(rng, "score_drop"), 1000)
    assert first.get("top_score", 10**9) <= 500
    assert "chunk_count" not in first, "the chunk count did not change"


def test_stable_traffic_stays_silent_over_many_windows() -> None:
    """50 windows of stable records, five times: no alarm, and PSI far below the threshold
    (bench/retrieval_drift.py: no false alarm in 2,000,000 records, PSI at most ~0.04)."""
    for seed in range(5):
        d, rng = watched(100 + seed)
        stream = records(rng)
        highest = 0.0
        for _ in range(50 * POLICY.window_records):
            if d.observe(*next(stream)):
                highest = max(highest, *(f.psi for f in d.features))
        assert [f.alarms for f in d.features] == [0, 0]
        assert 0 < highest < POLICY.threshold / 3


def test_a_missing_score_is_not_a_score_of_zero() -> None:
    """Half the reference has no score and half scores 0.0; a window where every record scores
    0.0 has changed (it would not if a missing score counted as 0)."""
    policy = RetrievalDriftPolicy(reference_records=200, window_records=100, min_records=100, check_every=10)
    d = SliceDrift(policy)
    for i in range(200):
        d.observe(1, None if i % 2 else 0.0)
    for _ in range(100):
        d.observe(1, 0.0)
    assert active(d) == {"chunk_count": False, "top_score": True}


def test_a_retriever_that_stops_reporting_scores_raises_only_the_top_score_alarm() -> None:
    d, rng = watched(7)
    stream = ((count, None) for count, _ in records(rng))
    first = first_alarm(d, stream, 1000)
    assert set(first) == {"top_score"}


def test_a_retriever_without_scores_never_raises_a_top_score_alarm() -> None:
    """No scores in the reference nor after: one "no score" bin on both sides; the chunk count
    is still watched."""
    rng = random.Random(8)
    d = SliceDrift(POLICY)
    feed(d, ((c, None) for c, _ in records(rng)), POLICY.reference_records + 3 * POLICY.window_records)
    assert active(d) == {"chunk_count": False, "top_score": False}
    first = first_alarm(d, ((c, None) for c, _ in records(rng, "zero_chunks")), 1000)
    assert set(first) == {"chunk_count"}


def test_the_alarm_waits_for_the_window_minimum_fill() -> None:
    """A change right after the reference froze: nothing before `min_records` are in the window."""
    rng = random.Random(3)
    d = SliceDrift(POLICY)
    feed(d, records(rng), POLICY.reference_records)
    broken = itertools.repeat((0, None))
    feed(d, broken, POLICY.min_records - 1)
    assert active(d) == {"chunk_count": False, "top_score": False}
    assert all(f.psi != f.psi for f in d.features), "no PSI before the minimum fill"
    feed(d, broken, POLICY.check_every)
    assert active(d) == {"chunk_count": True, "top_score": True}


def test_hysteresis_one_alarm_per_incident_cleared_below_release() -> None:
    """Raised at PSI >= 0.25, held while PSI is between 0.1 and 0.25 as the window recovers,
    cleared at <= 0.1: one alarm for the incident, no flapping."""
    d, rng = watched(11)
    feed(d, records(rng, "zero_chunks"), POLICY.window_records)
    chunk = d.features[0]
    assert chunk.active and chunk.psi >= POLICY.threshold
    held_below_threshold = False
    cleared_at = None
    stable = records(rng)
    for k in range(1, 2 * POLICY.window_records + 1):
        if not d.observe(*next(stable)):
            continue
        if chunk.active and chunk.psi < POLICY.threshold:
            held_below_threshold = True
        if not chunk.active and cleared_at is None:
            cleared_at = k
            assert chunk.psi <= POLICY.release
    assert held_below_threshold, "the alarm held between release and threshold"
    assert cleared_at is not None and cleared_at <= POLICY.window_records
    assert chunk.alarms == 1


def test_policy_is_checked_at_start_up() -> None:
    def load(retrieval: dict[str, object]) -> None:
        load_settings(None, {"alerts": {"drift": {"retrieval": retrieval}}})

    with pytest.raises(ConfigError, match=r"alerts\.drift\.retrieval.*release \(0\.3\) must be below"):
        load({"release": 0.3})
    with pytest.raises(ConfigError, match=r"min_records \(600\) cannot exceed window_records \(500\)"):
        load({"window_records": 500, "min_records": 600})
    with pytest.raises(ConfigError, match=r"alerts\.drift\.retrieval\.psi_threshold"):
        load({"psi_threshold": 0.2})
    settings = load_settings(None, {"alerts": {"drift": {"retrieval": {"threshold": 0.2}}}})
    assert settings.alerts.drift.retrieval.threshold == 0.2
    assert settings.alerts.drift.retrieval.reference_records == 2000


def test_series_per_slice_and_feature() -> None:
    metrics = Metrics()
    policy = RetrievalDriftPolicy(reference_records=400, window_records=400, min_records=200, check_every=20)
    monitor = RetrievalDriftMonitor(policy, metrics.retrieval_drift)
    rng = random.Random(5)
    stable = records(rng)
    for _ in range(1000):
        monitor.observe("lookup", *next(stable))
        monitor.observe("comparison", *next(stable))
    for _ in range(400):
        monitor.observe("lookup", 0, None)

    def value(name: str, qt: str, feature: str) -> float | None:
        labels = {"query_type": qt, "feature": feature}
        return metrics.registry.get_sample_value(f"ragmon_retrieval_drift_{name}", labels)

    assert value("active", "lookup", "chunk_count") == 1
    assert value("alarms_total", "lookup", "chunk_count") == 1
    psi = value("psi", "lookup", "chunk_count")
    assert psi is not None and psi > 0.25
    assert value("threshold", "lookup", "chunk_count") == 0.25
    assert value("active", "comparison", "top_score") == 0
    assert value("alarms_total", "comparison", "top_score") == 0


def stable_reference(seed: int, n: int = POLICY.reference_records) -> RetrievalReference:
    stream = records(random.Random(seed))
    counts, scores = zip(*(next(stream) for _ in range(n)), strict=True)
    return RetrievalReference.of(counts, scores)


def test_a_slice_freezes_to_the_reference_of_its_first_records() -> None:
    """Collecting and pinning share one definition: a slice's own reference is `of` its records."""
    stream = records(random.Random(21))
    first = [next(stream) for _ in range(POLICY.reference_records)]
    d = SliceDrift(POLICY)
    for count, score in first:
        d.observe(count, score)
    counts, scores = zip(*first, strict=True)
    assert d.frozen and not d.pinned
    assert d.reference == RetrievalReference.of(counts, scores)
    assert d.reference == RetrievalReference.of(counts, scores, [3.0] * len(first))  # only ratios count
    assert d.reference.effective_records == pytest.approx(POLICY.reference_records)


def test_weighted_deciles_estimate_the_population_not_the_sample() -> None:
    """A sample that over-represents a rarer high-scoring kind (15 % of the population, half the
    sample), weighted back: its deciles are the population's within sampling noise, the
    unweighted ones are not."""
    rng = random.Random(4)
    population = [rng.gauss(0.5, 0.05) for _ in range(85_000)] + [rng.gauss(0.9, 0.05) for _ in range(15_000)]
    sample = [(rng.gauss(0.5, 0.05), 17.0) for _ in range(1000)]
    sample += [(rng.gauss(0.9, 0.05), 3.0) for _ in range(1000)]
    truth = score_edges(population)
    weighted = weighted_score_edges([s for s, _ in sample], [w for _, w in sample])
    plain = score_edges([s for s, _ in sample])
    assert max(abs(a - b) for a, b in zip(weighted, truth, strict=True)) < 0.015
    assert max(abs(a - b) for a, b in zip(plain, truth, strict=True)) > 0.2
    assert weighted_score_edges([0.4, 0.6], [1.0, 3.0]) == pytest.approx([0.42 + 0.02 * i for i in range(9)])
    assert weighted_score_edges([0.5], [2.0]) == [] and weighted_score_edges([0.5, 0.5], [1.0, 2.0]) == [0.5]


def test_a_pinned_slice_alarms_on_a_broken_retriever_from_its_first_window() -> None:
    """The restart case: the retriever is already broken (no chunks for 30 % of records) when the
    process starts. Pinned, the slice collects nothing and alarms once `min_records` are in its
    window; unpinned, the broken state becomes its reference and nothing ever alarms."""
    metrics = Metrics()
    pinned = RetrievalDriftMonitor(POLICY, metrics.retrieval_drift, {"lookup": stable_reference(31)})
    fresh = RetrievalDriftMonitor(POLICY, Metrics().retrieval_drift)
    # Exported before any record reaches the window: the threshold, and "not active".
    labels = {"query_type": "lookup", "feature": "chunk_count"}
    broken = records(random.Random(32), "zero_chunks")
    first: dict[str, int] = {}
    for k in range(1, 4 * POLICY.window_records + 1):
        count, score = next(broken)
        pinned.observe("lookup", count, score)
        fresh.observe("lookup", count, score)
        if k == 1:
            d = pinned.slices["lookup"]
            assert d.frozen and d.pinned and d.counts_seen == [], "no reference collected"
            assert metrics.registry.get_sample_value("ragmon_retrieval_drift_threshold", labels) == 0.25
            assert metrics.registry.get_sample_value("ragmon_retrieval_drift_active", labels) == 0
        for f in pinned.slices["lookup"].features:
            if f.active:
                first.setdefault(f.name, k)
    assert first["chunk_count"] == POLICY.min_records  # the first check with the window's minimum
    assert first["top_score"] <= POLICY.window_records
    assert metrics.registry.get_sample_value("ragmon_retrieval_drift_alarms_total", labels) == 1
    unpinned = fresh.slices["lookup"]
    assert not unpinned.pinned and [f.alarms for f in unpinned.features] == [0, 0]
    # Slices the pin does not name collect their reference as before.
    pinned.observe("comparison", 5, 0.7)
    assert not pinned.slices["comparison"].frozen


def test_a_restarted_monitor_with_the_same_pin_gives_the_same_psi() -> None:
    """Before and after a restart, the same pinned reference: once the new process's window holds
    the same records as the old one's, the PSI is the same — not so with a reference each process
    took from its own first records."""
    ref = stable_reference(41)
    rng = random.Random(42)
    before = [next(records(rng)) for _ in range(3000)]
    after = list(itertools.islice(records(rng, "score_drop"), 2000))

    def run(pin: dict[str, RetrievalReference] | None, stream: list[Record]) -> RetrievalDriftMonitor:
        monitor = RetrievalDriftMonitor(POLICY, Metrics().retrieval_drift, pin)
        for count, score in stream:
            monitor.observe("lookup", count, score)
        return monitor

    def psi(monitor: RetrievalDriftMonitor) -> list[float]:
        return [f.psi for f in monitor.slices["lookup"].features]

    old, restarted = run({"lookup": ref}, before + after), run({"lookup": ref}, after)
    assert psi(old) == psi(restarted)
    assert psi(restarted)[1] >= POLICY.threshold and restarted.slices["lookup"].features[1].active
    assert psi(run(None, before + after)) != psi(run(None, after))


async def test_ingest_stage_exports_retrieval_drift_of_every_record(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Flat JSON records through the real broker into the ingest stage alone (no judge): lookup
    loses its chunks after a stable stretch and alarms; comparison stays in control."""
    bs = broker.bootstrap_servers
    # Windows this small are noisy (PSI ~ (1/n + 1/m)·χ²(bins − 1)): 400/400 keeps stable traffic
    # well under 0.25.
    retrieval = {"reference_records": 400, "window_records": 400, "min_records": 200, "check_every": 20}
    settings = settings_for(
        bs, topic, None, pipeline={"role": "ingest"}, alerts={"drift": {"retrieval": retrieval}}
    )
    rng = random.Random(9)

    def message(query_type: str, chunks: int, score: float | None) -> tuple[bytes, bytes]:
        trace_id = uuid.UUID(int=rng.getrandbits(128)).hex
        items = [{"id": f"c{i}", "content": "text", "score": score} for i in range(chunks)]
        if score is not None and items:
            for i, item in enumerate(items):
                item["score"] = score - 0.01 * i
        body = {
            "trace_id": trace_id,
            "query": "q",
            "answer": "a",
            "query_type": query_type,
            "service": "shop",
            "chunks": items,
        }
        return trace_id.encode(), json.dumps(body).encode()

    stable = records(rng)
    first = [message(qt, *next(stable)) for _ in range(500) for qt in ("lookup", "comparison")]
    async with running(settings) as sidecar:
        ingest = sidecar.ingest
        assert ingest is not None
        await produce(bs, topic, first)
        await eventually(lambda: ingest.records_seen == 1000, what="the stable records")
        assert (
            sample(sidecar, "ragmon_retrieval_drift_active", query_type="lookup", feature="chunk_count") == 0
        )
        broken = [message("lookup", 0, None) for _ in range(300)]
        await produce(bs, topic, [*broken, *(message("comparison", *next(stable)) for _ in range(300))])
        await eventually(lambda: ingest.records_seen == 1600, what="the broken records")

        def value(name: str, qt: str, feature: str) -> float:
            return sample(sidecar, f"ragmon_retrieval_drift_{name}", query_type=qt, feature=feature)

        await eventually(lambda: value("active", "lookup", "chunk_count") == 1, what="the alarm")
        assert value("alarms_total", "lookup", "chunk_count") == 1
        assert value("psi", "lookup", "chunk_count") > 0.25
        assert value("threshold", "lookup", "chunk_count") == 0.25
        for feature in ("chunk_count", "top_score"):
            assert value("active", "comparison", feature) == 0
            assert 0 < value("psi", "comparison", feature) < 0.25


async def test_ingest_stage_watches_a_pinned_slice_from_its_first_record(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """The restart case through the real broker: the pinned lookup slice sees only a broken
    retriever (no chunks) from the start and alarms; unpinned comparison collects its reference."""
    ref = stable_reference(51)
    baseline = tmp_path / "baseline.json"
    baseline.write_text(pin({}, {"kind": "test"}, "pin-51", {"lookup": RetrievalStats.of(ref)}).to_json())
    bs = broker.bootstrap_servers
    retrieval = {"reference_records": 400, "window_records": 400, "min_records": 200, "check_every": 20}
    settings = settings_for(
        bs,
        topic,
        None,
        pipeline={"role": "ingest"},
        alerts={"drift": {"baseline_file": str(baseline), "retrieval": retrieval}},
    )
    rng = random.Random(52)

    def message(query_type: str, chunks: int) -> tuple[bytes, bytes]:
        trace_id = uuid.UUID(int=rng.getrandbits(128)).hex
        items = [{"id": f"c{i}", "content": "text", "score": 0.7} for i in range(chunks)]
        body = {"trace_id": trace_id, "query": "q", "answer": "a", "query_type": query_type, "chunks": items}
        return trace_id.encode(), json.dumps(body).encode()

    async with running(settings) as sidecar:
        ingest = sidecar.ingest
        assert ingest is not None
        await produce(bs, topic, [message(qt, 0) for _ in range(300) for qt in ("lookup", "comparison")])
        await eventually(lambda: ingest.records_seen == 600, what="the broken records")

        def value(name: str, qt: str, **labels: str) -> float:
            return sample(sidecar, f"ragmon_{name}", query_type=qt, **labels)

        await eventually(
            lambda: value("retrieval_drift_active", "lookup", feature="chunk_count") == 1, what="alarm"
        )
        assert value("retrieval_drift_active", "comparison", feature="chunk_count") == 0
        assert not ingest.retrieval_drift.slices["comparison"].frozen  # still collecting
        assert sample(sidecar, "ragmon_drift_baseline_info", version="pin-51") == 1
