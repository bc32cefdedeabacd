"""Every Prometheus metric the sidecar exports, in one package: the names are a contract
(docs/contract.md, Metrics) that dashboards and alert rules rely on. A module per group of families
(`registry.Metrics` composes them); importers take the names from here.

Metrics live in a registry per sidecar instance rather than the process-global one, so tests and
the demo can run several pipelines in one process without label collisions.
"""

from monitor.contracts.metrics.budget import SeriesBudget
from monitor.contracts.metrics.drift import DriftMetrics, RetrievalDriftMetrics
from monitor.contracts.metrics.estimates import EstimateCounters
from monitor.contracts.metrics.exemplars import EXEMPLAR_MAX_AGE_SECONDS, Exemplars
from monitor.contracts.metrics.judge import JudgeMetrics
from monitor.contracts.metrics.names import PREFIX
from monitor.contracts.metrics.records import HistogramTally, RecordSeries, ServiceMetrics, ServiceSeries
from monitor.contracts.metrics.registry import Metrics
from monitor.contracts.metrics.review import ReviewMetrics

__all__ = [
    "EXEMPLAR_MAX_AGE_SECONDS",
    "PREFIX",
    "DriftMetrics",
    "EstimateCounters",
    "Exemplars",
    "HistogramTally",
    "JudgeMetrics",
    "Metrics",
    "RecordSeries",
    "RetrievalDriftMetrics",
    "ReviewMetrics",
    "SeriesBudget",
    "ServiceMetrics",
    "ServiceSeries",
]
