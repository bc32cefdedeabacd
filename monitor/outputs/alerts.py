"""Alert sinks: Alertmanager (API v2), a generic JSON webhook, and the log.

The judge stage raises and clears alerts (drift alarms) with `fire` and `resolve`, which only
change state: sending happens in `run`, a background task, so a down sink never blocks judging.
Alertmanager is told the state of every alert each `resend_seconds` (as Prometheus does): a firing
alert carries `endsAt` = now + 4 × resend, so if this process dies the alert resolves by itself
rather than firing forever; a resolved one is sent once with `endsAt` = now. The webhook gets
each transition once. Each send is retried a bounded number of times with backoff; what still
fails is counted (`ragmon_alerts_sent_total{sink,outcome}`) and, for Alertmanager, sent again at
the next resend.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from prometheus_client import Counter

from monitor.outputs.config import AlertSinksConfig

log = logging.getLogger(__name__)

_MAX_TRANSITIONS = 1000  # webhook transitions waiting; beyond, the oldest are dropped (and counted)


@dataclass(slots=True)
class Alert:
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    ends_at: datetime | None = None  # None while firing

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


@dataclass(slots=True)
class AlertDispatcher:
    config: AlertSinksConfig
    sent: Counter  # labels: sink, outcome
    alerts: dict[tuple[str, ...], Alert] = field(default_factory=dict)
    _transitions: deque[tuple[str, Alert]] = field(default_factory=lambda: deque(maxlen=_MAX_TRANSITIONS))
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def fire(self, key: tuple[str, ...], labels: dict[str, str], annotations: dict[str, str]) -> None:
        if self.config.dashboard_url:
            annotations = {**annotations, "dashboard_url": self.config.dashboard_url}
        alert = Alert(labels, annotations, datetime.now(UTC))
        self.alerts[key] = alert
        self._transition("firing", alert)
        log.warning("alert firing: %s %s", labels.get("alertname"), annotations.get("summary", ""))

    def resolve(self, key: tuple[str, ...]) -> None:
        alert = self.alerts.get(key)
        if alert is None or alert.ends_at is not None:
            return
        alert.ends_at = datetime.now(UTC)
        self._transition("resolved", alert)
        log.info("alert resolved: %s %s", alert.labels.get("alertname"), alert.labels)

    def _transition(self, status: str, alert: Alert) -> None:
        if self.config.webhook_url:
            if len(self._transitions) == self._transitions.maxlen:
                self.sent.labels(sink="webhook", outcome="dropped").inc()
            self._transitions.append((status, alert))
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
