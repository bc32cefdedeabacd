"""Drift detection: CUSUM detectors per (query type, metric) (`detector`), the pinned baselines
they start from (`baseline`), and the stage that feeds them every judgement of a slice once
(`stage`)."""

from monitor.drift.detector import (
    BAD_DIRECTION,
    RATES,
    Detector,
    DriftMetrics,
    DriftMonitor,
    DriftPolicy,
    Reference,
)

__all__ = ["BAD_DIRECTION", "RATES", "Detector", "DriftMetrics", "DriftMonitor", "DriftPolicy", "Reference"]
