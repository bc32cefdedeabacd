"""Drift detection: stratified detectors per (query type, metric) (`detector`), the pinned baselines
they start from (`baseline`), and the stage that feeds them every judgement of a slice once
(`stage`); label-free retrieval drift on every record, fed by the ingest stage (`retrieval`), its
references pinned in the same baseline file (`RetrievalDriftMonitor.from_baseline`)."""

from monitor.drift.config import DriftPolicy, RetrievalDriftPolicy
from monitor.drift.detector import (
    BAD_DIRECTION,
    RATES,
    Detector,
    DriftMonitor,
    Reference,
)
from monitor.drift.reference import BaselineFileError, DriftBaseline, load_baseline
from monitor.drift.retrieval import (
    RetrievalDriftMonitor,
    RetrievalReference,
)

__all__ = [
    "BAD_DIRECTION",
    "RATES",
    "BaselineFileError",
    "Detector",
    "DriftBaseline",
    "DriftMonitor",
    "DriftPolicy",
    "Reference",
    "RetrievalDriftMonitor",
    "RetrievalDriftPolicy",
    "RetrievalReference",
    "load_baseline",
]
