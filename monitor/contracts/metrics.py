"""Every Prometheus metric the sidecar exports, in one place: the names are a contract (docs/contract.md,
Metrics) that dashboards and alert rules rely on.

Metrics live in a registry per sidecar instance rather than the process-global one, so tests and
the demo can run several pipelines in one process without label collisions.
"""

from __future__ import annotations

import logging
import time
from array import array
from bisect import bisect_left
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from monitor.contracts.estimate import estimate_values, usable_weight
from monitor.contracts.model import DECIDABLE_CHECKS, Judgement, RagRecord, Reject, Undecided, Verdict
from monitor.contracts.results import ReviewReason
from monitor.kafka.consumer import ConsumerMetrics

log = logging.getLogger(__name__)

PREFIX = "ragmon_"

# Chunks per request: small integers, with room for wide retrievers.
CHUNK_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)
# Similarity / relevance scores are mostly in [0, 1]; BM25-style scores go above.
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
# Span end → record counted: dominated by the assembly grace period and consumer lag.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
# The service's own request and stage durations: a retrieval takes milliseconds, a long generation
# a minute.
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
# `ragmon_request_duration_seconds`' stage label, in `ServiceSeries.values`' order.
RED_STAGES = ("request", "retrieval", "generation")
# The groups of families a `SeriesBudget` bounds: the RED series (`ServiceMetrics`), the
# estimate counters (`EstimateCounters`); `ragmon_series_budget_folded_total`'s `family`.
SERIES_BUDGET_FAMILIES = ("red", "estimate")
_RED_BOUNDS = [*DURATION_BUCKETS, float("inf")]  # never changed


class HistogramTally:
    """Observations of one Histogram child, counted in plain numbers and added to the child by
    `flush`: an observation is a bisect and two additions, without the child's per-value locks and
    bucket scan. The ingest stage flushes once per fetched batch, so a scrape sees every record at
    most one batch (well under a second) late. Values must not be NaN (scores and lags are
    finite).

    The C seam: `bounds` (read), `counts`, `sum` and `n` (added to as `observe` adds) are public
    because the ingest stage's compiled accounting (`monitor.ingest.accounting`) tallies through
    them; `flush` and the child stay this class's."""

    __slots__ = ("_child", "bounds", "counts", "n", "sum")

    def __init__(self, child: Histogram) -> None:
        self._child = child
        self.bounds = list(child._upper_bounds)  # ends with +Inf
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        # The first bucket whose upper bound is >= value, as `Histogram.observe` picks it.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.n += 1

    def flush(self) -> None:
        if not self.n:
            return
        counts = self.counts
        buckets = self._child._buckets
        for i, n in enumerate(counts):
            if n:
                buckets[i].inc(n)
                counts[i] = 0
        self._child._sum.inc(self.sum)
        self.sum = 0.0
        self.n = 0


class RecordSeries:
    """The record-level series of one (service, query_type), resolved once and counted locally
    (see `HistogramTally`) until `flush`. The C seam: `records`, `chunks` and `top_score`, which the
    ingest stage's compiled accounting counts into as `observe` does."""

    __slots__ = ("_records", "chunks", "records", "top_score")

    def __init__(self, records: Counter, chunks: Histogram, top_score: Histogram) -> None:
        self._records = records
        self.records = 0  # since the last flush
        self.chunks = HistogramTally(chunks)
        self.top_score = HistogramTally(top_score)

    def observe(self, n_chunks: int, top_score: float | None) -> None:
        """One record: counted, its chunk count tallied, and its top score when it has one."""
        self.records += 1
        self.chunks.observe(n_chunks)
        if top_score is not None:
            self.top_score.observe(top_score)

    def flush(self) -> None:
        if self.records:
            self._records.inc(self.records)
            self.records = 0
        self.chunks.flush()
        self.top_score.flush()


class Prices(Protocol):
    """USD per token of a generator model (`monitor.ingest.accounting.PriceBook`): (input,
    output), or None where the price table has no such model."""

    def price(self, model: str | None) -> tuple[float, float] | None: ...


@dataclass(frozen=True, slots=True)
class ServiceMetrics:
    """The service's own RED series (request and stage durations, requests and errors, generator
    tokens and USD), per service, query type and release; the ingest stage counts every record."""

    duration: Histogram  # labels: service, query_type, release, stage
    requests: Counter
    errors: Counter
    tokens: Counter  # labels: service, query_type, release, type (input | output)
    cost: Counter
    unpriced: Counter


class ServiceSeries:
    """The RED series of one (service, query_type, release), counted locally in `values` and added
    to the Prometheus children by `flush`, as `RecordSeries` does.

    `values` (floats: counts stay exact to 2**53) holds, per stage of `RED_STAGES`, the bucket
    counts (one per bound of `bounds`, which ends with +Inf) and the sum; then requests, errors,
    input tokens, output tokens, USD and unpriced records (`REQUESTS` on). The C seam: `bounds`
    (read) and `values` (added to as `observe` adds), which the ingest stage's compiled
    accounting counts into.

    `folded`: the series budget's counter child (`SeriesBudget.folded`) when this object counts
    the records whose own label set the budget folded into this one; `flush` adds their number to
    it, so the fold costs the hot path nothing per record."""

    __slots__ = ("_children", "_folded", "_zeros", "bounds", "values")

    def __init__(
        self,
        metrics: ServiceMetrics,
        service: str,
        query_type: str,
        release: str,
        folded: Counter | None = None,
    ) -> None:
        labels = {"service": service, "query_type": query_type, "release": release}
        self._folded = folded
        self._children = (
            tuple(metrics.duration.labels(stage=stage, **labels) for stage in RED_STAGES),
            metrics.requests.labels(**labels),
            metrics.errors.labels(**labels),
            metrics.tokens.labels(type="input", **labels),
            metrics.tokens.labels(type="output", **labels),
            metrics.cost.labels(**labels),
            metrics.unpriced.labels(**labels),
        )
        self.bounds = _RED_BOUNDS  # shared: the compiled accounting reads it once per batch
        self._zeros = array("d", [0.0]) * (len(RED_STAGES) * (len(self.bounds) + 1) + 6)
        self.values = array("d", self._zeros)

    def observe(self, record: RagRecord, prices: Prices) -> None:
        """One record: its request and stage durations (a negative or unknown one is not
        observed), its outcome, its generator tokens and their USD (or, for a model `prices` has
        no price for, one more unpriced record)."""
        v = self.values
        bounds = self.bounds
        step = len(bounds) + 1
        if record.start_ns:
            ns = record.end_ns - record.start_ns
            if ns >= 0:
                d = ns / 1e9
                v[bisect_left(bounds, d)] += 1
                v[step - 1] += d
        for at, ns in ((step, record.retrieval_ns), (2 * step, record.generation_ns)):
            if ns >= 0:
                d = ns / 1e9
                v[at + bisect_left(bounds, d)] += 1
                v[at + step - 1] += d
        r = 3 * step
        v[r] += 1
        if record.error:
            v[r + 1] += 1
        tin, tout = record.input_tokens, record.output_tokens
        # The decoder gives counts in [0, 10M]; a negative one (a record built otherwise) is none.
        if tin is not None and tin < 0:
            tin = None
        if tout is not None and tout < 0:
            tout = None
        if tin is None and tout is None:
            return
        if tin is not None:
            v[r + 2] += tin
        if tout is not None:
            v[r + 3] += tout
        price = prices.price(record.model)
        if price is None:
            v[r + 5] += 1
        else:
            v[r + 4] += (tin or 0) * price[0] + (tout or 0) * price[1]

    def flush(self) -> None:
        v = self.values
        step = len(self.bounds) + 1
        r = 3 * step
        if not v[r]:
            return
        stages, requests, errors, tokens_in, tokens_out, cost, unpriced = self._children
        for k, hist in enumerate(stages):
            at = k * step
            if any(v[at : at + step]):
                buckets = hist._buckets
                for i in range(step - 1):
                    if v[at + i]:
                        buckets[i].inc(v[at + i])
                hist._sum.inc(v[at + step - 1])
        requests.inc(v[r])
        if self._folded is not None:
            self._folded.inc(v[r])
        for child, x in ((errors, v[r + 1]), (tokens_in, v[r + 2]), (tokens_out, v[r + 3]), (cost, v[r + 4])):
            if x:
                child.inc(x)
        if v[r + 5]:
            unpriced.inc(v[r + 5])
        v[:] = self._zeros


# A (service, query_type, release) label set.
LabelSet = tuple[str, str, str]
FOLDED = "other"  # what `service` and `release` fold to past a budget


class SeriesBudget:
    """A bound on the (service, query_type, release) label sets of a group of metric families that
    share them. Each label is bounded on its own (`monitor.contracts.slices`), their product is not: 21
    services × 8 query types × 22 releases are 3,696 sets, 28 MB of `/metrics` for the RED series
    alone. The first `limit` sets asked for are admitted; past that a new set is folded to
    (service, query_type, other) where that set is admitted already, else to (other, query_type,
    other) — the query type is kept, the dimension the quality alerts slice by. So a group holds at
    most `limit` + (query types) sets, whatever the traffic. A set lookup once a set is known: the
    ingest stage asks once per raw label set and caches the answer, the judge's estimates ask per
    judged record (beside six counter updates a metric); `folded` (the group's child of
    `ragmon_series_budget_folded_total`) is the callers' to count folded records in; the first
    fold is logged once."""

    __slots__ = ("_sets", "family", "folded", "full", "limit")

    def __init__(self, family: str, limit: int, folded: Counter) -> None:
        self.family = family
        self.limit = limit
        self.folded = folded.labels(family=family)
        self._sets: set[LabelSet] = set()  # admitted; never more than `limit`
        self.full = False  # a set has been folded (logged)

    def admit(self, labels: LabelSet) -> LabelSet:
        """The label set to count `labels` under: itself, or its fold once the budget is spent."""
        sets = self._sets
        if labels in sets:
            return labels
        if len(sets) < self.limit:
            sets.add(labels)
            return labels
        if not self.full:
            self.full = True
            log.warning(
                "series budget: the %s metrics hold slices.max_label_sets=%d (service, query_type, "
                "release) label sets; new ones are counted under service and release %r "
                "(ragmon_series_budget_folded_total{family=%r})",
                self.family,
                self.limit,
                FOLDED,
                self.family,
            )
        service, query_type, _ = labels
        near = (service, query_type, FOLDED)
        return near if near in sets else (FOLDED, query_type, FOLDED)


@dataclass(frozen=True, slots=True)
class DriftMetrics:
    """The `ragmon_drift_*` series the drift stage's detectors set."""

    statistic: Gauge
    threshold: Gauge
    active: Gauge
    alarms: Counter
    baseline: Gauge  # labels: version
    unreadable: Counter
    release_first_seen: Gauge  # labels: release
    # Whether each slice's detector runs yet (`monitor.drift.arming`), for every slice from start-up.
    reference_records: Gauge
    reference_required: Gauge
    armed: Gauge


@dataclass(frozen=True, slots=True)
class RetrievalDriftMetrics:
    """The `ragmon_retrieval_drift_*` series the ingest stage's retrieval drift monitor sets."""

    psi: Gauge  # labels: query_type, feature
    threshold: Gauge
    active: Gauge
    alarms: Counter


class ReviewMetrics:
    """The review queue's series (`monitor.judge.review`), every label value present from start."""

    DROP_REASONS = ("duplicate", "rate_limited", "queue_full", "queue_bytes")

    def __init__(self, r: CollectorRegistry) -> None:
        self.queued = Counter(
            f"{PREFIX}review_queued",
            "Records queued for human review, by reason (a record queued for two reasons counts under both)",
            ["reason"],
            registry=r,
        )
        self.dropped = Counter(
            f"{PREFIX}review_dropped",
            "Records selected for review and not queued (duplicate: trace already queued; rate_limited:"
            " review.max_per_hour; queue_full, queue_bytes: the review sinks are behind, queue_size lines"
            " or queue_max_bytes bytes wait); uniform=true: of the"
            " uniform share",
            ["reason", "uniform"],
            registry=r,
        )
        self.write_errors = Counter(
            f"{PREFIX}review_write_errors",
            "Failed writes of the review file (no_space, io_error: retried; torn_tail: cut at open)",
            ["reason"],
            registry=r,
        )
        for reason in ReviewReason:
            self.queued.labels(reason=reason.value)
        for drop in self.DROP_REASONS:
            for uniform in ("true", "false"):
                self.dropped.labels(reason=drop, uniform=uniform)


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


# Judge latency: the lexical judge answers in microseconds, LLM judges in seconds.
JUDGE_LATENCY_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
UNIT_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
RELEVANCE_BUCKETS = (1.0, 2.0, 3.0)
CONTEXT_RELEVANCE_BUCKETS = (1.0, 1.5, 2.0, 2.5, 3.0)


# A passing record's trace id replaces a series' exemplar only once it is this old: a failing one
# stays the example a dashboard links to for a while, however much good traffic follows it.
EXEMPLAR_MAX_AGE_SECONDS = 300.0
# OpenMetrics caps an exemplar's label set at 128 UTF-8 characters: `trace_id` and a W3C id (32
# hex) fit; an id longer than this is not one, and gets no exemplar rather than a refused scrape.
MAX_EXEMPLAR_TRACE_ID = 64


def failing(j: Judgement) -> bool:
    """A verdict worth showing first: the answer asserts something its context does not support
    (faithfulness below 1) or answers an unanswerable query (hallucinated)."""
    return (j.faithfulness is not None and j.faithfulness < 1.0) or j.hallucinated is True


class Exemplars:
    """Which observation sets its series' OpenMetrics exemplar (`{trace_id}`): a failing record's
    always, a passing one's only where the series has none yet or its exemplar is older than
    `max_age` seconds, so a scrape shows a recent bad trace where there is one. A series is a
    counter child, or a histogram child's bucket (each bucket keeps its own exemplar). Per judged
    record, on the event loop: a dict look-up per series."""

    __slots__ = ("_max_age", "_set_at")

    def __init__(self, max_age: float = EXEMPLAR_MAX_AGE_SECONDS) -> None:
        self._max_age = max_age
        self._set_at: dict[Hashable, float] = {}  # series → when its exemplar was set (monotonic)

    def take(self, series: Hashable, failing: bool, now: float) -> bool:
        """Whether this observation's exemplar replaces the series' one (and note it if so)."""
        if not failing:
            last = self._set_at.get(series)
            if last is not None and now - last < self._max_age:
                return False
        self._set_at[series] = now
        return True


class JudgeMetrics:
    """Judgement-level metrics of docs/contract.md: what the judge said, and what judging cost.

    Verdict series carry `judge` (the backend: lexical, anthropic, openai; bounded by the factory),
    so a change of backend shows as new series instead of silently changing what one means. They
    are unweighted counts of judged records; the weighted estimates are `EstimateCounters`'.
    """

    def __init__(self, registry: CollectorRegistry, exemplars: Exemplars | None = None) -> None:
        r = registry
        self.exemplars = exemplars if exemplars is not None else Exemplars()
        sq = ["service", "query_type"]
        sqj = [*sq, "judge"]
        self.judged = Counter(f"{PREFIX}judged", "Records judged, per check", [*sqj, "check"], registry=r)
        self.skipped = Counter(
            f"{PREFIX}judge_skipped", "Sampled records not judged, by reason", [*sq, "reason"], registry=r
        )
        self.claims = Counter(f"{PREFIX}claims", "Atomic claims extracted from answers", sqj, registry=r)
        self.claims_supported = Counter(
            f"{PREFIX}claims_supported",
            "Claims supported by the retrieved chunks (quotes checked)",
            sqj,
            registry=r,
        )
        self.claims_contradicted = Counter(
            f"{PREFIX}claims_contradicted", "Claims the retrieved chunks contradict", sqj, registry=r
        )
        self.claims_uncertain = Counter(
            f"{PREFIX}claims_uncertain",
            "Claims the judge could not decide (left out of faithfulness, neither supported nor not)",
            sqj,
            registry=r,
        )
        # Per check (faithfulness, unanswerable), whether the judge decided it: the decided share,
        # decided / (decided + undecided), is what every score of the check rests on. Counters,
        # not a ratio gauge, so that replicas and restarts add up (docs/contract.md gives the PromQL).
        self.decided = Counter(
            f"{PREFIX}judge_decided",
            "Judged records whose check (faithfulness, unanswerable) the judge decided",
            ["judge", "query_type", "check"],
            registry=r,
        )
        self.undecided = Counter(
            f"{PREFIX}judge_undecided",
            "Judged records whose check the judge could not decide (left out of its scores), by reason "
            "(no_claim, uncertain, unplaced, yes_no, answerability)",
            ["judge", "query_type", "check", "reason"],
            registry=r,
        )
        self._decision_series: set[tuple[str, str]] = set()
        self.unanswerable = Counter(
            f"{PREFIX}unanswerable",
            "Judged records whose context could not answer the query",
            sqj,
            registry=r,
        )
        self.hallucinated = Counter(
            f"{PREFIX}unanswerable_hallucinated",
            "Unanswerable records answered anyway instead of admitting uncertainty",
            sqj,
            registry=r,
        )
        self.refusals = Counter(
            f"{PREFIX}refusals",
            "Answers that give no answer (refusals; hedged answers apart)",
            sqj,
            registry=r,
        )
        self.hedges = Counter(
            f"{PREFIX}hedges", "Answers that answer but admit uncertainty about part of it", sqj, registry=r
        )
        self.false_refusals = Counter(
            f"{PREFIX}false_refusals", "Refusals although the context held the answer", sqj, registry=r
        )
        self.faithfulness = Histogram(
            f"{PREFIX}faithfulness_score",
            "Supported claims / claims, per judged answer that makes claims",
            sqj,
            buckets=UNIT_BUCKETS,
            registry=r,
        )
        self.relevance = Histogram(
            f"{PREFIX}answer_relevance_score",
            "Answer relevance, 1-3",
            sqj,
            buckets=RELEVANCE_BUCKETS,
            registry=r,
        )
        self.context_relevance = Histogram(
            f"{PREFIX}context_relevance_score",
            "Mean relevance (1-3) of a judged record's retrieved chunks",
            sqj,
            buckets=CONTEXT_RELEVANCE_BUCKETS,
            registry=r,
        )
        self.evidence_mismatch = Counter(
            f"{PREFIX}judge_evidence_mismatch",
            "Claims a judge called supported or contradicted whose quoted evidence failed the check "
            "(reason: no_quote, not_in_chunk, numbers, unrelated); scored as not in context",
            [*sqj, "reason"],
            registry=r,
        )
        self.coverage_gaps = Counter(
            f"{PREFIX}judge_coverage_gaps",
            "Verdicts whose claims left out part of the answer, by outcome of the one repair "
            "(repaired; unrepaired: the left-out sentences scored as not in context)",
            [*sqj, "outcome"],
            registry=r,
        )
        self.citations = Counter(
            f"{PREFIX}citations",
            "Citations in judged answers (a cited chunk in an answer sentence), by verdict: supported "
            "(the chunk supports a claim of that sentence), unsupported, unresolved (names no "
            "retrieved chunk), unchecked (no decided claim or a chunk the judge did not see)",
            [*sqj, "verdict"],
            registry=r,
        )
        self.self_evaluations = Counter(
            f"{PREFIX}judge_self_evaluations",
            "Judged records whose judge model is the model that generated the answer (a model "
            "grading itself is biased)",
            ["service", "judge"],
            registry=r,
        )
        self.requests = Counter(
            f"{PREFIX}judge_requests",
            "Judgements attempted, by outcome",
            ["backend", "model", "outcome"],
            registry=r,
        )
        self.tokens = Counter(f"{PREFIX}judge_tokens", "Judge tokens billed", ["model", "type"], registry=r)
        self.cost = Counter(
            f"{PREFIX}judge_cost_usd", "Judge cost from the price table", ["model"], registry=r
        )
        self.latency = Histogram(
            f"{PREFIX}judge_latency_seconds",
            "Judge service time per judgement",
            ["backend"],
            buckets=JUDGE_LATENCY_BUCKETS,
            registry=r,
        )
        self.disagreements = Counter(
            f"{PREFIX}judge_disagreements",
            "Checks on which two judgements of the same record disagreed (repeat_fraction)",
            ["check"],
            registry=r,
        )
        self.repeats = Counter(f"{PREFIX}judge_repeats", "Records judged a second time", registry=r)
        # Kappa against human labels: `monitor.judge.calibrate.CalibrationGauges`, written by
        # `calibrate --metrics-file`, never by the sidecar.

    def observe_decisions(self, j: Judgement) -> None:
        """Per decidable check, decided or undecided (with its reason); a check that does not
        apply (faithfulness of a refusal) is neither. Every reason's series of a (judge, query
        type) is created with its first judgement, so a ratio over them exists from then on."""
        key = (j.backend, j.query_type)
        if key not in self._decision_series:
            self._decision_series.add(key)
            for check in DECIDABLE_CHECKS:
                self.decided.labels(judge=j.backend, query_type=j.query_type, check=check)
                for reason in Undecided:
                    self.undecided.labels(
                        judge=j.backend, query_type=j.query_type, check=check, reason=reason.value
                    )
        undecided = j.undecided
        given = j.checks()
        for check in DECIDABLE_CHECKS:
            why = undecided.get(check)
            if why is not None:
                self.undecided.labels(
                    judge=j.backend, query_type=j.query_type, check=check, reason=why.value
                ).inc()
            elif check in given:
                self.decided.labels(judge=j.backend, query_type=j.query_type, check=check).inc()

    def observe_cost(self, j: Judgement) -> None:
        """What a judgement cost, whatever it was for (production or golden replay) and however
        it ended: its outcome, latency, tokens, USD."""
        self.requests.labels(backend=j.backend, model=j.model, outcome=j.outcome.value).inc()
        self.latency.labels(backend=j.backend).observe(j.latency_s)
        for kind, n in j.tokens.as_dict().items():
            if n:
                self.tokens.labels(model=j.model, type=kind).inc(n)
        if j.cost_usd:
            self.cost.labels(model=j.model).inc(j.cost_usd)

    def observe_verdicts(self, j: Judgement, service: str) -> None:
        """What the judge said about production traffic; only for a successful judgement (never
        averaged in as zeros when the judge failed), and never for golden replays, which would
        skew production's rates."""
        if not j.ok:
            return
        labels = {"service": service, "query_type": j.query_type, "judge": j.backend}
        tid = j.trace_id
        example = {"trace_id": tid} if 0 < len(tid) <= MAX_EXEMPLAR_TRACE_ID else None
        bad = failing(j)
        now = time.monotonic()
        take = self.exemplars.take

        def inc(counter: Counter, n: float = 1, **extra: str) -> None:
            """A verdict counter's increment, with this record as its exemplar where it wins."""
            child = counter.labels(**labels, **extra)
            child.inc(n, example if example and n and take(child, bad, now) else None)

        def observe(histogram: Histogram, value: float) -> None:
            child = histogram.labels(**labels)
            bucket = (child, bisect_left(child._upper_bounds, value))
            child.observe(value, example if example and take(bucket, bad, now) else None)

        for check in j.checks():
            inc(self.judged, check=check)
        self.observe_decisions(j)
        if j.claims:
            inc(self.claims, len(j.claims))
            inc(self.claims_supported, sum(c.supported for c in j.claims))
            contradicted = sum(c.verdict is Verdict.CONTRADICTED for c in j.claims)
            if contradicted:
                inc(self.claims_contradicted, contradicted)
            uncertain = sum(c.verdict is Verdict.UNCERTAIN for c in j.claims)
            if uncertain:
                inc(self.claims_uncertain, uncertain)
        for reason in j.evidence_failures():
            self.evidence_mismatch.labels(reason=reason, **labels).inc()
        if j.coverage_repair is not None:
            self.coverage_gaps.labels(outcome=j.coverage_repair, **labels).inc()
        if j.faithfulness is not None:
            observe(self.faithfulness, j.faithfulness)
        if j.answerable_from_context is False:
            inc(self.unanswerable)
            if j.hallucinated:
                inc(self.hallucinated)
        if j.refuses:
            inc(self.refusals)
            if j.false_refusal:
                inc(self.false_refusals)
        if j.hedges:
            inc(self.hedges)
        if j.answer_relevance is not None:
            observe(self.relevance, j.answer_relevance)
        if j.context_relevance is not None:
            observe(self.context_relevance, j.context_relevance)
        if j.citations is not None:
            for verdict, n in j.citations.counts().items():
                if n:
                    self.citations.labels(verdict=verdict, **labels).inc(n)
        if j.self_judged:
            self.self_evaluations.labels(service=service, judge=j.backend).inc()


class EstimateCounters:
    """The additive sufficient statistics of each weighted (Hájek) estimate, per
    {service,query_type,release,metric,judge}: n, Σw, Σw·y, Σw², Σw²·y, Σw²·y² (w = 1/p). As counters they
    add up exactly across replicas and over any window, so the recording rules in
    deploy/prometheus/rules.yml compute the group's estimate, interval and effective sample size —
    which no combination of per-replica ratio gauges can. `judge` is kept by the rules: two
    backends' verdicts are never pooled into one estimate. `release` is bounded by the stages
    (`slices.releases` / `max_releases`), and the (service, query_type, release) sets by the
    caller's `SeriesBudget`: series ≤ (budget + query types) × metrics × judges."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        labels = ["service", "query_type", "release", "metric", "judge"]

        def counter(name: str, what: str) -> Counter:
            return Counter(
                f"{PREFIX}estimate_{name}",
                f"Weighted-estimate statistic {what} (w = 1/p)",
                labels,
                registry=r,
            )

        self.samples = counter("samples", "n: judged answers with a value")
        self.weight = counter("weight", "Σw")
        self.weighted_value = counter("weighted_value", "Σw·y")
        self.weight_squared = counter("weight_squared", "Σw²")
        self.weight_squared_value = counter("weight_squared_value", "Σw²·y")
        self.weight_squared_value_squared = counter("weight_squared_value_squared", "Σw²·y²")

    def observe(
        self, j: Judgement, service: str, release: str = "unknown", budget: SeriesBudget | None = None
    ) -> None:
        """One judged record's values; `budget`: the bound its label set is admitted to, or folded
        (and counted) past."""
        w = j.sampling_weight
        if not usable_weight(w) or not (values := estimate_values(j)):
            return
        if budget is not None:
            asked = (service, j.query_type, release)
            got = budget.admit(asked)
            if got != asked:
                service, _, release = got
                budget.folded.inc()
        w2 = w * w
        for metric, y in values:
            labels = {
                "service": service,
                "query_type": j.query_type,
                "release": release,
                "metric": metric,
                "judge": j.backend,
            }
            self.samples.labels(**labels).inc()
            self.weight.labels(**labels).inc(w)
            self.weighted_value.labels(**labels).inc(w * y)
            self.weight_squared.labels(**labels).inc(w2)
            self.weight_squared_value.labels(**labels).inc(w2 * y)
            self.weight_squared_value_squared.labels(**labels).inc(w2 * y * y)
