"""No secret in any log line at any level: a process set up as `rag-monitor run` sets up its
logging (DEBUG), with a credential in every configurable URL and key, sends alerts to a real
Alertmanager and a webhook whose secret is its path, and logs a line that quotes them; its whole
stderr must carry none of them (issue 38 item 3: httpx logged the webhook's path and the
Alertmanager's user:password@ on every resend, at the default level)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from urllib.parse import urlsplit

from support import REPO, Webhook

PASSWORD = "pw-SECRET-4711"
HOOK_PATH = "/services/T0SECRET1/B0SECRET2/xoxbSECRET3"
KEY = "sk-ant-SECRETKEY-0815"

CHILD = textwrap.dedent(
    """
    import asyncio, json, logging, sys, time
    from monitor.cli import _redact_logs, _setup_logging
    from monitor.app.config import load_settings
    from monitor.contracts.metrics import Metrics
    from monitor.outputs.alerts import AlertDispatcher

    overrides = json.loads(sys.argv[1])
    _setup_logging("DEBUG")
    settings = load_settings(None, overrides)
    _redact_logs(settings)

    async def main():
        metrics = Metrics()
        dispatcher = AlertDispatcher(settings.alerts, metrics.alerts_sent)
        task = asyncio.create_task(dispatcher.run())
        labels = {"alertname": "RagmonDriftDetected"}
        dispatcher.fire(("drift", "lookup", "faithfulness"), labels, {"summary": "s"})
        deadline = time.monotonic() + 20
        def sent(sink):
            ok = {"sink": sink, "outcome": "ok"}
            return metrics.registry.get_sample_value("ragmon_alerts_sent_total", ok) or 0
        while (sent("webhook") < 1 or sent("alertmanager") < 2) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        key = overrides["judge"]["options"]["api_key"]
        log = logging.getLogger("monitor.test")
        log.warning("a line quoting %s and %s", settings.alerts.webhook_url, key)
        try:
            raise RuntimeError("failed posting to " + settings.alerts.alertmanager_url)
        except RuntimeError:
            log.exception("a traceback")
        print(json.dumps({"webhook": sent("webhook"), "alertmanager": sent("alertmanager")}))

    asyncio.run(main())
    """
)


def test_no_secret_reaches_the_log_at_debug(alertmanager: str, webhook: Webhook) -> None:
    am = urlsplit(alertmanager)
    hook = urlsplit(webhook.url)
    overrides = {
        "alerts": {
            "alertmanager_url": f"{am.scheme}://ops:{PASSWORD}@{am.netloc}",
            "webhook_url": f"{hook.scheme}://{hook.netloc}{HOOK_PATH}",
            "resend_seconds": 0.2,
        },
        "judge": {"backend": "anthropic", "options": {"api_key": KEY}},
    }
    run = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(overrides)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    sent = json.loads(run.stdout.strip().splitlines()[-1])
    assert sent["webhook"] >= 1 and sent["alertmanager"] >= 2  # the requests were made
    assert webhook.bodies and webhook.bodies[0]["status"] == "firing"
    log = run.stderr
    assert "DEBUG" in log and "a line quoting" in log and "a traceback" in log  # the log was written
    for secret in (PASSWORD, HOOK_PATH, "T0SECRET1", KEY):
        assert secret not in log, secret
    assert "a line quoting http://127.0.0.1:" in log and "***" in log
