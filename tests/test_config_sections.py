"""Each stage is built from its own sections: what a user writes under a section reaches the stage
that uses it, and the stages and the Kafka plumbing load without the configuration module."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from support import python_child

from monitor.app.config import load_settings
from monitor.app.sidecar import drift_stage, ingest_stage, judge_stage
from monitor.contracts.metrics import Metrics
from monitor.ingest.config import IngestLimits
from monitor.judge.config import JudgeQueue
from monitor.kafka.consumer import SourceSpec
from monitor.kafka.producer import KafkaOutput


async def test_the_pipeline_keys_reach_the_stage_that_uses_them() -> None:
    s = load_settings(
        None,
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:9", "group_id": "shop", "max_poll_records": 500},
            "judge": {"backend": "none"},
            "pipeline": {
                "judge_group_id": "judges",
                "queue_size": 40,
                "queue_bytes": 1_000_000,
                "max_inflight_produces": 7,
                "max_message_bytes": 20_000,
                "sample_max_chunks": 3,
                "sample_max_chunk_chars": 200,
            },
        },
    )
    assert s.pipeline.ingest_limits() == IngestLimits("shop-samples", 7, 20_000, 3, 200)
    assert s.pipeline.judge_queue() == JudgeQueue("shop-samples", "judges", 40, 1_000_000, 20_000)

    metrics = Metrics(CollectorRegistry())
    output = KafkaOutput(s.kafka)  # never started
    ingest = ingest_stage(s, metrics, output)
    assert ingest.source.spec == SourceSpec("otlp_spans", "shop", "latest", 500)
    assert ingest.samples.topic == "shop-samples"
    judge = judge_stage(s, metrics, output, None)
    assert judge.source.spec == SourceSpec("shop-samples", "judges", "earliest", 20)  # half the queue
    drift = drift_stage(s, metrics, "shop-judgements", None)
    assert drift.source.spec == SourceSpec("shop-judgements", "shop-drift", "earliest", 500, replay=True)


_IMPORTS = """
import json, sys
for name in json.loads(sys.stdin.read()):
    __import__(name)
print(json.dumps(sorted(m for m in ("monitor.app.config", "monitor.app.sidecar") if m in sys.modules)))
"""


def test_stages_and_kafka_plumbing_load_without_the_configuration_module() -> None:
    """A stage is handed its sections by the wiring (monitor.app.sidecar): it never reaches for the
    whole configuration, so it is built and tested alone."""
    modules = [
        "monitor.ingest.stage",
        "monitor.judge.stage",
        "monitor.drift.stage",
        "monitor.kafka.client",
        "monitor.kafka.consumer",
        "monitor.kafka.producer",
    ]
    assert python_child(_IMPORTS, modules) == []


_GOLDEN_LOADED = """
import json, sys
import monitor.app.sidecar
print(json.dumps(sorted(m for m in sys.modules if m.startswith("monitor.golden."))))
"""


def test_a_sidecar_without_a_golden_set_loads_no_replay() -> None:
    """The `golden` section is part of every configuration, but its model must not bring the
    replay, its HTTP targets, reports and gauges into a sidecar that never replays (start-up time
    and memory of every replica)."""
    loaded = python_child(_GOLDEN_LOADED, None)
    assert "monitor.golden.config" in loaded
    heavy = {f"monitor.golden.{m}" for m in ("replay", "targets", "report", "gauges")}
    assert heavy.isdisjoint(loaded), loaded
