"""Alert sinks: Alertmanager (API v2), a generic JSON webhook, and the log.

The judge stage raises and clears alerts (drift alarms) with `fire` and `resolve`, which only
change state: sending happens in `run`, a background task, so a down sink never blocks judging.
Alertmanager is told the state of every alert each `resend_seconds` (as Prometheus does): a firing
alert carries `endsAt` = now + 4 × resend, so if this process dies the alert resolves by itself
rather than firing forever; a resolved one is sent once with `endsAt` = now. The webhook gets
each transition once, and a firing alert again when `update` changes its attribution. Each send
is retried a bounded number of times with backoff; what still fails is counted
(`ragmon_alerts_sent_total{sink,outcome}`) and, for Alertmanager, sent again at the next resend.

A drift alert carries example traces (`Example`): up to `MAX_EXAMPLES` judged records that show
what went wrong, each with its trace id, a link from `trace_url_template` and a short reason. They
are span text, so data: made safe for a chat (`monitor.plumbing.safe_text.chat_text`: one line, Slack,
Markdown and HTML markup shown as text) and each reason clipped; trace ids are hex or the example
is not shown. Alertmanager gets them as string annotations
(`example_trace_ids`, `trace_url`, `example_traces`), the webhook also as a structured `examples`
list; the resolution carries the ones the alert fired with.

It also carries its change attribution (`Attribution`): the releases and services
over-represented among the failing records since the change point (`monitor.drift.attribution`
decides which, docs/alerts.md states the rule), at most `MAX_SUSPECTS`, as the annotations
`attribution` (a line each) and `suspect_release`, and in the webhook as a structured
`attribution` object. Label values are bounded by the stages, and made safe for a chat here all
the same.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from prometheus_client import Counter

from monitor.outputs.config import TRACE_ID_PLACEHOLDER, AlertSinksConfig
from monitor.plumbing.errors import plural
from monitor.plumbing.safe_text import chat_text

log = logging.getLogger(__name__)

_MAX_TRANSITIONS = 1000  # webhook transitions waiting; beyond, the oldest are dropped (and counted)
MAX_EXAMPLES = 5  # example traces per alert
REASON_CHARS = 200  # an example's reason, clipped
MAX_SUSPECTS = 3  # label values an alert's attribution names
_ATTRIBUTION_KEYS = ("attribution", "suspect_release")
_TRACE_ID = re.compile(r"[0-9a-f]{16}|[0-9a-f]{32}")  # W3C (32 hex) or Jaeger's 64-bit ids


def utc_time(at: float | None) -> datetime | None:
    """Unix seconds as a UTC time; None for none or out of range (anything may write a time)."""
    if at is None:
        return None
    try:
        return datetime.fromtimestamp(at, UTC)
    except (OverflowError, OSError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Example:
    """One example trace of an alert: a judged record that shows the failure."""

    trace_id: str
    reason: str
    at: datetime | None = None  # when the record ended (else started), when the line says

    @classmethod
    def of(cls, trace_id: str | None, reason: str, at: float | None = None) -> Example | None:
        """The example of a record, or None when its trace id is not a hex trace id (anything may
        write to the results topic, and the id goes into a URL)."""
        tid = (trace_id or "").lower()
        if not _TRACE_ID.fullmatch(tid) or not tid.strip("0"):  # all zeros: no trace (W3C)
            return None
        return cls(tid, chat_text(reason, REASON_CHARS), utc_time(at))

    def url(self, template: str | None) -> str | None:
        return template.replace(TRACE_ID_PLACEHOLDER, self.trace_id) if template else None

    def to_json(self, template: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"trace_id": self.trace_id, "reason": self.reason}
        if template:
            out["url"] = self.url(template)
        if self.at is not None:
            out["time"] = self.at.isoformat()
        return out


def example_annotations(examples: Sequence[Example], template: str | None) -> dict[str, str]:
    """Alertmanager annotations (strings) of an alert's examples; none without examples."""
    if not examples:
        return {}
    out = {"example_trace_ids": ",".join(e.trace_id for e in examples)}
    first = examples[0].url(template)
    if first:
        out["trace_url"] = first
    lines = []
    for e in examples:
        link = e.url(template)
        lines.append(f"{e.trace_id}: {e.reason}" + (f" <{link}>" if link else ""))
    out["example_traces"] = "\n".join(lines)
    return out


def _hhmm(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC") if at is not None else "an unknown time"


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "n/a"


@dataclass(frozen=True, slots=True)
class Suspect:
    """A label value (a release, a service) over-represented among an alert's failing records
    since the change point: its counts on both sides of the change."""

    dimension: str  # release | service
    value: str
    failing: int  # failing judged records since the change point with this value ...
    failing_total: int  # ... of all failing ones since
    judged: int  # judged records since the change point with this value ...
    judged_total: int
    before: int  # judged records of the comparison window before the change with this value ...
    before_total: int
    first_seen: datetime | None = None  # the slice's first record with this value (releases)

    def text(self, since: datetime | None) -> str:
        """One line: "release v1.4.2: 93 % of failing records since 14:02 UTC (93 of 100) ..."."""
        out = (
            f"{self.dimension} {chat_text(self.value, 64)}: "
            f"{_percent(self.failing, self.failing_total)} of failing records since {_hhmm(since)} "
            f"({self.failing} of {self.failing_total}; {_percent(self.judged, self.judged_total)} of the "
            f"{self.judged_total} judged since), {_percent(self.before, self.before_total)} of the "
            f"{self.before_total} judged before ({self.before})"
        )
        if self.first_seen is not None:
            out += f"; first seen {_hhmm(self.first_seen)}"
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "dimension": self.dimension,
            "value": chat_text(self.value, 64),
            "failing_since": self.failing,
            "failing_since_total": self.failing_total,
            "failing_share_since": round(self.failing / self.failing_total, 4)
            if self.failing_total
            else None,
            "judged_since": self.judged,
            "judged_since_total": self.judged_total,
            "judged_before": self.before,
            "judged_before_total": self.before_total,
            "share_before": round(self.before / self.before_total, 4) if self.before_total else None,
            "first_seen": self.first_seen.isoformat() if self.first_seen is not None else None,
        }


@dataclass(frozen=True, slots=True)
class Attribution:
    """What changed with a drift: the suspects (most over-represented first) among the failing
    records since the change point, against the judged records before it."""

    since: datetime | None  # the change point record's time
    failing_total: int
    before_total: int
    suspects: tuple[Suspect, ...] = ()

    @classmethod
    def of(
        cls, since: float | None, failing_total: int, before_total: int, suspects: Sequence[Suspect]
    ) -> Attribution:
        return cls(utc_time(since), failing_total, before_total, tuple(suspects[:MAX_SUSPECTS]))

    def names(self) -> tuple[tuple[str, str], ...]:
        """(dimension, value) of the suspects named: what a change of attribution compares."""
        return tuple((s.dimension, s.value) for s in self.suspects)

    def lines(self) -> list[str]:
        if self.suspects:
            return [s.text(self.since) for s in self.suspects]
        return [
            "no release or service over-represented among the "
            f"{plural(self.failing_total, 'failing record')} since {_hhmm(self.since)}"
            f" (against {self.before_total} judged before)"
        ]

    def annotations(self) -> dict[str, str]:
        out = {"attribution": "\n".join(self.lines())}
        release = next((s for s in self.suspects if s.dimension == "release"), None)
        if release is not None:
            out["suspect_release"] = chat_text(release.value, 64)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat() if self.since is not None else None,
            "failing_since_total": self.failing_total,
            "judged_before_total": self.before_total,
            "suspects": [s.to_json() for s in self.suspects],
        }


@dataclass(slots=True)
class Alert:
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    ends_at: datetime | None = None  # None while firing
    examples: tuple[Example, ...] = ()
    attribution: Attribution | None = None

    def to_alertmanager(self, resend: float, generator_url: str | None) -> dict[str, Any]:
        now = datetime.now(UTC)
        ends = self.ends_at or now + timedelta(seconds=4 * resend)
        out: dict[str, Any] = {
            "labels": self.labels,
            "annotations": self.annotations,
            "startsAt": self.starts_at.isoformat(),
            "endsAt": ends.isoformat(),
        }
        if generator_url:
            out["generatorURL"] = generator_url
        return out


def resolved_line(alert: Alert) -> str:
    """A resolved alert as a person reads it in the log: its name, what it said (the summary, else
    its labels as `key=value`), and how long it fired."""
    what = alert.annotations.get("summary") or ", ".join(
        f"{k}={v}" for k, v in alert.labels.items() if k != "alertname"
    )
    ended = alert.ends_at or datetime.now(UTC)
    seconds = max(0.0, (ended - alert.starts_at).total_seconds())
    took = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
    return (
        f"{alert.labels.get('alertname', '?')} {what}: no longer so, after {took} firing (since "
        f"{alert.starts_at:%Y-%m-%d %H:%M:%S} UTC)"
    )


@dataclass(slots=True)
class AlertDispatcher:
    config: AlertSinksConfig
    sent: Counter  # labels: sink, outcome
    alerts: dict[tuple[str, ...], Alert] = field(default_factory=dict)
    _transitions: deque[tuple[str, Alert]] = field(default_factory=lambda: deque(maxlen=_MAX_TRANSITIONS))
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def fire(
        self,
        key: tuple[str, ...],
        labels: dict[str, str],
        annotations: dict[str, str],
        examples: Sequence[Example] = (),
        attribution: Attribution | None = None,
    ) -> None:
        """Raise (or announce again) the alert `key`; `examples` worst first (the first
        `MAX_EXAMPLES` are kept); `attribution`: what changed with it, if known."""
        shown = tuple(examples[:MAX_EXAMPLES])
        annotations = {**annotations, **example_annotations(shown, self.config.trace_url_template)}
        if attribution is not None:
            annotations.update(attribution.annotations())
        if self.config.dashboard_url:
            annotations["dashboard_url"] = self.config.dashboard_url
        alert = Alert(labels, annotations, datetime.now(UTC), examples=shown, attribution=attribution)
        self.alerts[key] = alert
        self._transition("firing", alert)
        log.warning(
            "alert firing: %s %s%s%s",
            labels.get("alertname"),
            annotations.get("summary", ""),
            f" (example traces {annotations['example_trace_ids']})" if shown else "",
            f"; {'; '.join(attribution.lines())}" if attribution is not None else "",
        )

    def update(self, key: tuple[str, ...], attribution: Attribution) -> None:
        """A firing alert's attribution changed (the failing records since the change now name
        a suspect, or other ones): Alertmanager gets it at the next resend, the webhook a
        `firing` notification again, with the same `startsAt`."""
        alert = self.alerts.get(key)
        if alert is None or alert.ends_at is not None:
            return
        annotations = {k: v for k, v in alert.annotations.items() if k not in _ATTRIBUTION_KEYS}
        alert.annotations = {**annotations, **attribution.annotations()}
        alert.attribution = attribution
        self._transition("firing", alert)
        log.warning(
            "alert updated: %s %s; %s",
            alert.labels.get("alertname"),
            alert.annotations.get("summary", ""),
            "; ".join(attribution.lines()),
        )

    def resolve(self, key: tuple[str, ...]) -> None:
        alert = self.alerts.get(key)
        if alert is None or alert.ends_at is not None:
            return
        alert.ends_at = datetime.now(UTC)
        self._transition("resolved", alert)
        log.info("alert resolved: %s", resolved_line(alert))

    def _transition(self, status: str, alert: Alert) -> None:
        if self.config.webhook_url:
            if len(self._transitions) == self._transitions.maxlen:
                self.sent.labels(sink="webhook", outcome="dropped").inc()
            self._transitions.append((status, replace(alert)))  # as it is now: it may change
        self._wake.set()

    async def run(self) -> None:
        """Send until cancelled: at once on a transition, and every resend interval."""
        cfg = self.config
        async with httpx.AsyncClient(timeout=cfg.timeout_seconds) as client:
            while True:
                try:
                    async with asyncio.timeout(cfg.resend_seconds):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
                await self._send_all(client)

    async def _send_all(self, client: httpx.AsyncClient) -> None:
        cfg = self.config
        while self._transitions and cfg.webhook_url:
            status, alert = self._transitions.popleft()
            body = {"status": status, **alert.to_alertmanager(cfg.resend_seconds, None)}
            body["examples"] = [e.to_json(cfg.trace_url_template) for e in alert.examples]
            if alert.attribution is not None:
                body["attribution"] = alert.attribution.to_json()
            await self._post(client, "webhook", cfg.webhook_url, body)
        if cfg.alertmanager_url and self.alerts:
            generator = cfg.generator_url or cfg.dashboard_url
            url = cfg.alertmanager_url.rstrip("/") + "/api/v2/alerts"
            alerts = [a.to_alertmanager(cfg.resend_seconds, generator) for a in self.alerts.values()]
            if not await self._post(client, "alertmanager", url, alerts):
                return  # resolved ones too are told again at the next resend
        # Resolved alerts have been told (or there is no Alertmanager): only firing ones remain.
        self.alerts = {k: a for k, a in self.alerts.items() if a.ends_at is None}

    async def _post(self, client: httpx.AsyncClient, sink: str, url: str, body: Any) -> bool:
        delay = 0.5
        for attempt in range(self.config.attempts):
            try:
                response = await client.post(url, json=body)
                if response.status_code < 300:
                    self.sent.labels(sink=sink, outcome="ok").inc()
                    return True
                why = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                why = type(exc).__name__
            if attempt + 1 < self.config.attempts:
                await asyncio.sleep(delay)
                delay *= 2
        self.sent.labels(sink=sink, outcome="failed").inc()
        log.warning("alert sink %s failed after %d attempts (%s)", sink, self.config.attempts, why)
        return False
