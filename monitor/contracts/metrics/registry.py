"""`Metrics`: the sidecar's registry, every family of docs/contract.md registered in one place
(in a fixed order, the order a scrape lists them) from the groups of this package."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from monitor.contracts.metrics.budget import SERIES_BUDGET_FAMILIES, SeriesBudget
from monitor.contracts.metrics.drift import DriftMetrics, RetrievalDriftMetrics
from monitor.contracts.metrics.estimates import EstimateCounters
from monitor.contracts.metrics.judge import JudgeMetrics
from monitor.contracts.metrics.names import PREFIX
from monitor.contracts.metrics.records import DURATION_BUCKETS, RecordSeries, ServiceMetrics, ServiceSeries
from monitor.contracts.metrics.review import ReviewMetrics
from monitor.contracts.model import Reject
from monitor.kafka.consumer import ConsumerMetrics

# Chunks per request: small integers, with room for wide retrievers.
CHUNK_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)
# Similarity / relevance scores are mostly in [0, 1]; BM25-style scores go above.
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
# Span end → record counted: dominated by the assembly grace period and consumer lag.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class Metrics:
    """The record-level metrics of docs/contract.md, bound to one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.records = Counter(
            f"{PREFIX}records",
            "RAG records assembled from production traffic",
            ["service", "query_type"],
            registry=r,
        )
        self.rejected = Counter(
            f"{PREFIX}rejected", "Inputs rejected or fields dropped, by reason", ["reason"], registry=r
        )
        self.unreadable_traces = Counter(
            f"{PREFIX}unreadable_traces",
            "Traces that look like RAG requests but could not be read, by reason and instrumentation scope",
            ["reason", "scope"],
            registry=r,
        )
        self.retrieved_chunks = Histogram(
            f"{PREFIX}retrieved_chunks",
            "Chunks retrieved per request",
            ["service", "query_type"],
            buckets=CHUNK_BUCKETS,
            registry=r,
        )
        self.retrieval_top_score = Histogram(
            f"{PREFIX}retrieval_top_score",
            "Score of the top-ranked retrieved chunk (requests whose retriever reports scores)",
            ["service", "query_type"],
            buckets=SCORE_BUCKETS,
            registry=r,
        )
        self.record_lag = Histogram(
            f"{PREFIX}record_lag_seconds",
            "Seconds from the root span's end to the record being counted",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.faithfulness_window = Gauge(
            f"{PREFIX}faithfulness_window_ratio",
            "Weighted faithfulness over the estimate window, with confidence bounds",
            ["query_type", "bound"],
            registry=r,
        )
        self.hallucination_window = Gauge(
            f"{PREFIX}hallucination_rate_window_ratio",
            "Weighted share of judged records hallucinated over the window, with confidence bounds",
            ["query_type", "bound"],
            registry=r,
        )
        self.window_samples = Gauge(
            f"{PREFIX}window_samples", "Judged records in the estimate window", ["query_type"], registry=r
        )
        self.replay_records = Counter(
            f"{PREFIX}replay_records",
            "Golden-replay records (rag.replay=true), excluded from production metrics",
            registry=r,
        )
        self.open_traces = Gauge(
            f"{PREFIX}open_traces", "Traces waiting for spans in the assembler", registry=r
        )
        # Every stage's consumer reports into these (`KafkaSource`), labelled by its topic.
        self.consumer = ConsumerMetrics(
            lag=Gauge(
                f"{PREFIX}consumer_lag_messages",
                "Messages between the group's committed offset and the partition's end, per owned partition",
                ["topic", "partition"],
                registry=r,
            ),
            restarts=Counter(
                f"{PREFIX}consumer_restarts",
                "Consumers restarted by the fetch watchdog (no fetch returned while assigned)",
                ["topic"],
                registry=r,
            ),
        )
        self.produce_errors = Counter(
            f"{PREFIX}produce_errors",
            "Failed produce attempts, retried with their source offsets held (samples, dead_letter)",
            ["stream"],
            registry=r,
        )
        self.produce_pending = Gauge(
            f"{PREFIX}produce_pending",
            "Messages produced and not yet acknowledged, their source offsets held",
            ["stream"],
            registry=r,
        )
        self.stage_stalled = Gauge(
            f"{PREFIX}stage_stalled",
            "1 while a stage has had work waiting and made no progress for pipeline.stall_seconds"
            " (computed at scrape time, so a blocked event loop shows too)",
            ["stage"],
            registry=r,
        )
        self.produce_dropped = Counter(
            f"{PREFIX}produce_dropped",
            "Messages given up because no retry can succeed (too_large: the broker refuses their size);"
            " logged, their source offsets released",
            ["stream", "reason"],
            registry=r,
        )
        self.bad_samples = Counter(
            f"{PREFIX}bad_samples",
            "Samples-topic messages the judge stage could not read (skipped, logged)",
            registry=r,
        )
        self.judge_circuit_open = Gauge(
            f"{PREFIX}judge_circuit_open",
            "1 while the judge circuit breaker holds judgements back after repeated outage errors",
            registry=r,
        )
        self.judge_retries = Counter(
            f"{PREFIX}judge_retries",
            "Judgements that failed for an outage (connection, 429, 5xx, 529, timeout) and were "
            "put back to judge again",
            registry=r,
        )
        self.inflight = Gauge(
            f"{PREFIX}inflight_judgements",
            "Samples read by the judge stage and not yet written (queued, judged or being written)",
            registry=r,
        )
        self.results_write_errors = Counter(
            f"{PREFIX}results_write_errors",
            "Failed writes of the results file (no_space, io_error: retried whole; torn_tail: a "
            "partial last line cut at open)",
            ["reason"],
            registry=r,
        )
        self.evaluation_events = Counter(
            f"{PREFIX}evaluation_events",
            "Verdicts sent to tracing UIs, by sink (logs: gen_ai.evaluation.result log events; span: "
            "rag.judgement spans; phoenix: span annotations) and outcome (exported, failed, dropped)",
            ["sink", "outcome"],
            registry=r,
        )
        self.budget_remaining = Gauge(
            f"{PREFIX}judge_budget_remaining",
            "Judge budget left in the current sliding window, per limit (calls, tokens, usd); "
            "this replica's share",
            ["limit"],
            registry=r,
        )
        red = ["service", "query_type", "release"]
        self.service = ServiceMetrics(
            duration=Histogram(
                f"{PREFIX}request_duration_seconds",
                "The RAG service's own request (root span) and stage (retriever, generator spans) "
                "durations, every record",
                [*red, "stage"],
                buckets=DURATION_BUCKETS,
                registry=r,
            ),
            requests=Counter(
                f"{PREFIX}requests", "The RAG service's requests (records), every one", red, registry=r
            ),
            errors=Counter(
                f"{PREFIX}request_errors",
                "The RAG service's requests whose root span status is ERROR",
                red,
                registry=r,
            ),
            tokens=Counter(
                f"{PREFIX}generator_tokens",
                "Tokens the RAG service's generator (LLM spans) reports, by type (input, output)",
                [*red, "type"],
                registry=r,
            ),
            cost=Counter(
                f"{PREFIX}generator_cost_usd",
                "USD of the generator tokens at metrics.service_prices (models with a price only)",
                red,
                registry=r,
            ),
            unpriced=Counter(
                f"{PREFIX}generator_unpriced",
                "Requests whose generator tokens are counted but not priced: no price for the model",
                red,
                registry=r,
            ),
        )
        self.judge = JudgeMetrics(r)
        self.estimates = EstimateCounters(r)
        qm = ["query_type", "metric"]
        self.drift = DriftMetrics(
            Gauge(f"{PREFIX}drift_statistic", "CUSUM statistic of the slice's detector", qm, registry=r),
            Gauge(f"{PREFIX}drift_threshold", "The detector's threshold h = ln(ARL0)", qm, registry=r),
            Gauge(f"{PREFIX}drift_active", "1 while the slice's drift alarm is raised", qm, registry=r),
            Counter(f"{PREFIX}drift_alarms", "Drift alarms raised", qm, registry=r),
            Gauge(
                f"{PREFIX}drift_baseline_info",
                "1 for the pinned drift baseline in use (version 'none': first records of each slice)",
                ["version"],
                registry=r,
            ),
            Counter(
                f"{PREFIX}drift_unreadable",
                "Results-topic messages the drift stage could not read (skipped, logged)",
                registry=r,
            ),
            Gauge(
                f"{PREFIX}release_first_seen_timestamp_seconds",
                "Time (Unix seconds) of the earliest sampled record of the release in the results topic "
                "this drift member reads (min over members: the release's first appearance)",
                ["release"],
                registry=r,
            ),
            Gauge(
                f"{PREFIX}drift_reference_records",
                "Judged records in the slice's drift reference so far (a pinned one's size; max over "
                "drift members: the slice's owner)",
                qm,
                registry=r,
            ),
            Gauge(
                f"{PREFIX}drift_reference_required_records",
                "Judged records the slice's reference freezes at (alerts.drift.reference_records; a "
                "pinned one's size)",
                qm,
                registry=r,
            ),
            Gauge(
                f"{PREFIX}drift_armed",
                "1 once the slice's reference is frozen and its drift detector runs (a pinned slice "
                "from start-up), 0 while the reference collects (max over drift members)",
                qm,
                registry=r,
            ),
        )
        qf = ["query_type", "feature"]
        self.retrieval_drift = RetrievalDriftMetrics(
            Gauge(
                f"{PREFIX}retrieval_drift_psi",
                "PSI of the slice's recent records against its frozen reference (chunk_count, top_score)",
                qf,
                registry=r,
            ),
            Gauge(
                f"{PREFIX}retrieval_drift_threshold",
                "PSI that raises the retrieval drift alarm",
                qf,
                registry=r,
            ),
            Gauge(
                f"{PREFIX}retrieval_drift_active",
                "1 while the slice's retrieval drift alarm is raised",
                qf,
                registry=r,
            ),
            Counter(f"{PREFIX}retrieval_drift_alarms", "Retrieval drift alarms raised", qf, registry=r),
        )
        self.review = ReviewMetrics(r)
        self.alerts_sent = Counter(
            f"{PREFIX}alerts_sent",
            "Alert notifications by sink (alertmanager, webhook) and outcome (ok, failed, dropped)",
            ["sink", "outcome"],
            registry=r,
        )
        self.series_budget_folded = Counter(
            f"{PREFIX}series_budget_folded",
            "Records counted under service and release other because their (service, query_type, "
            "release) label set was new past slices.max_label_sets, by family group (red: the "
            "service's RED series; estimate: the estimate counters)",
            ["family"],
            registry=r,
        )
        for family in SERIES_BUDGET_FAMILIES:
            self.series_budget_folded.labels(family=family)
        # Reasons are a closed enum: pre-create them so rate() works from the first scrape.
        for reason in Reject:
            self.rejected.labels(reason=reason.value)

    def series_budget(self, family: str, limit: int) -> SeriesBudget:
        """A budget of `limit` label sets for the group `family` (of `SERIES_BUDGET_FAMILIES`)."""
        return SeriesBudget(family, limit, self.series_budget_folded)

    def service_series(
        self, service: str, query_type: str, release: str, folded: Counter | None = None
    ) -> ServiceSeries:
        return ServiceSeries(self.service, service, query_type, release, folded)

    def record_series(self, service: str, query_type: str) -> RecordSeries:
        labels = {"service": service, "query_type": query_type}
        return RecordSeries(
            self.records.labels(**labels),
            self.retrieved_chunks.labels(**labels),
            self.retrieval_top_score.labels(**labels),
        )
