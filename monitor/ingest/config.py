"""The ingest stage's config sections (`assembly`, `sampling`) and the limits it takes from
`pipeline`, so the stage is built from these alone, never from the whole configuration."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


class AssemblyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grace_seconds: float = Field(1.0, ge=0, description="wait after the root span for late children")
    timeout_seconds: float = Field(30.0, gt=0, description="emit or drop a trace whose root never came")
    max_open_traces: int = Field(50_000, gt=0)
    max_open_bytes: int = Field(
        128 * 1024 * 1024,
        gt=0,
        description="bytes of the messages open traces hold, each message charged whole once",
    )
    max_spans_per_trace: int = Field(
        10_000, gt=0, description="spans taken per trace; later ones are dropped (too_many_spans)"
    )
    recent_trace_ids: int = Field(100_000, ge=0, description="emitted ids remembered to drop late spans")


class SamplingPolicy(BaseModel):
    """The `sampling` config section. Multipliers of 1 switch a signal off; `p` is capped at 1."""

    model_config = ConfigDict(extra="forbid")

    rate: float = Field(0.05, ge=0, le=1, description="default inclusion probability")
    rates: dict[str, float] = Field(
        default_factory=dict, description="per query type; 0 = never judge that type (no floor either)"
    )
    min_per_window: int = Field(
        20, ge=0, description="stratified floor: judged records per query type per window (0 = off)"
    )
    window_seconds: float = Field(3600.0, gt=0, description="floor window, aligned to the epoch")
    no_chunks_multiplier: float = Field(4.0, ge=1, description="retriever returned nothing")
    low_score_threshold: float | None = Field(
        None,
        description="top retrieval score below this is suspicious (scale is the retriever's; None = off)",
    )
    low_score_multiplier: float = Field(3.0, ge=1)
    refusal_multiplier: float = Field(3.0, ge=1, description="answer looks like a refusal")
    unusual_length_factor: float = Field(
        3.0, gt=1, description="answer length above factor x or below 1/factor x the slice's median"
    )
    unusual_length_multiplier: float = Field(2.0, ge=1)
    signal_max_share: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="most of a slice's judgements one priority signal may add (past what the rate "
        "gives): a producer that sends nothing but chunkless records cannot take the budget",
    )

    def model_post_init(self, _context: object) -> None:
        for qt, r in self.rates.items():
            if not 0.0 <= r <= 1.0:
                raise ValueError(f"rates[{qt!r}] must be within [0, 1], got {r}")


class SamplingConfig(SamplingPolicy):
    """Per-query-type rates, priority signals and per-window floors (monitor/ingest/sampler.py)."""


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """What ingest takes from the `pipeline` section (kept there in the configuration file, beside
    the topics it bounds): where samples go, how many produces may wait, what a sample carries."""

    samples_topic: str
    max_inflight_produces: int
    max_message_bytes: int  # the samples topic's max.message.bytes
    sample_max_chunks: int
    sample_max_chunk_chars: int
