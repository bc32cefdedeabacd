"""The `ragmon_golden_*` gauges (docs/contract.md, Metrics), on a registry the caller passes in.

Labels stay bounded: `query_type` comes from validated golden rows (the allow-list) plus `all`
for the overall group, `metric` from a fixed set, `kind` from the closed set of change kinds.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from monitor.golden.change import CHANGE_KINDS
from monitor.golden.report import ReplayReport
from monitor.outputs.pushgateway import Group

__all__ = ["GAUGE_METRICS", "GoldenGauges", "last_change_gauge", "push_groups"]

PREFIX = "ragmon_"
# The `metric` label values docs/contract.md (Metrics) names for ragmon_golden_metric_ratio.
GAUGE_METRICS = (
    "recall_at_k",
    "precision_at_k",
    "mrr",
    "ndcg_at_k",
    "faithfulness",
    "refusal_accuracy",
    "citation_precision",
    "answer_relevance",
    "context_relevance",
    "correctness",
)


class GoldenGauges:
    """Results of the last complete golden replay."""

    def __init__(self, registry: CollectorRegistry, *, changes: bool = True) -> None:
        """`changes=False` leaves out the change gauge: a Pushgateway group replaced at every push
        would reset it to 0 at the next scheduled run, so a push sends it as a group of its own."""
        self.metric_ratio = Gauge(
            f"{PREFIX}golden_metric_ratio",
            "Golden-set metric of the last replay, per query type (query_type=all: overall)",
            ["query_type", "metric"],
            registry=registry,
        )
        self.metric_interval = Gauge(
            f"{PREFIX}golden_metric_interval_ratio",
            "Bounds of the golden metric's bootstrap confidence interval over rows (bound=lower|upper); "
            "absent when intervals are off or the group has too few rows",
            ["query_type", "metric", "bound"],
            registry=registry,
        )
        self.rows = Gauge(
            f"{PREFIX}golden_rows",
            "Golden rows of the last replay per query type (query_type=all: overall): the sample "
            "size behind ragmon_golden_metric_ratio",
            ["query_type"],
            registry=registry,
        )
        self.decided = Gauge(
            f"{PREFIX}golden_judge_decided_ratio",
            "Share of the golden rows the judge had to decide whose faithfulness it decided, per query "
            "type (query_type=all: overall); faithfulness rests on these only. Absent: none to decide",
            ["query_type"],
            registry=registry,
        )
        self.regression_active = Gauge(
            f"{PREFIX}golden_regression_active",
            "1 when the last golden replay found a regression on this metric (baseline drop or floor)",
            ["metric"],
            registry=registry,
        )
        self.unmeasured = Gauge(
            f"{PREFIX}golden_unmeasured",
            "1 when the last golden replay could not measure this gated metric: the judge failed on "
            "its rows (the run exits 2, not a pass)",
            ["metric"],
            registry=registry,
        )
        self.last_run = Gauge(
            f"{PREFIX}golden_last_run_timestamp_seconds",
            "Unix time of the last complete golden replay (a failed replay leaves it unchanged)",
            registry=registry,
        )
        self.last_change: Gauge | None = None
        if changes:
            self.last_change = last_change_gauge(registry)
            for kind in CHANGE_KINDS:  # every kind present from the start, at 0 like last_run
                self.last_change.labels(kind=kind)

    def publish(self, report: ReplayReport) -> None:
        """Replace the series with this report's (a query type gone from the file disappears)."""
        for gauge in (self.metric_ratio, self.metric_interval, self.rows, self.decided):
            gauge.clear()
        for group, stats in report.metrics.items():
            self.rows.labels(query_type=group).set(stats.get("rows", 0))
            if (share := stats.get("decided_share")) is not None:
                self.decided.labels(query_type=group).set(share)
            intervals = report.intervals.get(group, {})
            for metric in GAUGE_METRICS:
                value = stats.get(metric)
                if value is None:
                    continue
                self.metric_ratio.labels(query_type=group, metric=metric).set(value)
                interval = intervals.get(metric)
                if interval is not None:
                    self.metric_interval.labels(query_type=group, metric=metric, bound="lower").set(
                        interval.low
                    )
                    self.metric_interval.labels(query_type=group, metric=metric, bound="upper").set(
                        interval.high
                    )
        regressed = {r.metric for r in report.regressions}
        for metric in sorted(set(GAUGE_METRICS) | regressed):
            self.regression_active.labels(metric=metric).set(1.0 if metric in regressed else 0.0)
        missing = {u.metric for u in report.unmeasured}
        for metric in sorted(set(GAUGE_METRICS) | missing):
            self.unmeasured.labels(metric=metric).set(1.0 if metric in missing else 0.0)
        self.last_run.set(report.started_at + report.duration_s)
        if report.change is not None and self.last_change is not None:
            self.last_change.labels(kind=report.change.kind).set(report.change.at)


def last_change_gauge(registry: CollectorRegistry) -> Gauge:
    return Gauge(
        f"{PREFIX}golden_last_change_timestamp_seconds",
        "Unix time of the last change event (deploy, reindex, prompt, model, other) whose "
        "out-of-schedule golden replay completed; 0: none yet",
        ["kind"],
        registry=registry,
    )


def push_groups(report: ReplayReport) -> list[Group]:
    """The report's gauges as Pushgateway groups. The change gauge is a group of its own per kind,
    so that the next scheduled push (no change), which replaces the results' group, leaves it
    standing."""
    results = CollectorRegistry()
    GoldenGauges(results, changes=False).publish(report)
    groups: list[Group] = [({}, results)]
    if report.change is not None:
        change = CollectorRegistry()
        last_change_gauge(change).labels(kind=report.change.kind).set(report.change.at)
        groups.append(({"kind": report.change.kind}, change))
    return groups
