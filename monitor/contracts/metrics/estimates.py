"""The weighted estimates' additive statistics, exported as counters for the recording rules."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from monitor.contracts.estimate import estimate_values, usable_weight
from monitor.contracts.metrics.budget import SeriesBudget
from monitor.contracts.metrics.names import PREFIX
from monitor.contracts.model import Judgement


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
