"""Release slices end to end: the release a span's resource names (`service.version`) is carried
from the decoder through the samples topic to the results lines and the estimate counters'
`release` label, which stays within `slices.max_releases` (overflow in `other`) however many
versions the traffic names."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from support import eventually, result_lines, running, settings_for

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
    values and `other`, in the metrics and the results alike."""
    n, cap = 10_000, 5
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    pairs = []
    for i, (key, value) in enumerate(generate(n, seed=9).pairs()):
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
    written = [line["release"] for line in result_lines(results)]
    assert set(written) == labels and written.count("other") >= n - cap
