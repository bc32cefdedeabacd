"""Alert sinks against a real Alertmanager (Debian `prometheus-alertmanager`, started here) and a
local webhook receiver: an alert shows firing, then resolved; a down sink never blocks and is
counted."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from prometheus_client import CollectorRegistry
from support import Webhook, eventually

from monitor.contracts.metrics import Metrics
from monitor.demo.broker import free_port
from monitor.outputs.alerts import AlertDispatcher
from monitor.outputs.config import AlertSinksConfig


def active(url: str) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = httpx.get(f"{url}/api/v2/alerts", timeout=5).json()
    return alerts


LABELS = {
    "alertname": "RagmonDriftDetected",
    "query_type": "lookup",
    "metric": "faithfulness",
    "severity": "warning",
}


async def test_an_alert_fires_then_resolves_in_alertmanager_and_the_webhook(
    alertmanager: str, webhook: Webhook
) -> None:
    metrics = Metrics(CollectorRegistry())
    config = AlertSinksConfig(
        alertmanager_url=alertmanager,
        webhook_url=webhook.url,
        dashboard_url="http://grafana.example/d/rag",
        resend_seconds=0.5,
    )
    dispatcher = AlertDispatcher(config, metrics.alerts_sent)
    task = asyncio.create_task(dispatcher.run())
    try:
        key = ("drift", "lookup", "faithfulness")
        dispatcher.fire(key, dict(LABELS), {"summary": "faithfulness of lookup drifted", "current": "0.81"})
        await eventually(lambda: len(active(alertmanager)) == 1, within=15, what="alert in Alertmanager")
        shown = active(alertmanager)[0]
        assert shown["labels"] == LABELS
        assert shown["status"]["state"] == "active"
        assert shown["annotations"]["dashboard_url"] == "http://grafana.example/d/rag"
        assert shown["generatorURL"] == "http://grafana.example/d/rag"
        await eventually(lambda: [b["status"] for b in webhook.bodies] == ["firing"], what="webhook firing")
        await asyncio.sleep(1.2)  # resends keep it firing, the webhook hears nothing new
        assert len(active(alertmanager)) == 1 and len(webhook.bodies) == 1
        dispatcher.resolve(key)
        await eventually(lambda: active(alertmanager) == [], within=15, what="alert resolved")
        await eventually(lambda: [b["status"] for b in webhook.bodies] == ["firing", "resolved"])
        assert webhook.bodies[1]["labels"] == LABELS
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    r = metrics.registry
    assert (
        r.get_sample_value("ragmon_alerts_sent_total", {"sink": "alertmanager", "outcome": "ok"}) or 0
    ) >= 3
    assert r.get_sample_value("ragmon_alerts_sent_total", {"sink": "webhook", "outcome": "ok"}) == 2


async def test_a_down_sink_never_blocks_and_is_counted() -> None:
    metrics = Metrics(CollectorRegistry())
    closed = f"http://127.0.0.1:{free_port()}"
    config = AlertSinksConfig(alertmanager_url=closed, resend_seconds=0.2, attempts=2, timeout_seconds=0.5)
    dispatcher = AlertDispatcher(config, metrics.alerts_sent)
    task = asyncio.create_task(dispatcher.run())
    try:
        started = time.monotonic()
        dispatcher.fire(("drift", "lookup", "faithfulness"), dict(LABELS), {"summary": "s"})
        assert time.monotonic() - started < 0.05  # fire only changes state
        r = metrics.registry

        def failed() -> float:
            return (
                r.get_sample_value("ragmon_alerts_sent_total", {"sink": "alertmanager", "outcome": "failed"})
                or 0
            )

        await eventually(lambda: failed() >= 2, within=15, what="failures counted, and retried")
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_resolved_alert_logs_a_sentence_not_a_python_dict(caplog: Any) -> None:
    metrics = Metrics(CollectorRegistry())
    dispatcher = AlertDispatcher(AlertSinksConfig(), metrics.alerts_sent)
    key = ("drift", "lookup", "faithfulness")
    summary = "faithfulness of lookup queries drifted from its reference"
    with caplog.at_level("INFO", logger="monitor.outputs.alerts"):
        dispatcher.fire(key, LABELS, {"summary": summary})
        dispatcher.resolve(key)
        dispatcher.fire(("x",), {"alertname": "RagmonOther", "query_type": "lookup"}, {})
        dispatcher.resolve(("x",))
    resolved = [r.getMessage() for r in caplog.records if r.getMessage().startswith("alert resolved")]
    assert resolved[0].startswith(f"alert resolved: RagmonDriftDetected {summary}: no longer so, after 0 s")
    assert resolved[1].startswith("alert resolved: RagmonOther query_type=lookup: no longer so")
    assert not [m for m in resolved if "{" in m or "'" in m], resolved
