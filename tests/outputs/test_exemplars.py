"""Exemplars: the verdict counters and score histograms name a recent judged record's trace
(`{trace_id}`), failing verdicts first, and a real Prometheus with exemplar storage reads them off
a live sidecar's OpenMetrics exposition."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from support import eventually, prometheus_process, result_lines, running, sample, settings_for

from monitor.contracts.metrics import Exemplars, JudgeMetrics
from monitor.contracts.model import Claim, Judgement
from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.demo.workload import WorkloadConfig, generate, produce
from monitor.outputs.http import MetricsServer

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def judged(trace_id: str, supported: list[bool], *, answerable: bool = True) -> Judgement:
    return Judgement.from_verdicts(
        [Claim(f"claim {i}", s, "c1") for i, s in enumerate(supported)],
        answerable_from_context=answerable,
        answer_relevance=3,
        trace_id=trace_id,
        query_type="lookup",
        service="svc",
        backend="lexical",
        model="lexical",
    )


def exemplars(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], str]:
    """(sample name, labels) → the trace id of its exemplar, as a scrape asking for OpenMetrics
    reads them."""
    server = MetricsServer(registry, "127.0.0.1", 0)
    port = server.start()
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept": OPENMETRICS})
    finally:
        server.stop()
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.exemplar.labels["trace_id"]
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
        if s.exemplar is not None
    }


def test_a_passing_record_does_not_displace_a_recent_failing_exemplar() -> None:
    registry = CollectorRegistry()
    metrics = JudgeMetrics(registry, Exemplars(max_age=300))
    bad, good, later_good = "a" * 32, "b" * 32, "c" * 32
    metrics.observe_verdicts(judged(bad, [True, False]), "svc")  # faithfulness 0.5
    metrics.observe_verdicts(judged(good, [True, True]), "svc")
    shown = exemplars(registry)
    labels = (("check", "unanswerable"), ("judge", "lexical"), ("query_type", "lookup"), ("service", "svc"))
    judged_total = ("ragmon_judged_total", labels)
    assert shown[judged_total] == bad  # the passing record came later, and is not shown
    claims = ("ragmon_claims_total", labels[1:])
    assert shown[claims] == bad
    # In the histogram each bucket keeps its own: the failing score's bucket, and the passing
    # score's bucket (which had no exemplar yet).
    faith = {dict(k[1])["le"]: v for k, v in shown.items() if k[0] == "ragmon_faithfulness_score_bucket"}
    assert faith == {"0.5": bad, "1.0": good}
    # A new failing record always takes its series.
    metrics.observe_verdicts(judged(later_good, [False]), "svc")
    assert exemplars(registry)[judged_total] == later_good


def test_a_passing_record_replaces_an_exemplar_older_than_the_bound() -> None:
    registry = CollectorRegistry()
    metrics = JudgeMetrics(registry, Exemplars(max_age=0.05))
    metrics.observe_verdicts(judged("a" * 32, [False]), "svc")
    time.sleep(0.1)
    metrics.observe_verdicts(judged("b" * 32, [True]), "svc")
    labels = (("check", "unanswerable"), ("judge", "lexical"), ("query_type", "lookup"), ("service", "svc"))
    assert exemplars(registry)[("ragmon_judged_total", labels)] == "b" * 32


def test_an_id_too_long_for_an_exemplar_is_counted_without_one() -> None:
    registry = CollectorRegistry()
    metrics = JudgeMetrics(registry)
    metrics.observe_verdicts(judged("x" * 200, [False]), "svc")
    assert exemplars(registry) == {}  # and the scrape still parses
    labels = {"service": "svc", "query_type": "lookup", "judge": "lexical", "check": "unanswerable"}
    assert registry.get_sample_value("ragmon_judged_total", labels) == 1


def prometheus_config(path: Path, sidecar_port: int) -> Path:
    scrape = {"job_name": "rag-monitor", "static_configs": [{"targets": [f"127.0.0.1:{sidecar_port}"]}]}
    path.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [scrape]}))
    return path


def query_exemplars(prom: str, expr: str, start: float) -> list[dict[str, Any]]:
    r = httpx.get(
        f"{prom}/api/v1/query_exemplars",
        params={"query": expr, "start": start, "end": time.time() + 60},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return [e for series in r.json()["data"] for e in series["exemplars"]]


def failing_line(line: dict[str, Any]) -> bool:
    faithfulness = line.get("faithfulness")
    return (faithfulness is not None and faithfulness < 1) or line.get("hallucinated") is True


async def test_prometheus_reads_failing_trace_ids_off_a_live_sidecar(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    settings = settings_for(bs, topic, results)  # the lexical judge
    port = free_port()
    config = prometheus_config(tmp_path / "prometheus.yml", port)
    # Mostly good traffic: one answer in ten gains an invented sentence, one unanswerable query in
    # ten is answered anyway.
    work = generate(300, seed=91, config=WorkloadConfig(ungrounded_rate=0.1, hallucination_rate=0.1))
    start = time.time() - 5
    with prometheus_process(config, tmp_path / "tsdb", "--enable-feature=exemplar-storage") as prom:
        async with running(settings) as sidecar:
            server = MetricsServer(sidecar.metrics.registry, "127.0.0.1", port)
            server.start()
            try:
                await produce(bs, topic, work.pairs(), rate=100)
                await eventually(lambda: len(result_lines(results)) >= 300, within=60, what="300 results")
                judged_n = sum(
                    sample(
                        sidecar,
                        "ragmon_judged_total",
                        service="rag-demo",
                        query_type=qt,
                        check="unanswerable",
                        judge="lexical",
                    )
                    for qt in {t.query_type for t in work.traces}
                )
                assert judged_n >= 250
                expr = (
                    '{__name__=~"ragmon_(judged|claims|unanswerable|unanswerable_hallucinated)_total'
                    '|ragmon_(faithfulness|answer_relevance|context_relevance)_score_bucket"}'
                )
                found: list[dict[str, Any]] = []

                def scraped() -> bool:
                    found[:] = query_exemplars(prom, expr, start)
                    return len(found) >= 10

                await eventually(scraped, within=30, what="exemplars in Prometheus")
            finally:
                server.stop()
    lines = {line["trace_id"]: line for line in result_lines(results)}
    ids = [e["labels"]["trace_id"] for e in found]
    assert all(e["labels"].keys() == {"trace_id"} for e in found)
    assert set(ids) <= lines.keys()  # every exemplar is a judged record of the results output
    failing = [i for i in ids if failing_line(lines[i])]
    share_in_results = sum(map(failing_line, lines.values())) / len(lines)
    share = len(failing) / len(ids)
    print(
        f"exemplar round trip: {len(ids)} exemplars ({len(set(ids))} distinct traces), "
        f"{share:.0%} with a failing verdict (failing in the results: {share_in_results:.0%})"
    )
    assert failing, "no exemplar names a failing record"
    assert share > 2 * share_in_results  # failing records are preferred, not drawn at random
