"""The series budget (issue 38, finding 4): each label is bounded, and their product is too.

21 services × 8 query types × 22 releases, each within `max_services` / `max_releases`, made 3,696
(service, query_type, release) label sets: 233,106 series and a 28 MB `/metrics` for the RED
series alone. Driven here through the ingest stage (the code that creates those series) and the
estimate counters the judge stage writes, with the default budget (`slices.max_label_sets`): each
family holds at most the budget plus one `other` set per query type, nothing is lost (every record
still counted, the folded ones in `ragmon_series_budget_folded_total`), and `/metrics` stays under
the figure docs/reliability.md states.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import pytest
from aiokafka import TopicPartition
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.app.config import load_settings
from monitor.app.sidecar import ingest_stage
from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Judgement, RagRecord
from monitor.contracts.slices import DEFAULT_QUERY_TYPES, SlicesConfig
from monitor.ingest.assemble import Finished
from monitor.kafka.offsets import MessageRef
from monitor.kafka.producer import KafkaOutput

TP = TopicPartition("spans", 0)
T0 = 1_800_000_000.0
SERVICES = [f"rag-service-{i:02d}" for i in range(21)]
RELEASES = [f"v1.{i}.0" for i in range(22)]
BUDGET = SlicesConfig().max_label_sets
RED = (
    "ragmon_request_duration_seconds",
    "ragmon_requests",
    "ragmon_request_errors",
    "ragmon_generator_tokens",
    "ragmon_generator_cost_usd",
    "ragmon_generator_unpriced",
)
# The whole exposition with every RED family at its budget (measured: 4.84 MB; 28 MB before).
MAX_EXPOSITION_BYTES = 5_000_000


def label_sets(exposition: str) -> tuple[dict[str, set[tuple[str, str, str]]], dict[str, float]]:
    """Per family, its (service, query_type, release) label sets; and the folded counter. (The
    text format's `_created` samples parse as families of their own: counted with theirs.)"""
    sets: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    folded: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            if "release" in s.labels:
                sets[family.name.removesuffix("_created")].add(
                    (s.labels["service"], s.labels["query_type"], s.labels["release"])
                )
            if s.name == "ragmon_series_budget_folded_total":
                folded[s.labels["family"]] = s.value
    return sets, folded


def requests_total(exposition: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(exposition)
        if family.name == "ragmon_requests"
        for s in family.samples
        if s.name == "ragmon_requests_total"
    )


async def test_service_query_type_release_beyond_the_budget_fold_to_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = load_settings(
        None,
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:9"},
            "slices": {"max_services": 21, "max_releases": 22},
            "judge": {"backend": "none"},
            "pipeline": {"role": "ingest"},
        },
    )
    stage = ingest_stage(settings, Metrics(), KafkaOutput(settings.kafka))  # never started
    combos = [(s, q, r) for r in RELEASES for s in SERVICES for q in DEFAULT_QUERY_TYPES]
    assert len(combos) == 3696
    records = 0
    caplog.set_level(logging.WARNING, "monitor.contracts.metrics")
    for rounds in range(2):  # the second round: every raw label set's decision cached
        finished = []
        for n, (service, qt, release) in enumerate(combos):
            tid = f"{rounds:04x}{n:028x}"
            record = RagRecord(
                tid,
                "s1",
                service,
                "what is the discharge of the Rhine?",
                qt,
                [],
                "2,330 cubic metres a second.",
                model="gpt-4o-mini",
                start_ns=int(T0 * 1e9),
                end_ns=int((T0 + 0.4) * 1e9),
                release=release,
                input_tokens=100,
                output_tokens=20,
            )
            finished.append(Finished(tid, record, None, [MessageRef(TP, n)]))
        stage._finish_all(finished, T0 + 1)
        stage._flush_counts()
        records += len(finished)

    exposition = generate_latest(stage.metrics.registry)
    text = exposition.decode()
    sets, folded = label_sets(text)
    assert set(sets) == set(RED)
    folds = {("other", q, "other") for q in DEFAULT_QUERY_TYPES}
    for family in RED:
        assert len(sets[family]) == BUDGET + len(folds), family
        assert folds <= sets[family]
    # Every record counted once, under its own set or its fold; the folds counted.
    assert requests_total(text) == records
    assert folded == {"red": records - 2 * BUDGET, "estimate": 0}
    assert len(exposition) < MAX_EXPOSITION_BYTES, len(exposition)
    warned = [r for r in caplog.records if "series budget" in r.getMessage()]
    assert len(warned) == 1 and "red" in warned[0].getMessage()


def test_the_estimate_counters_fold_past_the_budget_and_count_it() -> None:
    metrics = Metrics()
    budget = metrics.series_budget("estimate", 40)
    combos = [(s, q, r) for r in RELEASES[:5] for s in SERVICES[:4] for q in DEFAULT_QUERY_TYPES]
    for n, (service, qt, release) in enumerate(combos):
        j = Judgement(f"{n:032x}", qt, service, "lexical", "lexical", sampling_weight=20.0, faithfulness=0.5)
        metrics.estimates.observe(j, service, release, budget)
    sets, folded = label_sets(generate_latest(metrics.registry).decode())
    assert len(sets["ragmon_estimate_samples"]) == 40 + len(DEFAULT_QUERY_TYPES)
    assert folded == {"red": 0, "estimate": len(combos) - 40}
    weight = sum(
        s.value
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        if family.name == "ragmon_estimate_weight"
        for s in family.samples
        if s.name.endswith("_total")
    )
    assert weight == 20.0 * len(combos)  # nothing lost to the fold
