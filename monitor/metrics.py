"""Every Prometheus metric the sidecar exports, in one place: the names are a contract (design.md)
that dashboards and alert rules rely on.

Metrics live in a registry per sidecar instance rather than the process-global one, so tests and
the demo can run several pipelines in one process without label collisions.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from monitor.model import Reject

PREFIX = "ragmon_"

# Chunks per request: small integers, with room for wide retrievers.
CHUNK_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)
# Similarity / relevance scores are mostly in [0, 1]; BM25-style scores go above.
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
# Span end → record counted: dominated by the assembly grace period and consumer lag.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


@dataclass(frozen=True, slots=True)
class RecordSeries:
    """The record-level children of one (service, query_type), resolved once."""

    records: Counter
    chunks: Histogram
    top_score: Histogram


class Metrics:
    """The record-level metrics of design.md, bound to one registry."""

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
        self.open_traces = Gauge(
            f"{PREFIX}open_traces", "Traces waiting for spans in the assembler", registry=r
        )
        self.consumer_lag = Gauge(
            f"{PREFIX}consumer_lag_messages",
            "Messages between the consumer position and the partition's high watermark",
            ["partition"],
            registry=r,
        )
        self.inflight = Gauge(
            f"{PREFIX}inflight_judgements", "Sampled records queued or being judged and written", registry=r
        )
        # Reasons are a closed enum: pre-create them so rate() works from the first scrape.
        for reason in Reject:
            self.rejected.labels(reason=reason.value)

    def record_series(self, service: str, query_type: str) -> RecordSeries:
        labels = {"service": service, "query_type": query_type}
        return RecordSeries(
            self.records.labels(**labels),
            self.retrieved_chunks.labels(**labels),
            self.retrieval_top_score.labels(**labels),
        )
