"""Armed slices are visible: every slice the labels allow is on /metrics from start-up with its
reference's records, what it needs and whether its detector runs; a slice that arms says so in the
log, with how long its reference took; a minute into the traffic one line names the slices not
armed yet and when they will be; a restart's rebuild sums it up instead of announcing each again."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import re
import shutil
import subprocess
import urllib.request
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support import eventually, running, sample, settings_for

import monitor.drift.arming as arming
from monitor.app.config import Settings
from monitor.contracts.metrics import Metrics
from monitor.contracts.slices import DEFAULT_QUERY_TYPES
from monitor.demo.workload import produce
from monitor.drift.arming import Arming, duration
from monitor.drift.config import DRIFT_METRICS, DriftPolicy
from monitor.drift.detector import Reference, StratifiedDetector
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig
from monitor.outputs.http import MetricsServer

SERIES = ("ragmon_drift_armed", "ragmon_drift_reference_records", "ragmon_drift_reference_required_records")
T0 = 1_790_000_000.0
_ids = itertools.count(1)


def line(query_type: str, i: int, hallucinated: bool = False) -> tuple[bytes, bytes]:
    """A judged results line (hallucination, refusal and false refusal decided; no faithfulness or
    relevance), its record `i` × 30 s after T0."""
    body: dict[str, Any] = {
        "trace_id": f"{next(_ids):032x}",
        "query_type": query_type,
        "answer": "Yes, it is covered.",
        "end": T0 + 30 * i,
        "sampling_weight": 20.0,
        "claims": [],
        "faithfulness": None,
        "hallucinated": hallucinated,
        "answer_admits_uncertainty": False,
        "false_refusal": False,
        "answer_relevance": None,
        "judge": {"outcome": "ok"},
    }
    return query_type.encode(), json.dumps(body).encode()


def lines(query_type: str, n: int) -> list[tuple[bytes, bytes]]:
    return [line(query_type, i, hallucinated=i % 20 == 0) for i in range(n)]


def exposition(port: int) -> tuple[bytes, dict[str, dict[tuple[str, str], float]]]:
    """/metrics as Prometheus reads it, and the three series by (query type, metric)."""
    body: bytes = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    out: dict[str, dict[tuple[str, str], float]] = {name: {} for name in SERIES}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name in out:
                out[s.name][(s.labels["query_type"], s.labels["metric"])] = s.value
    return body, out


def drift_only(bootstrap: str, topic: str, reference_records: int) -> Settings:
    kafka = {"session_timeout_ms": 6000}  # a restarted member waits for the old one's session
    drift = {"reference_records": reference_records, "min_records": 10}
    alerts = {"drift": drift}
    return settings_for(bootstrap, topic, None, pipeline={"role": "drift"}, alerts=alerts, kafka=kafka)


async def test_slices_show_their_arming_on_metrics_and_in_the_log(
    broker: Any, topic: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arming, "REPORT_AFTER", 1.0)  # "a minute into the traffic", shortened
    caplog.set_level(logging.INFO, logger="monitor.drift")
    bs = broker.bootstrap_servers
    settings = drift_only(bs, topic, 100)
    results = settings.results.topic
    assert results is not None
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [results], partitions=3)
    slices = {(qt, m) for qt in DEFAULT_QUERY_TYPES for m in DRIFT_METRICS}
    hall = {"query_type": "lookup", "metric": "hallucination"}
    comparison = {"query_type": "comparison", "metric": "hallucination"}

    async with running(settings) as sidecar:
        server = MetricsServer(sidecar.metrics.registry, "127.0.0.1", 0)
        port = server.start()
        try:
            # Before any traffic: every slice listed, none armed, each needing 100 records.
            _, before = await asyncio.to_thread(exposition, port)
            assert set(before["ragmon_drift_armed"]) == slices and len(slices) == 56
            assert set(before["ragmon_drift_armed"].values()) == {0.0}
            assert set(before["ragmon_drift_reference_records"].values()) == {0.0}
            assert set(before["ragmon_drift_reference_required_records"].values()) == {100.0}

            # Live traffic: lookup fills its reference, comparison gets 40 of its 100.
            await produce(bs, results, lines("lookup", 100) + lines("comparison", 40))
            await eventually(lambda: sample(sidecar, "ragmon_drift_armed", **hall) == 1, what="lookup armed")
            await eventually(
                lambda: sample(sidecar, "ragmon_drift_reference_records", **comparison) == 40,
                what="the records gauge at a housekeeping tick",
            )
            body, shown = await asyncio.to_thread(exposition, port)
        finally:
            server.stop()
        await eventually(
            lambda: any("not armed yet" in r.getMessage() for r in caplog.records), what="the report"
        )

    armed, records, required = (shown[name] for name in SERIES)
    decided = ("hallucination", "refusal", "false_refusal")  # what the lines carry
    for m in decided:
        assert (armed[("lookup", m)], records[("lookup", m)], required[("lookup", m)]) == (1, 100, 100), m
        assert (armed[("comparison", m)], records[("comparison", m)]) == (0, 40), m
    # A metric the lines never carry, and a query type without traffic: listed, at 0 of 100.
    assert (armed[("lookup", "faithfulness")], records[("lookup", "faithfulness")]) == (0, 0)
    assert (armed[("out_of_corpus", "hallucination")], records[("out_of_corpus", "hallucination")]) == (0, 0)
    assert sum(armed.values()) == len([m for m in DRIFT_METRICS if records[("lookup", m)] == 100])
    if shutil.which("promtool"):
        promtool = ["promtool", "check", "metrics"]
        check = await asyncio.to_thread(subprocess.run, promtool, input=body, capture_output=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr

    logged = [r.getMessage() for r in caplog.records if r.name.startswith("monitor.drift")]
    # One line for the record that armed lookup's slices; 99 records 30 s apart: 50 min.
    armings = [m for m in logged if m.startswith("drift: armed")]
    assert len(armings) == 1, armings
    assert "lookup/hallucination after 50 min" in armings[0]
    assert "frozen at 100 judged records" in armings[0]
    report = next(m for m in logged if "not armed yet" in m)
    n_armed = int(sum(armed.values()))
    assert report.startswith(f"drift: {n_armed} of 56 slices armed; a reference freezes at 100 judged")
    # comparison's 40 records came in within the window: an expected time at that rate.
    assert re.search(
        r"comparison 40 \(hallucination, refusal, false_refusal[^)]*; ~\d+ s at [\d.]+/s", report
    )
    assert re.search(r"no judged records yet \(.*\): .*\bout_of_corpus\b", report)
    assert "lookup/faithfulness" in report

    # A restart rebuilds the same state from the topic: summed up once, no arming line again.
    caplog.clear()
    async with running(settings) as second:
        await eventually(lambda: sample(second, "ragmon_drift_armed", **hall) == 1, what="rebuilt")
        await eventually(
            lambda: any("replay done" in r.getMessage() for r in caplog.records), what="the replay's end"
        )
    rebuilt = [r.getMessage() for r in caplog.records if r.name.startswith("monitor.drift")]
    assert not [m for m in rebuilt if m.startswith("drift: armed")], rebuilt
    done = [m for m in rebuilt if "replay done" in m]
    assert any(f"{n_armed} of 56 slices armed" in m for m in done), done


# -- the state itself, without a broker ------------------------------------------------------------


def gauges(metrics: Metrics) -> dict[str, dict[tuple[str, str], float]]:
    out: dict[str, dict[tuple[str, str], float]] = {name: {} for name in SERIES}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            if s.name in out:
                out[s.name][(s.labels["query_type"], s.labels["metric"])] = s.value
    return out


def test_a_pinned_slice_is_armed_from_start_up_and_a_moved_slice_goes_back_to_none() -> None:
    metrics = Metrics()
    policy = DriftPolicy(reference_records=200)
    pinned = {("lookup", "hallucination"): Reference.pinned(500, 500.0, 500.0, 25.0, 25.0)}
    state = Arming(policy, metrics.drift, ["lookup", "comparison"], pinned)
    armed, records, required = (gauges(metrics)[n] for n in SERIES)
    assert (armed[("lookup", "hallucination")], records[("lookup", "hallucination")]) == (1, 500)
    assert required[("lookup", "hallucination")] == 500  # a pin needs nothing more
    refusal = ("lookup", "refusal")
    assert (armed[refusal], records[refusal], required[refusal]) == (0, 0, 200)
    assert state.armed == 1 and state.slices == 2 * len(DRIFT_METRICS)

    # comparison collects, arms one slice, then moves to another member: back to the start-up state.
    detectors = {("comparison", "refusal"): StratifiedDetector("refusal", policy)}
    for i in range(200):
        detectors[("comparison", "refusal")].observe(1.0, float(i % 10 == 0))
        state.observed("comparison", [("refusal", 0.0)], T0 + i, detectors, live=True)
    assert gauges(metrics)["ragmon_drift_armed"][("comparison", "refusal")] == 1
    assert state.armed == 2 and "refusal" not in state.pending["comparison"]
    state.reset(["comparison"])
    shown = gauges(metrics)
    assert shown["ragmon_drift_armed"][("comparison", "refusal")] == 0
    assert shown["ragmon_drift_reference_records"][("comparison", "refusal")] == 0
    assert state.armed == 1


def test_the_report_waits_for_traffic_then_names_what_is_not_armed_and_when(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    policy = DriftPolicy(reference_records=1500)
    state = Arming(policy, metrics.drift, ["lookup", "out_of_corpus"])
    detectors: dict[tuple[str, str], Any] = {}
    for m in ("hallucination", "undecided"):
        detectors[("lookup", m)] = StratifiedDetector(m, policy)
    state.tick(0.0, 0, detectors, replaying=False)
    state.tick(500.0, 0, detectors, replaying=False)  # no traffic: the window slides
    assert state._reports == 0
    for d in detectors.values():
        for _ in range(120):
            d.observe(1.0, 0.0)
    state.tick(530.0, 120, detectors, replaying=False)
    assert state._reports == 0  # 30 s of traffic
    caplog.set_level(logging.INFO, logger="monitor.drift.arming")
    state.tick(560.0, 120, detectors, replaying=False)
    assert state._reports == 1
    # 120 records in the 60 s since the window started: 2/s, 1,380 to go: ~12 min.
    assert [r.getMessage() for r in caplog.records] == [
        "drift: 0 of 14 slices armed; a reference freezes at 1500 judged records; not armed yet, with "
        "the expected time at the last 60 s's judged-record rate: lookup 120 (hallucination, undecided; "
        "~12 min at 2/s); no judged records yet (armed only once their traffic is judged): "
        "lookup/faithfulness, lookup/refusal, lookup/false_refusal, lookup/relevance, "
        "lookup/context_relevance, out_of_corpus"
    ]
    assert gauges(metrics)["ragmon_drift_reference_records"][("lookup", "undecided")] == 120


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45 s"), (38 * 60, "38 min"), (3.2 * 3600, "3.2 h"), (2.1 * 86400, "2.1 d"), (math.inf, "never")],
)
def test_durations_read_as_a_person_says_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text
