"""The verdict exporters the `events` section turns on, as one: log events (`mode` logs or both,
`endpoint`), the judgement span (`mode` span or both, `traces_endpoint`), Phoenix annotations
(`phoenix.url`). The judge stage emits each successful judgement once here; each exporter drops
and counts on its own, so none can hold another, the judge or the Kafka offsets."""

from __future__ import annotations

import asyncio

from monitor.contracts.model import Judgement, RagRecord
from monitor.outputs.config import EventsConfig
from monitor.outputs.evaluation_events import EvaluationEventSink
from monitor.outputs.export_queue import SinkStats
from monitor.outputs.judgement_span import JudgementSpanSink
from monitor.outputs.otlp_export import OtlpVerdictSink
from monitor.outputs.phoenix_annotations import PhoenixAnnotationSink

__all__ = ["SINKS", "VerdictExports"]

# The `sink` label values of ragmon_evaluation_events_total (a closed set).
SINKS = ("logs", "span", "phoenix")


class VerdictExports:
    def __init__(self, otlp: list[OtlpVerdictSink], phoenix: PhoenixAnnotationSink | None) -> None:
        self._otlp = otlp
        self._phoenix = phoenix

    @classmethod
    def from_config(cls, config: EventsConfig) -> VerdictExports | None:
        """The exporters `config` turns on; None when it turns on none."""
        # Phoenix first: it may refuse to start (an unreadable token file) before any thread runs.
        phoenix = PhoenixAnnotationSink.from_config(config.phoenix, config.text_limit)
        otlp: list[OtlpVerdictSink] = [
            s for s in (EvaluationEventSink.from_config(config), JudgementSpanSink.from_config(config)) if s
        ]
        return cls(otlp, phoenix) if otlp or phoenix else None

    def start(self) -> None:
        """Start what sends from the event loop (Phoenix's task); OTLP sends from SDK threads."""
        if self._phoenix is not None:
            self._phoenix.start()

    def emit(self, judgement: Judgement, record: RagRecord) -> None:
        """Hand one judgement of `record` to every exporter. Never blocks, never raises."""
        for sink in self._otlp:
            sink.emit(judgement, record)
        if self._phoenix is not None:
            self._phoenix.emit(judgement, record)

    def stats(self) -> dict[str, SinkStats]:
        """Counts by `sink` label value."""
        out = {s.sink: s.stats() for s in self._otlp}
        if self._phoenix is not None:
            out[self._phoenix.sink] = self._phoenix.stats()
        return out

    async def close(self, within: float = 5.0) -> None:
        """Flush and stop every exporter, side by side, in about `within` seconds."""
        closing = [asyncio.to_thread(s.shutdown, within) for s in self._otlp]
        if self._phoenix is not None:
            closing.append(self._phoenix.close(within))
        await asyncio.gather(*closing)
