"""Which drift slices are armed. A slice (query type × metric) raises nothing until its reference
is frozen — a pinned baseline's from start-up, else its first `alerts.drift.reference_records`
judged records (1,500 by default) — and at a 5 % sample that is hours of a slice's traffic. So the
state is shown rather than left to be guessed:

- `ragmon_drift_armed`, `ragmon_drift_reference_records` and
  `ragmon_drift_reference_required_records` for every slice the labels allow, from start-up (a
  slice without traffic yet shows 0 of N, so a dashboard lists it);
- a log line when a slice arms, with how long its reference took by the records' own times;
- a minute after traffic starts, then hourly while a slice with records still collects, one line
  naming the slices not armed yet and when they will be at the judged-record rate observed.

Cost on the drift stage's per-record path: one dict lookup once a query type's slices are all
armed; while some collect, a lookup per value. The records-so-far gauges are set at the stage's
housekeeping tick, not per record.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence

from monitor.contracts.metrics import DriftMetrics
from monitor.drift.config import DRIFT_METRICS, DriftPolicy
from monitor.drift.detector import Detector, Reference

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (query type, metric)

REPORT_AFTER = 60.0  # seconds of traffic before the first "not armed yet" line
REPORT_EVERY = 3600.0  # then, while some slice with records still collects


def duration(seconds: float) -> str:
    """A span as a person reads it: "45 s", "38 min", "3.2 h", "2.1 d"."""
    if not math.isfinite(seconds):
        return "never"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def per_second(rate: float) -> str:
    return f"{rate:.0f}/s" if rate >= 10 else f"{rate:.2g}/s"


class Arming:
    """The armed state of every slice of `query_types` (bounded labels) × the drift metrics, for
    one drift member. `pinned`: the baseline's references (armed from start-up)."""

    def __init__(
        self,
        policy: DriftPolicy,
        metrics: DriftMetrics,
        query_types: Sequence[str],
        pinned: Mapping[Key, Reference] | None = None,
    ) -> None:
        self.required = policy.reference_records
        self._m = metrics
        self.query_types = tuple(dict.fromkeys(query_types))
        self._pinned = {k: ref.records for k, ref in (pinned or {}).items()}
        # Per query type with a slice still collecting: metric -> the time of the slice's first
        # record (None before one). The drift stage asks it for the query type of each record.
        self.pending: dict[str, dict[str, float | None]] = {}
        # The rate window: since when, the judgements read then, and each collecting slice's records.
        self._since: float | None = None
        self._seen = 0
        self._records: dict[Key, int] = {}
        self._reports = 0
        self.reset(self.query_types)

    @property
    def slices(self) -> int:
        return len(self.query_types) * len(DRIFT_METRICS)

    @property
    def armed(self) -> int:
        return self.slices - sum(len(w) for w in self.pending.values())

    def reset(self, query_types: Iterable[str]) -> None:
        """These query types' slices as at start-up: a pinned slice armed at its pinned size, the
        others at 0 records of `required` (also once they move to another drift member, so that
        every member lists every slice and the owner's is the max)."""
        m = self._m
        for qt in query_types:
            waiting: dict[str, float | None] = {}
            for metric in DRIFT_METRICS:
                size = self._pinned.get((qt, metric))
                if size is None:
                    waiting[metric] = None
                m.reference_records.labels(qt, metric).set(size or 0)
                m.reference_required.labels(qt, metric).set(self.required if size is None else size)
                m.armed.labels(qt, metric).set(0 if size is None else 1)
                self._records.pop((qt, metric), None)
            if waiting:
                self.pending[qt] = waiting
            else:
                self.pending.pop(qt, None)

    def observed(
        self,
        query_type: str,
        values: Sequence[tuple[str, float]],
        when: float | None,
        detectors: Mapping[Key, Detector],
        *,
        live: bool,
    ) -> None:
        """After the detectors took a judgement of `query_type` (`when`: the record's time), while
        one of its slices collects: the slices it armed are exported at once, and logged when
        `live` (a replay's rebuild is summed up when it ends)."""
        waiting = self.pending[query_type]
        t = time.time() if when is None else when
        armed: list[tuple[str, int, float]] = []
        for metric, _ in values:
            if metric not in waiting:
                continue
            first = waiting[metric]
            if first is None:
                first = waiting[metric] = t
            ref = detectors[(query_type, metric)].reference
            if ref.frozen:
                del waiting[metric]
                labels = (query_type, metric)
                self._m.reference_records.labels(*labels).set(ref.records)
                self._m.armed.labels(*labels).set(1)
                armed.append((metric, ref.records, t - first))
        if not waiting:
            del self.pending[query_type]
        if armed and live:
            log.info(
                "drift: armed %s: %s frozen at %s judged records (%d of %d slices armed); %s from "
                "the next record",
                ", ".join(f"{query_type}/{m} after {duration(took)}" for m, _, took in armed),
                "its reference" if len(armed) == 1 else "their references",
                "/".join(sorted({str(n) for _, n, _ in armed})),
                self.armed,
                self.slices,
                "its detector runs" if len(armed) == 1 else "their detectors run",
            )

    def replayed(self) -> None:
        """A partition's replay ended: its records came in at once, so the rate window restarts."""
        self._since = None

    def tick(self, now: float, seen: int, detectors: Mapping[Key, Detector], *, replaying: bool) -> None:
        """At the drift stage's housekeeping (`now`: monotonic seconds, `seen`: judgements read so
        far): the records-so-far gauges of the collecting slices, and the "not armed yet" line
        when due. The rate window starts with traffic (it slides while nothing is read) and never
        holds a replay."""
        if not self.pending:
            return
        records = self._collected(detectors)
        gauge = self._m.reference_records
        for (qt, metric), n in records.items():
            if n:
                gauge.labels(qt, metric).set(n)
        since = self._since
        if replaying or since is None or seen == self._seen:
            self._restart(now, seen, records)
            return
        if now - since < (REPORT_EVERY if self._reports else REPORT_AFTER):
            return
        if not self._reports or any(records.values()):
            log.info("%s", self.report(records, now - since))
            self._reports += 1
        self._restart(now, seen, records)

    def report(self, records: Mapping[Key, int], seconds: float) -> str:
        """The slices not armed yet, by query type: records so far, grouped where alike, and the
        expected time to arm at the rate of the last `seconds`."""
        parts: list[str] = []
        idle: list[str] = []  # slices without a record: no rate to go by
        for qt in self.query_types:
            waiting = self.pending.get(qt)
            if not waiting:
                continue
            groups: dict[tuple[int, int], list[str]] = {}
            empty = []
            for metric in DRIFT_METRICS:
                if metric not in waiting:
                    continue
                n = records.get((qt, metric), 0)
                if n:
                    gained = n - self._records.get((qt, metric), 0)
                    groups.setdefault((n, gained), []).append(metric)
                else:
                    empty.append(metric)
            if len(empty) == len(DRIFT_METRICS):
                idle.append(qt)
            else:
                idle.extend(f"{qt}/{m}" for m in empty)
            entries = []
            for (n, gained), metrics in sorted(groups.items(), key=lambda g: -g[0][0]):
                rate = gained / seconds if seconds > 0 else 0.0
                when = (
                    f"~{duration((self.required - n) / rate)} at {per_second(rate)}"
                    if rate > 0
                    else f"none in the last {duration(seconds)}"
                )
                entries.append(f"{n} ({', '.join(metrics)}; {when})")
            if entries:
                parts.append(f"{qt} {', '.join(entries)}")
        text = (
            f"drift: {self.armed} of {self.slices} slices armed; a reference freezes at {self.required} "
            f"judged records; not armed yet, with the expected time at the last {duration(seconds)}'s "
            "judged-record rate: "
        )
        text += "; ".join(parts) if parts else "none with records"
        if idle:
            text += f"; no judged records yet (armed only once their traffic is judged): {', '.join(idle)}"
        return text

    def _collected(self, detectors: Mapping[Key, Detector]) -> dict[Key, int]:
        out = {}
        for qt, waiting in self.pending.items():
            for metric in waiting:
                d = detectors.get((qt, metric))
                out[(qt, metric)] = 0 if d is None else d.reference.records
        return out

    def _restart(self, now: float, seen: int, records: dict[Key, int]) -> None:
        self._since, self._seen, self._records = now, seen, records


def expected_arming(
    reference_records: int,
    rate: float,
    rates: Mapping[str, float],
    floor: int,
    window_seconds: float,
    requests_per_second: float | None,
    *,
    pinned: bool,
) -> list[str]:
    """What `config show` says of arming before anything runs: the requests of a query type that
    fill a reference at each configured sampling rate (`rate`, and the per-query-type `rates`),
    the time at `requests_per_second` of a query type when given, the bound the per-window floor
    sets, and the warm starts. Judged records ≈ sampled ones (the judge skips a few); priority
    signals sample more, so these are upper bounds for a query type with that traffic."""
    n = reference_records
    lines = [
        f"drift: each slice (query type, metric) arms after {n:,} judged records "
        "(alerts.drift.reference_records); until then its detector raises nothing"
    ]
    for who, r in [(f"sampling.rate {rate:g}", rate)] + [
        (f"sampling.rates {qt}: {r:g}", r) for qt, r in rates.items()
    ]:
        if r <= 0:
            lines.append(f"{who}: nothing is judged, so those slices arm only when pinned")
            continue
        text = f"at {who} that is ~{n / r:,.0f} requests of a query type"
        if requests_per_second:
            text += f"; at {requests_per_second:g} req/s of it ~{duration(n / r / requests_per_second)}"
        lines.append(text)
    if floor > 0:
        within = duration(n / floor * window_seconds)
        lines.append(
            f"sampling.min_per_window: at least {floor} records of a query type are judged per "
            f"{window_seconds:g} s, so one with that many requests arms within ~{within}"
        )
    if requests_per_second is None:
        lines.append(
            "--requests-per-second Q: the time at Q requests a second of a query type; `rag-monitor "
            "run` logs it at the observed rate a minute into the traffic"
        )
    lines.append(
        "alerts.drift.baseline_file is set: the slices it pins are armed from start-up"
        if pinned
        else "armed from the start: pin a baseline (rag-monitor baseline pin); a restart rebuilds "
        "the references from the results topic"
    )
    return lines
