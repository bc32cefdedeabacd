"""Change attribution for drift alerts: which releases (and services) are over-represented among
the failing records since a slice's estimated change point, compared with the records before it.

Per slice (query type, metric) the window keeps the labels of the last `window` judged records
(`alerts.drift.reference_records`) with running counts. When the detector's statistic leaves 0 a
new segment begins (Page's change point): the counts of that window are copied as the "before"
side — the in-control records just before the change, whatever the reference (a pinned baseline
holds no labels) — and from then on the segment counts, per label value, its judged and its
failing records (`Detector.failing`, the records the examples are taken from). When the alarm
fires, `suspects` applies the rule (docs/alerts.md, "Change attribution"):

    a value is over-represented when at least `MIN_FAILING` failing records since the change
    carry it and the lower end of the Wilson 95 % interval of its share among those failing
    records is above its share of the judged records before the change;

ranked by that margin, at most `MAX_SUSPECTS`. A new release (0 % before) that holds most of the
failures is named; a release that always carried most traffic and carries the same share of the
failures is not, nor is the only release there is. Counts are of judged records, unweighted:
both sides are the sampler's output alike.

Memory: labels are bounded (the stages' allow-lists or first-N), so each slice holds `window`
small tuples and a few dicts of at most that many keys. Like the detectors, the state is a function
of the slice's sequence in the results topic, so a member that rebuilds a slice names the same
suspects. Query types need no attribution here: every detector is one query type's, so the
alerts themselves say which query types moved.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

from monitor.drift.detector import Detector
from monitor.outputs.alerts import MAX_SUSPECTS, Attribution, Suspect, utc_time

DIMENSIONS = ("release", "service")
MIN_FAILING = 5  # failing records since the change a value needs before it can be named
_Z = 1.96


def wilson_lower(k: int, n: int) -> float:
    """Lower end of the Wilson 95 % interval of a share k/n (0 for n = 0)."""
    if n <= 0:
        return 0.0
    p = k / n
    z2 = _Z * _Z
    centre = p + z2 / (2 * n)
    margin = _Z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - margin) / (1 + z2 / n))


def _counters() -> tuple[Counter[str], ...]:
    return tuple(Counter() for _ in DIMENSIONS)


@dataclass(slots=True)
class _Slice:
    recent: deque[tuple[str, ...]]
    recent_counts: tuple[Counter[str], ...] = field(default_factory=_counters)
    start: int | None = None  # the change point the segment counts are since
    since: float | None = None  # its record's time
    before: tuple[Counter[str], ...] = field(default_factory=_counters)
    before_total: int = 0
    judged: tuple[Counter[str], ...] = field(default_factory=_counters)
    judged_total: int = 0
    failing: tuple[Counter[str], ...] = field(default_factory=_counters)
    failing_total: int = 0

    def push(self, labels: tuple[str, ...]) -> None:
        if len(self.recent) == self.recent.maxlen:
            for counts, value in zip(self.recent_counts, self.recent[0], strict=True):
                counts[value] -= 1
                if not counts[value]:
                    del counts[value]
        self.recent.append(labels)
        for counts, value in zip(self.recent_counts, labels, strict=True):
            counts[value] += 1


class ChangeAttribution:
    """The attribution state of every slice the drift stage watches."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._slices: dict[tuple[str, str], _Slice] = {}
        self._first_seen: dict[tuple[str, str], float] = {}  # (query type, release) → time
        self.release_first_seen: dict[str, float] = {}  # release → time, over every slice seen

    def seen(self, query_type: str, release: str, at: float | None) -> bool:
        """Note a record of the slice (judged or not) at `at`; True when that makes it the
        earliest record of its release this member has seen (`release_first_seen` moved)."""
        if at is None or not math.isfinite(at):
            return False
        key = (query_type, release)
        known = self._first_seen.get(key)
        if known is None or at < known:
            self._first_seen[key] = at
        earliest = self.release_first_seen.get(release)
        if earliest is not None and earliest <= at:
            return False
        self.release_first_seen[release] = at
        return True

    def observe(
        self, query_type: str, detector: Detector, y: float, labels: tuple[str, ...], at: float | None
    ) -> None:
        """After `detector` took this record's value `y`; `labels` per `DIMENSIONS`."""
        key = (query_type, detector.metric)
        state = self._slices.get(key)
        if state is None:
            state = self._slices[key] = _Slice(deque(maxlen=self.window))
        start = detector.change_point
        if start is None:
            state.start = None
        else:
            if state.start != start:  # a new segment begins at this record: the window is "before"
                state.start, state.since = start, at
                state.before = tuple(Counter(c) for c in state.recent_counts)
                state.before_total = len(state.recent)
                state.judged, state.failing = _counters(), _counters()
                state.judged_total = state.failing_total = 0
            failing = detector.failing(y)
            state.judged_total += 1
            state.failing_total += failing
            for judged, bad, value in zip(state.judged, state.failing, labels, strict=True):
                judged[value] += 1
                if failing:
                    bad[value] += 1
        state.push(labels)

    def attribute(self, query_type: str, detector: Detector) -> Attribution | None:
        """The slice's attribution since its change point (None without one)."""
        state = self._slices.get((query_type, detector.metric))
        if state is None or state.start is None or state.start != detector.change_point:
            return None
        return Attribution.of(
            state.since, state.failing_total, state.before_total, self._suspects(query_type, state)
        )

    def _suspects(self, query_type: str, s: _Slice) -> list[Suspect]:
        if not s.before_total or not s.failing_total:
            return []
        ranked = []
        for i, dimension in enumerate(DIMENSIONS):
            for value, failing in s.failing[i].items():
                before = s.before[i].get(value, 0)
                margin = wilson_lower(failing, s.failing_total) - before / s.before_total
                if failing < MIN_FAILING or margin <= 0:
                    continue
                first = self._first_seen.get((query_type, value)) if dimension == "release" else None
                suspect = Suspect(
                    dimension,
                    value,
                    failing,
                    s.failing_total,
                    s.judged[i].get(value, 0),
                    s.judged_total,
                    before,
                    s.before_total,
                    utc_time(first),
                )
                ranked.append((margin, suspect))
        ranked.sort(key=lambda m: m[0], reverse=True)
        return [suspect for _, suspect in ranked[:MAX_SUSPECTS]]

    def forget(self, query_types: set[str]) -> None:
        for key in [k for k in self._slices if k[0] in query_types]:
            del self._slices[key]
        for key in [k for k in self._first_seen if k[0] in query_types]:
            del self._first_seen[key]
