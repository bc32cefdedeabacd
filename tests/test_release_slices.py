"""Release slices end to end: the release a span's resource names (`service.version`) is carried
from the decoder through the samples topic to the results lines and the estimate counters'
`release` label. The counters' label stays within `slices.max_releases` (overflow in `other`)
however many versions the traffic names; results lines carry each record's own release,
however many came before (attribution follows deployments: the drift stage bounds its own slots)."""

from __future__ import annotations

import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from support import eventually, result_lines, running, settings_for

from monitor.contracts.slices import SlicesConfig
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import WorkloadConfig, generate, produce


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _release_labels(sidecar: object, name: str = "ragmon_estimate_samples_total") -> set[str]:
    registry = sidecar.metrics.registry  # type: ignore[attr-defined]
    return {s.labels["release"] for m in registry.collect() for s in m.samples if s.name == name}


async def test_two_releases_are_two_slices_in_results_and_estimates(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    old = generate(30, seed=5, config=WorkloadConfig(service_version="v1.4.1"))
    new = generate(30, seed=6, config=WorkloadConfig(service_version="v1.4.2"))
    bare = generate(10, seed=7)
    async with running(settings_for(bs, topic, results)) as sidecar:
        await produce(bs, topic, old.pairs() + new.pairs() + bare.pairs())
        await eventually(lambda: len(result_lines(results)) == 70, what="70 results lines", within=60)
        assert _release_labels(sidecar) == {"v1.4.1", "v1.4.2", "unknown"}
    by_id = {t.trace_id: "v1.4.1" for t in old.traces} | {t.trace_id: "v1.4.2" for t in new.traces}
    for line in result_lines(results):
        assert line["release"] == by_id.get(line["trace_id"], "unknown")


async def test_a_flood_of_versions_stays_within_the_bound(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """10,000 traces, each from its own build (`service.version`): at most `max_releases` label
    values and `other` in the metrics; each results line its own build."""
    n, cap = 10_000, 5
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    pairs = []
    workload = generate(n, seed=9, batch=1)
    for i, (key, value) in enumerate(workload.pairs()):
        req = ExportTraceServiceRequest.FromString(value)
        req.resource_spans[0].resource.attributes.append(
            KeyValue(key="service.version", value=AnyValue(string_value=f"build-{i}"))
        )
        pairs.append((key, req.SerializeToString()))
    settings = settings_for(bs, topic, results, slices={"max_releases": cap})
    async with running(settings) as sidecar:
        await produce(bs, topic, pairs)
        await eventually(lambda: _lines(results) >= n, what=f"{n} results lines", within=240)
        labels = _release_labels(sidecar)
    assert "other" in labels and len(labels) <= cap + 1, labels
    by_id = {t.trace_id: f"build-{i}" for i, t in enumerate(workload.traces)}
    lines = result_lines(results)
    assert [line["release"] for line in lines] == [by_id[line["trace_id"]] for line in lines]


async def test_results_lines_follow_deployments(broker: EmbeddedBroker, topic: str, tmp_path: Path) -> None:
    """30 releases deployed one after another with `max_releases: 5`: every record carries its
    release on the results lines (before: `other` from the 6th release on, so the drift stage's
    attribution could never name the release that broke things), while the estimate counters keep
    5 and `other`; the drift stage's first-seen gauge holds the 7 newest."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    per, cap = 10, 5
    pairs, by_id = [], {}
    t0 = time.time_ns() - 31 * 60 * 10**9
    for n in range(1, 31):  # 10 traces a release, each release starting after the last one ended
        cfg = WorkloadConfig(service_version=f"v{n}")
        w = generate(per, seed=n, config=cfg, start_ns=t0 + n * 60 * 10**9)
        pairs += w.pairs()
        by_id |= {t.trace_id: f"v{n}" for t in w.traces}
    settings = settings_for(bs, topic, results, slices={"max_releases": cap})
    async with running(settings) as sidecar:
        await produce(bs, topic, pairs)
        await eventually(lambda: _lines(results) >= 30 * per, what="300 results lines", within=120)
        labels = _release_labels(sidecar)
        newest = {f"v{n}" for n in range(24, 31)}
        gauge = "ragmon_release_first_seen_timestamp_seconds"
        await eventually(lambda: _release_labels(sidecar, gauge) == newest, what="the newest releases")
    # the first 5 the judge met (partitions interleave), then `other`
    assert "other" in labels and len(labels) == cap + 1 and labels < set(by_id.values()) | {"other"}
    lines = result_lines(results)
    assert [line["release"] for line in lines] == [by_id[line["trace_id"]] for line in lines]


def test_a_results_line_names_its_release_cleaned() -> None:
    free, listed = SlicesConfig(), SlicesConfig(releases=["v1"])
    assert [free.release_value(v) for v in (None, "  ", " v9 ", "x" * 64, "x" * 65)] == [
        "unknown", "unknown", "v9", "x" * 64, "other"
    ]  # fmt: skip
    assert [listed.release_value(v) for v in ("v1", "v2", None)] == ["v1", "other", "unknown"]
