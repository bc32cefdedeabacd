"""The drift detectors' config sections: `alerts.drift` (CUSUM on judgements), its `retrieval`
part (label-free drift on every record), and the `alerts` section that holds them beside the
sinks their alerts go to."""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from monitor.contracts.estimate import ESTIMATE_METRICS
from monitor.outputs.config import AlertSinksConfig


class RetrievalDriftPolicy(BaseModel):
    """The `alerts.drift.retrieval` config section."""

    model_config = ConfigDict(extra="forbid")

    reference_records: int = Field(
        2000, ge=10, description="records of a slice (per ingest replica) that make its frozen reference"
    )
    window_records: int = Field(
        1000,
        ge=10,
        description="recent records compared with the reference; PSI on stable traffic is about "
        "(bins - 1) x (1/reference_records + 1/window_records): keep that well below threshold",
    )
    min_records: int = Field(
        500, ge=1, description="records in the window (after the reference) before any alarm"
    )
    check_every: int = Field(
        100, ge=1, description="records of a slice between PSI computations (never per record)"
    )
    threshold: float = Field(0.25, gt=0, description="PSI that raises the alarm (0.25: a major shift)")
    release: float = Field(0.1, ge=0, description="PSI at or below which a raised alarm clears")

    def model_post_init(self, _context: object) -> None:
        if self.release >= self.threshold:
            raise ValueError(f"release ({self.release}) must be below threshold ({self.threshold})")
        if self.min_records > self.window_records:
            raise ValueError(
                f"min_records ({self.min_records}) cannot exceed window_records ({self.window_records})"
            )


MIN_EFFECT = {
    "faithfulness": 0.03,
    "hallucination": 0.05,
    "refusal": 0.05,
    "false_refusal": 0.03,
    "relevance": 0.15,
    "context_relevance": 0.15,
    # A rise in the share of records the judge cannot decide: answers changed style (terse,
    # yes/no, multi-hop) under a judge that does not read them, so its scores rest on fewer records.
    "undecided": 0.05,
}
# What the detectors watch: every estimate metric, and the undecided share (`reference.drift_values`).
DRIFT_METRICS = (*ESTIMATE_METRICS, "undecided")


class DriftPolicy(BaseModel):
    """The `alerts.drift` config section."""

    model_config = ConfigDict(extra="forbid")

    baseline_file: Path | None = Field(
        None, description="pinned references (rag-monitor baseline pin); else each slice's first records"
    )
    arl0: float = Field(
        10_000.0, ge=100, description="judged records of a slice between false alarms, on average"
    )
    reference_records: int = Field(
        1500,
        ge=50,
        description="judged records that make a slice's reference (the stratified detector's "
        "threshold is calibrated at 1500; fewer make more false alarms)",
    )
    min_records: int = Field(50, ge=1, description="judged records after the reference before any alarm")
    resolve_arl: float = Field(
        1_000.0,
        ge=10,
        description="judged records of a slice between false resolves, on average, while the change "
        "that raised an alarm persists at the minimum effect (the resolve test's threshold is its log)",
    )
    min_effect: dict[str, float] = Field(
        default_factory=lambda: dict(MIN_EFFECT),
        description="the smallest shift worth a page, per metric, in the metric's units "
        "(keys given override the defaults; the others keep theirs)",
    )
    retrieval: RetrievalDriftPolicy = Field(
        default_factory=RetrievalDriftPolicy,
        description="label-free retrieval drift on every record (chunk count, top score; PSI)",
    )

    @field_validator("min_effect", mode="after")
    @classmethod
    def _over_defaults(cls, given: dict[str, float]) -> dict[str, float]:
        """Setting one metric's effect must not leave the others without one."""
        return {**MIN_EFFECT, **given}

    def model_post_init(self, _context: object) -> None:
        unknown = set(self.min_effect) - set(DRIFT_METRICS)
        if unknown:
            raise ValueError(f"min_effect: unknown metrics {sorted(unknown)} (known: {list(DRIFT_METRICS)})")
        if any(v <= 0 for v in self.min_effect.values()):
            raise ValueError("min_effect values must be > 0")

    @property
    def threshold(self) -> float:
        """h for equal weights; a detector scales it by its reference's design effect."""
        return math.log(self.arl0)


class AlertsConfig(AlertSinksConfig):
    """Where alerts go (monitor/outputs/alerts.py) and the drift detectors that raise them
    (monitor/drift.py)."""

    drift: DriftPolicy = Field(default_factory=DriftPolicy)
