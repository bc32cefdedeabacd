"""Quality by release, with a verdict: each metric's weighted estimate per release, and whether it
moved against the release before it (or a named baseline).

The releases' samples are independent (different requests, judged once), so the test is unpaired:
the difference of two weighted (Hájek) estimates, each with its linearised variance (as the
recording rules compute it), a normal interval on the difference at the chosen confidence. Its
interval excluding 0 gives `better` or `worse` (by the metric's direction, `DIRECTION`), else `no
detectable change`; fewer than `min_samples` judged records on either side give `too few samples`.
The refusal rate has no good direction of its own: fewer refusals are better only when the answers
given instead are grounded, more only when the questions refused are unanswerable. Its verdict is
`higher` or `lower`, or `worse`/`better` when the release's hallucination or false-refusal verdict
says which (refusals traded for invented answers: `worse`), with the reason in `note`. `other` and
`unknown` pool several releases: shown, never compared.

The same sums come from Prometheus too (`prometheus_groups`): the estimate counters
(`ragmon_estimate_*_total`) are those sums, labelled by release, query type and service, so a
window's difference of them is the window's sample, with no results file at hand.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import httpx

from monitor.contracts.estimate import (
    WeightedSums,
    usable_weight,
    verdict_values,
    weighted_mean,
    weighted_rate,
)
from monitor.contracts.results import ResultLine
from monitor.plumbing.safe_text import one_line, terminal_line

# Which way is better: +1 up, -1 down, 0 neither by itself (the refusal rate: read with the
# release's hallucination and false-refusal verdicts, `_refusal_verdict`).
DIRECTION = {
    "faithfulness": 1,
    "relevance": 1,
    "context_relevance": 1,
    "hallucination": -1,
    "false_refusal": -1,
    "refusal": 0,
}
METRICS = ("faithfulness", "hallucination", "refusal", "false_refusal", "relevance", "context_relevance")
_RATES = frozenset({"hallucination", "refusal", "false_refusal"})
_POOLED = frozenset({"other", "unknown"})
TEST = "unpaired: difference of two weighted (Hájek) estimates, linearised variances, normal interval"


@dataclass(slots=True)
class ReleaseStats:
    name: str
    first_seen: float | None = None  # the earliest record time among its lines
    sums: dict[str, WeightedSums] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetricRow:
    release: str
    metric: str
    estimate: float
    lower: float
    upper: float
    samples: int
    baseline: str | None  # the release compared with; None: not compared
    difference: float | None = None
    diff_lower: float | None = None
    diff_upper: float | None = None
    # better | worse | no detectable change | too few samples | "" (not compared); for the refusal
    # rate, higher | lower when nothing else says which is better
    verdict: str = ""
    note: str = ""  # why, when the verdict is not the metric's own direction (refusal)


def group(lines: Iterable[ResultLine], by: str = "release") -> tuple[dict[str, ReleaseStats], int]:
    """The judged production lines' weighted sums per value of `by` (a line field), and how many
    lines were left out (not judged, replay, no usable weight)."""
    out: dict[str, ReleaseStats] = {}
    left_out = 0
    for line in lines:
        w = line.sampling_weight
        if line.replay or not line.judged or w is None or not usable_weight(float(w)):
            left_out += 1
            continue
        key = getattr(line, by, None)
        name = key if isinstance(key, str) and key else "unknown"
        stats = out.get(name)
        if stats is None:
            stats = out[name] = ReleaseStats(name)
        when = line.time
        if when is not None and (stats.first_seen is None or when < stats.first_seen):
            stats.first_seen = when
        values = verdict_values(
            line.faithfulness,
            line.hallucinated,
            line.refusal,
            line.false_refusal,
            line.answer_relevance,
            context_relevance=line.context_relevance,
        )
        for metric, y in values:
            s = stats.sums.get(metric)
            if s is None:
                s = stats.sums[metric] = WeightedSums()
            s.add(float(w), y)
    return out, left_out


# WeightedSums slot <- the estimate counter that holds it (docs/contract.md, "Metrics").
_COUNTERS = {
    "n": "ragmon_estimate_samples_total",
    "sw": "ragmon_estimate_weight_total",
    "swy": "ragmon_estimate_weighted_value_total",
    "sw2": "ragmon_estimate_weight_squared_total",
    "sw2y": "ragmon_estimate_weight_squared_value_total",
    "sw2y2": "ragmon_estimate_weight_squared_value_squared_total",
}


class PrometheusError(Exception):
    """Prometheus could not be asked, refused the query, answered too slowly, too much or not as
    its API does (the message, one line, says which)."""


@dataclass(frozen=True, slots=True)
class PrometheusWindow:
    """What to read: the counters' growth over `range_s` seconds ending at `at` (None: now),
    restricted by PromQL label matchers (`judge="lexical"`, `service="rag"`)."""

    url: str
    range_s: float
    at: float | None = None
    matchers: str = ""
    timeout_s: float = 30.0  # for every query together, not per read: a trickling server ends too
    max_bytes: int = 32 * 1024 * 1024  # per response body


@dataclass(slots=True)
class PrometheusGroups:
    groups: dict[str, ReleaseStats]
    reset: list[str]  # slices whose counters restarted in the window: their sums undercount


def prometheus_groups(window: PrometheusWindow, by: str = "release") -> PrometheusGroups:
    """The weighted sums per value of `by`, from the estimate counters over the window.

    Each sum is the counters' value at the end of the window minus their value at its start (0
    for a slice born inside it). Not `increase()`: a labelled counter appears at its first
    sample, so `increase()` loses what a slice gathered before its first scrape and extrapolates
    the rest, and n would not be a count. A counter that restarted inside the window (a sidecar
    restart) makes the difference undercount: such slices are named in `reset`. A release's first
    appearance in the window orders the releases (the earliest sample of its series, to the step
    of a subquery); releases older than the window tie at its start and are ordered by name.

    All of it within `window.timeout_s` (PrometheusError past it): the queries run on a daemon
    thread the caller stops waiting for at the deadline, whatever stage a slow server holds them
    in (connecting, headers, a body sent a byte at a time)."""
    done: list[PrometheusGroups | BaseException] = []

    def work() -> None:
        try:
            done.append(_groups(window, by))
        except BaseException as exc:  # handed to the caller's thread
            done.append(exc)

    worker = threading.Thread(target=work, name="ragmon-compare-prometheus", daemon=True)
    worker.start()
    worker.join(window.timeout_s + 0.5)  # the worker's own reads end at the deadline already
    if not done:
        raise PrometheusError(f"Prometheus did not answer within {window.timeout_s:g}s")
    got = done[0]
    if isinstance(got, BaseException):
        raise got
    return got


def _groups(window: PrometheusWindow, by: str) -> PrometheusGroups:
    sel = f"{{{window.matchers}}}" if window.matchers else ""
    rng = f"{max(1, round(window.range_s))}s"
    step = f"{max(15, round(window.range_s / 500))}s"
    out: dict[str, ReleaseStats] = {}
    ask = _Asker(window)
    with httpx.Client(base_url=window.url.rstrip("/"), timeout=window.timeout_s) as client:
        for slot, counter in _COUNTERS.items():
            now = f"sum by ({by}, metric) ({counter}{sel})"
            query = f"{now} - (sum by ({by}, metric) ({counter}{sel} offset {rng}) or {now} * 0)"
            for labels, value in ask(client, query):
                name = labels.get(by) or "unknown"
                metric = labels.get("metric", "")
                if metric not in METRICS or not math.isfinite(value) or value < 0:
                    continue
                stats = out.setdefault(name, ReleaseStats(name))
                sums = stats.sums.setdefault(metric, WeightedSums())
                setattr(sums, slot, round(value) if slot == "n" else value)
        born = f"min_over_time(timestamp(sum by ({by}) ({_COUNTERS['n']}{sel}))[{rng}:{step}])"
        for labels, value in ask(client, born):
            seen = out.get(labels.get(by) or "unknown")
            if seen is not None and math.isfinite(value):
                seen.first_seen = value
        resets = f"sum by ({by}) (resets({_COUNTERS['n']}{sel}[{rng}])) > 0"
        reset = sorted({labels.get(by) or "unknown" for labels, _ in ask(client, resets)})
    for stats in out.values():  # a window in which nothing was judged is no sample
        stats.sums = {m: s for m, s in stats.sums.items() if s.n > 0 and s.sw > 0}
    return PrometheusGroups({k: v for k, v in out.items() if v.sums}, reset)


class _Asker:
    """Instant queries against one deadline for them all (`timeout_s`): each read waits at most
    what is left of it, so a server that sends a byte every few seconds ends the command on time;
    a body past `max_bytes` is not read further."""

    def __init__(self, window: PrometheusWindow) -> None:
        self.window = window
        self.deadline = time.monotonic() + window.timeout_s

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise PrometheusError(f"Prometheus did not answer within {self.window.timeout_s:g}s")
        return left

    def __call__(self, client: httpx.Client, query: str) -> list[tuple[dict[str, str], float]]:
        params: dict[str, str | float] = {"query": query}
        if self.window.at is not None:
            params["time"] = self.window.at
        cap = self.window.max_bytes
        try:
            with client.stream("GET", "/api/v1/query", params=params, timeout=self._left()) as r:
                raw = bytearray()
                stream = r.iter_bytes()  # decoded: the cap bounds what is held
                while True:
                    # each read waits at most what is left: httpcore takes the read timeout from
                    # the request's `timeout` extension at every read
                    timeouts = r.request.extensions.get("timeout")
                    if isinstance(timeouts, dict):
                        timeouts["read"] = self._left()
                    chunk = next(stream, None)
                    if chunk is None:
                        break
                    raw += chunk
                    if len(raw) > cap:
                        raise PrometheusError(f"Prometheus answered more than {cap} bytes: not read")
                    self._left()
                status = r.status_code
        except httpx.TimeoutException:
            raise PrometheusError(f"Prometheus did not answer within {self.window.timeout_s:g}s") from None
        except httpx.HTTPError as exc:
            raise PrometheusError(f"cannot reach Prometheus: {exc.__class__.__name__}") from None
        return _vector(status, bytes(raw))


def _vector(status: int, raw: bytes) -> list[tuple[dict[str, str], float]]:
    """The (labels, value) pairs of an instant-vector answer; PrometheusError for any other
    shape (Prometheus's API, `/api/v1/query`: {"status", "data": {"resultType", "result"}})."""
    try:
        body = json.loads(raw)
    except ValueError:
        raise PrometheusError(f"Prometheus answered HTTP {status}, not JSON") from None
    if not isinstance(body, dict):
        raise PrometheusError(
            f"Prometheus answered HTTP {status} with a JSON {type(body).__name__}, not an object"
        )
    if status != 200 or body.get("status") != "success":
        error = body.get("error", status)
        raise PrometheusError(f"Prometheus refused the query: {one_line(str(error), 300)}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        got = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise PrometheusError(f"expected an instant vector, got {one_line(str(got), 60)}")
    result = data.get("result", [])
    out: list[tuple[dict[str, str], float]] = []
    for item in result if isinstance(result, list) else [result]:
        try:
            labels, (_, value) = item["metric"], item["value"]
            if not isinstance(labels, dict):
                raise TypeError
            out.append(({str(k): str(v) for k, v in labels.items()}, float(value)))
        except (KeyError, TypeError, ValueError):
            raise PrometheusError(
                f"Prometheus answered a sample that is not [time, value]: {one_line(str(item), 80)}"
            ) from None
    return out


def compare(
    groups: dict[str, ReleaseStats],
    *,
    baseline: str | None = None,
    confidence: float = 0.95,
    min_samples: int = 10,
) -> list[MetricRow]:
    """Rows per release (in order of first appearance) and metric: the estimate and interval, and
    the verdict against `baseline` (default: the release seen before it)."""
    order = sorted(groups.values(), key=lambda s: (s.first_seen is None, s.first_seen or 0.0, s.name))
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    rows: list[MetricRow] = []
    previous: ReleaseStats | None = None
    for stats in order:
        pooled = stats.name in _POOLED
        against = groups.get(baseline) if baseline is not None else previous
        if pooled or against is stats:
            against = None
        for metric in METRICS:
            s = stats.sums.get(metric)
            if s is None or s.n == 0:
                continue
            est, lo, hi = _interval(metric, s, confidence)
            row = MetricRow(stats.name, metric, est, lo, hi, s.n, against.name if against else None)
            b = against.sums.get(metric) if against is not None else None
            if against is not None:
                row = _verdict(row, s, b, z, min_samples)
            rows.append(row)
        _refusal_verdict(rows, stats.name)
        if not pooled:
            previous = stats
    return rows


def _interval(metric: str, s: WeightedSums, confidence: float) -> tuple[float, float, float]:
    if metric in _RATES:
        e = weighted_rate(s, confidence)
    elif metric == "faithfulness":
        e = weighted_mean(s, confidence)
    else:  # 1-3 scales: a normal interval on the Hájek mean
        m = s.swy / s.sw
        half = NormalDist().inv_cdf(0.5 + confidence / 2.0) * math.sqrt(s.variance(m))
        return m, max(1.0, m - half), min(3.0, m + half)
    assert e is not None
    return e.estimate, e.lower, e.upper


def _verdict(
    row: MetricRow, s: WeightedSums, b: WeightedSums | None, z: float, min_samples: int
) -> MetricRow:
    if b is None or b.n < min_samples or s.n < min_samples:
        return replace(row, verdict="too few samples")
    ma, mb = b.swy / b.sw, s.swy / s.sw
    d = mb - ma
    half = z * math.sqrt(s.variance(mb) + b.variance(ma))
    lo, hi = d - half, d + half
    if lo > 0 or hi < 0:
        up = lo > 0
        direction = DIRECTION[row.metric]
        if direction == 0:
            verdict = "higher" if up else "lower"
        else:
            verdict = "better" if up == (direction > 0) else "worse"
    else:
        verdict = "no detectable change"
    return replace(row, difference=d, diff_lower=lo, diff_upper=hi, verdict=verdict)


def _refusal_verdict(rows: list[MetricRow], release: str) -> None:
    """The refusal row of `release` (in place), judged with its companions: fewer refusals with more
    hallucination is refusals traded for invented answers; fewer with fewer false refusals, answerable
    questions answered; more with more false refusals, answerable questions refused."""
    mine = {r.metric: i for i, r in enumerate(rows) if r.release == release}
    if "refusal" not in mine:
        return
    i = mine["refusal"]
    row = rows[i]
    companion = {m: rows[mine[m]].verdict for m in ("hallucination", "false_refusal") if m in mine}
    verdict, note = row.verdict, ""
    if row.verdict == "lower":
        if companion.get("hallucination") == "worse":
            verdict, note = (
                "worse",
                "fewer refusals and more hallucination: refusals traded for invented answers",
            )
        elif companion.get("false_refusal") == "better":
            verdict, note = "better", "fewer false refusals: answerable questions answered"
        else:
            note = "fewer refusals: better only if the answers given instead are grounded"
    elif row.verdict == "higher":
        if companion.get("false_refusal") == "worse":
            verdict, note = "worse", "more false refusals: answerable questions refused"
        else:
            note = "more refusals: better only if the questions refused are unanswerable"
    rows[i] = replace(row, verdict=verdict, note=note)


def format_table(rows: list[MetricRow], confidence: float = 0.95) -> str:
    """The rows as the CLI prints them, the test stated first."""
    pct = f"{confidence:.0%}"
    out = [f"test: {TEST} ({pct}); intervals: {pct}"]
    header = ("release", "metric", "estimate", f"{pct} interval", "n", "vs", "difference", "verdict", "why")
    table = [header]
    for r in rows:
        diff = (
            f"{r.difference:+.3f} [{r.diff_lower:+.3f}, {r.diff_upper:+.3f}]"
            if r.difference is not None and r.diff_lower is not None and r.diff_upper is not None
            else ""
        )
        table.append(
            (
                terminal_line(r.release),  # a label value from traffic: escaped for the terminal
                r.metric,
                f"{r.estimate:.3f}",
                f"[{r.lower:.3f}, {r.upper:.3f}]",
                str(r.samples),
                terminal_line(r.baseline),
                diff,
                r.verdict,
                r.note,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(out)
