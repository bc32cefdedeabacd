"""The ingest stage's per-record series, counted in plain numbers and added to their Prometheus
children once per batch: the hot path, and the C seam (`monitor.ingest.accounting` tallies into
these objects' public slots), kept apart from the families' definitions."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Counter, Histogram

from monitor.contracts.model import RagRecord

# The service's own request and stage durations: a retrieval takes milliseconds, a long generation
# a minute.
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
# `ragmon_request_duration_seconds`' stage label, in `ServiceSeries.values`' order.
RED_STAGES = ("request", "retrieval", "generation")
_RED_BOUNDS = [*DURATION_BUCKETS, float("inf")]  # never changed


class HistogramTally:
    """Observations of one Histogram child, counted in plain numbers and added to the child by
    `flush`: an observation is a bisect and two additions, without the child's per-value locks and
    bucket scan. The ingest stage flushes once per fetched batch, so a scrape sees every record at
    most one batch (well under a second) late. Values must not be NaN (scores and lags are
    finite).

    The C seam: `bounds` (read), `counts`, `sum` and `n` (added to as `observe` adds) are public
    because the ingest stage's compiled accounting (`monitor.ingest.accounting`) tallies through
    them; `flush` and the child stay this class's."""

    __slots__ = ("_child", "bounds", "counts", "n", "sum")

    def __init__(self, child: Histogram) -> None:
        self._child = child
        self.bounds = list(child._upper_bounds)  # ends with +Inf
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        # The first bucket whose upper bound is >= value, as `Histogram.observe` picks it.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.n += 1

    def flush(self) -> None:
        if not self.n:
            return
        counts = self.counts
        buckets = self._child._buckets
        for i, n in enumerate(counts):
            if n:
                buckets[i].inc(n)
                counts[i] = 0
        self._child._sum.inc(self.sum)
        self.sum = 0.0
        self.n = 0


class RecordSeries:
    """The record-level series of one (service, query_type), resolved once and counted locally
    (see `HistogramTally`) until `flush`. The C seam: `records`, `chunks` and `top_score`, which the
    ingest stage's compiled accounting counts into as `observe` does."""

    __slots__ = ("_records", "chunks", "records", "top_score")

    def __init__(self, records: Counter, chunks: Histogram, top_score: Histogram) -> None:
        self._records = records
        self.records = 0  # since the last flush
        self.chunks = HistogramTally(chunks)
        self.top_score = HistogramTally(top_score)

    def observe(self, n_chunks: int, top_score: float | None) -> None:
        """One record: counted, its chunk count tallied, and its top score when it has one."""
        self.records += 1
        self.chunks.observe(n_chunks)
        if top_score is not None:
            self.top_score.observe(top_score)

    def flush(self) -> None:
        if self.records:
            self._records.inc(self.records)
            self.records = 0
        self.chunks.flush()
        self.top_score.flush()


class Prices(Protocol):
    """USD per token of a generator model (`monitor.ingest.accounting.PriceBook`): (input,
    output), or None where the price table has no such model."""

    def price(self, model: str | None) -> tuple[float, float] | None: ...


@dataclass(frozen=True, slots=True)
class ServiceMetrics:
    """The service's own RED series (request and stage durations, requests and errors, generator
    tokens and USD), per service, query type and release; the ingest stage counts every record."""

    duration: Histogram  # labels: service, query_type, release, stage
    requests: Counter
    errors: Counter
    tokens: Counter  # labels: service, query_type, release, type (input | output)
    cost: Counter
    unpriced: Counter


class ServiceSeries:
    """The RED series of one (service, query_type, release), counted locally in `values` and added
    to the Prometheus children by `flush`, as `RecordSeries` does.

    `values` (floats: counts stay exact to 2**53) holds, per stage of `RED_STAGES`, the bucket
    counts (one per bound of `bounds`, which ends with +Inf) and the sum; then requests, errors,
    input tokens, output tokens, USD and unpriced records (`REQUESTS` on). The C seam: `bounds`
    (read) and `values` (added to as `observe` adds), which the ingest stage's compiled
    accounting counts into.

    `folded`: the series budget's counter child (`SeriesBudget.folded`) when this object counts
    the records whose own label set the budget folded into this one; `flush` adds their number to
    it, so the fold costs the hot path nothing per record."""

    __slots__ = ("_children", "_folded", "_zeros", "bounds", "values")

    def __init__(
        self,
        metrics: ServiceMetrics,
        service: str,
        query_type: str,
        release: str,
        folded: Counter | None = None,
    ) -> None:
        labels = {"service": service, "query_type": query_type, "release": release}
        self._folded = folded
        self._children = (
            tuple(metrics.duration.labels(stage=stage, **labels) for stage in RED_STAGES),
            metrics.requests.labels(**labels),
            metrics.errors.labels(**labels),
            metrics.tokens.labels(type="input", **labels),
            metrics.tokens.labels(type="output", **labels),
            metrics.cost.labels(**labels),
            metrics.unpriced.labels(**labels),
        )
        self.bounds = _RED_BOUNDS  # shared: the compiled accounting reads it once per batch
        self._zeros = array("d", [0.0]) * (len(RED_STAGES) * (len(self.bounds) + 1) + 6)
        self.values = array("d", self._zeros)

    def observe(self, record: RagRecord, prices: Prices) -> None:
        """One record: its request and stage durations (a negative or unknown one is not
        observed), its outcome, its generator tokens and their USD (or, for a model `prices` has
        no price for, one more unpriced record)."""
        v = self.values
        bounds = self.bounds
        step = len(bounds) + 1
        if record.start_ns:
            ns = record.end_ns - record.start_ns
            if ns >= 0:
                d = ns / 1e9
                v[bisect_left(bounds, d)] += 1
                v[step - 1] += d
        for at, ns in ((step, record.retrieval_ns), (2 * step, record.generation_ns)):
            if ns >= 0:
                d = ns / 1e9
                v[at + bisect_left(bounds, d)] += 1
                v[at + step - 1] += d
        r = 3 * step
        v[r] += 1
        if record.error:
            v[r + 1] += 1
        tin, tout = record.input_tokens, record.output_tokens
        # The decoder gives counts in [0, 10M]; a negative one (a record built otherwise) is none.
        if tin is not None and tin < 0:
            tin = None
        if tout is not None and tout < 0:
            tout = None
        if tin is None and tout is None:
            return
        if tin is not None:
            v[r + 2] += tin
        if tout is not None:
            v[r + 3] += tout
        price = prices.price(record.model)
        if price is None:
            v[r + 5] += 1
        else:
            v[r + 4] += (tin or 0) * price[0] + (tout or 0) * price[1]

    def flush(self) -> None:
        v = self.values
        step = len(self.bounds) + 1
        r = 3 * step
        if not v[r]:
            return
        stages, requests, errors, tokens_in, tokens_out, cost, unpriced = self._children
        for k, hist in enumerate(stages):
            at = k * step
            if any(v[at : at + step]):
                buckets = hist._buckets
                for i in range(step - 1):
                    if v[at + i]:
                        buckets[i].inc(v[at + i])
                hist._sum.inc(v[at + step - 1])
        requests.inc(v[r])
        if self._folded is not None:
            self._folded.inc(v[r])
        for child, x in ((errors, v[r + 1]), (tokens_in, v[r + 2]), (tokens_out, v[r + 3]), (cost, v[r + 4])):
            if x:
                child.inc(x)
        if v[r + 5]:
            unpriced.inc(v[r + 5])
        v[:] = self._zeros
