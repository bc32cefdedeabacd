"""The human review queue's series (`monitor.judge.review`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from monitor.contracts.metrics.names import PREFIX
from monitor.contracts.results import ReviewReason


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
