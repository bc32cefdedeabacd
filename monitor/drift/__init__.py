"""Drift detection: CUSUM detectors per (query type, metric) (`detector`), the pinned baselines
they start from (`baseline`), and the stage that feeds them every judgement of a slice once
(`stage`); label-free retrieval drift on every record, fed by the ingest stage (`retrieval`)."""

from monitor.drift.detector import (
    BAD_DIRECTION,
    RATES,
    Detector,
    DriftMetrics,
    DriftMonitor,
    DriftPolicy,
    Reference,
)
from monitor.drift.retrieval import RetrievalDriftMetrics, RetrievalDriftMonitor, RetrievalDriftPolicy

__all__ = [
    "BAD_DIRECTION",
    "RATES",
    "Detector",
    "DriftMetrics",
    "DriftMonitor",
    "DriftPolicy",
    "Reference",
    "RetrievalDriftMetrics",
    "RetrievalDriftMonitor",
    "RetrievalDriftPolicy",
]
