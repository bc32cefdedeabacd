"""Never in the way: with every verdict exporter pointed at a dead or hung receiver, the sidecar
still judges and commits everything at its own pace, each exporter's drop and failure counters
move on /metrics, and the stop stays bounded. Through the embedded broker and the offline judge."""

from __future__ import annotations

import time
from pathlib import Path

from support import eventually, eventually_committed, result_lines, running, sample, settings_for

from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce
from tests.outputs.verdict_cases import closed_port, hung_url

TRACES = 40


async def test_dead_and_hung_exporters_hold_neither_the_judge_nor_the_offsets(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    work = generate(TRACES, seed=9, mode="per_trace")
    results = tmp_path / "r.jsonl"
    with hung_url("/v1/logs") as logs, hung_url() as phoenix:
        settings = settings_for(
            broker.bootstrap_servers,
            topic,
            results,
            events={
                "mode": "both",
                "endpoint": logs,  # accepts, never answers
                "traces_endpoint": f"http://127.0.0.1:{closed_port()}/v1/traces",  # refuses
                "max_queue_size": 8,
                "timeout_seconds": 2,
                "export_interval_seconds": 0.05,
                "phoenix": {"url": phoenix, "max_queue_size": 8, "timeout_seconds": 2, "attempts": 2},
            },
        )
        async with running(settings) as sidecar:
            await produce(broker.bootstrap_servers, topic, [(m.key, m.value) for m in work.messages])
            await eventually(
                lambda: len(result_lines(results)) == TRACES, within=60, what="every trace judged"
            )
            await eventually_committed(broker.bootstrap_servers, topic, settings.kafka.group_id, TRACES)

            def counted(outcome: str) -> bool:
                return all(
                    sample(sidecar, "ragmon_evaluation_events_total", sink=sink, outcome=outcome) > 0
                    for sink in ("logs", "span", "phoenix")
                )

            await eventually(lambda: counted("dropped"), within=10, what="drops counted on /metrics")
            await eventually(lambda: counted("failed"), within=20, what="failures counted on /metrics")
            for sink in ("logs", "span", "phoenix"):
                assert sample(sidecar, "ragmon_evaluation_events_total", sink=sink, outcome="exported") == 0
            stopping = time.monotonic()
    assert time.monotonic() - stopping < 20  # the exporters' shutdown is bounded (5 s), not their timeouts
    assert all(line.get("claims") is not None for line in result_lines(results))
