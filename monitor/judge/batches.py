"""The judge's Message Batches metrics, read from the batcher's counts (`monitor.llm.batches`)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

from monitor.llm.batches import BatchStats

__all__ = ["BatchCollector"]


class BatchCollector:
    """`ragmon_judge_batches_total{outcome}` and `ragmon_judge_batch_entries_total{result}`, read
    from the batcher's counts when Prometheus scrapes (nothing on the judging path)."""

    def __init__(self, stats: BatchStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        batches = CounterMetricFamily(
            "ragmon_judge_batches",
            "Message Batches sent by the judge, by outcome: ended (results read), failed (create or "
            "results failed: every entry got the error), canceled (every caller had given up)",
            labels=["outcome"],
        )
        for outcome, n in (
            ("ended", s.ended_batches),
            ("failed", s.failed_batches),
            ("canceled", s.canceled_batches),
        ):
            batches.add_metric([outcome], n)
        yield batches
        entries = CounterMetricFamily(
            "ragmon_judge_batch_entries",
            "Judge requests sent in Message Batches, by result (errored entries are resubmitted up "
            "to max_retries; expired ones timed out after the API's 24 h)",
            labels=["result"],
        )
        for result in ("succeeded", "errored", "expired", "canceled"):
            entries.add_metric([result], getattr(s, result))
        yield entries
