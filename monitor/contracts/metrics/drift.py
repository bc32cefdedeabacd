"""The drift stages' series: the judged-quality detectors' and the retrieval drift monitor's."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter, Gauge


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
