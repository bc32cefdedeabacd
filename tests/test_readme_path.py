"""The README's ten-minute path, as a user follows it: the embedded broker, the example service
exporting to it, `rag-monitor run` with the README's own quickstart.yaml (read from README.md, so
the test follows the text), the golden questions at 20 a second, then the README's fault (80 % of
answers invented) and its restore. What reaches the pager: per (slice, metric) one firing episode
and at most one resolved notification, none before the restore."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support import Webhook, degrade, eventually, example_service

from monitor.demo.broker import EmbeddedBroker
from monitor.drift.stage import MAX_UPDATES

REPO = Path(__file__).resolve().parent.parent


def readme_quickstart() -> dict:
    """The quickstart.yaml the README's step 3 writes."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"cat > quickstart\.yaml <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    assert found, "README.md no longer writes quickstart.yaml"
    return yaml.safe_load(found.group(1))


def ask(url: str) -> subprocess.Popen[bytes]:
    """README step 4, its own script with the service's address."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"```sh\npython - <<'EOF' &\n(.*?)\nEOF\n", text, re.S)
    assert found, "README.md no longer sends traffic with a python script"
    script = found.group(1).replace("http://127.0.0.1:8000", url)
    return subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stderr=subprocess.DEVNULL)


def alerts(hook: Webhook) -> list[tuple[float, str, tuple[str, str], str]]:
    """(arrival, status, (query type, metric), startsAt) of each drift notification so far."""
    return [
        (t, b["status"], (b["labels"]["query_type"], b["labels"]["metric"]), b["startsAt"])
        for t, b in zip(list(hook.arrivals), list(hook.bodies), strict=False)
        if b.get("labels", {}).get("alertname") == "RagmonDriftDetected"
    ]


@pytest.mark.timeout(420)
async def test_the_readme_path_pages_once_per_slice_and_metric_and_resolves_after_the_restore(
    broker: EmbeddedBroker, topic: str, tmp_path: Path, webhook: Webhook
) -> None:
    config = readme_quickstart()
    config["kafka"] |= {"bootstrap_servers": broker.bootstrap_servers, "topic": topic}
    config["results"]["file"] = str(tmp_path / "results.jsonl")
    config["alerts"]["webhook_url"] = webhook.url
    config["metrics"] = {"port": 0}
    (tmp_path / "quickstart.yaml").write_text(yaml.safe_dump(config))
    log = tmp_path / "sidecar.log"
    with example_service("--kafka", broker.bootstrap_servers, "--topic", topic) as (url, _):
        sidecar = run(tmp_path / "quickstart.yaml", log)
        traffic = ask(url)
        try:
            # three query types of the golden set's traffic armed (their references' records), then the fault
            armed = config["alerts"]["drift"]["reference_records"]
            await eventually(lambda: frozen(tmp_path, armed) >= 3, within=240, what="three slices armed")
            await asyncio.sleep(10)
            faulted = time.monotonic()
            await asyncio.to_thread(degrade, url, invent_rate=0.8)
            await eventually(
                lambda: any(t >= faulted for t, *_ in alerts(webhook)),
                within=90,
                what="an alert after the fault",
            )
            await asyncio.sleep(20)  # the fault persists: nothing it raised may resolve
            restored = time.monotonic()
            await asyncio.to_thread(degrade, url, invent_rate=0.0)
            # the fault invents facts: what it raises is faithfulness and hallucination
            raised = {
                key
                for t, status, key, _ in alerts(webhook)
                if status == "firing" and t >= faulted and key[1] in ("faithfulness", "hallucination")
            }
            with contextlib.suppress(AssertionError):  # what did not resolve is reported below
                await eventually(
                    lambda: resolved_after(alerts(webhook), restored) >= raised, within=180, what="resolves"
                )
        finally:
            traffic.kill()
            traffic.wait()
            sidecar.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                sidecar.wait(30)
            if sidecar.poll() is None:
                sidecar.kill()
    got = alerts(webhook)
    timeline = [(round(t - faulted, 1), status, key) for t, status, key, _ in got]
    before = {key for t, status, key, _ in got if status == "firing" and t < faulted}
    assert raised, f"the fault raised no faithfulness or hallucination alert: {timeline}"
    print(
        f"{len(raised)} (slice, metric) alerts raised by the fault, {len(before)} before it (false alarms "
        f"of a 50-record reference); notifications, seconds from the fault: {timeline}"
    )
    for key in {k for _, _, k, _ in got}:
        mine = [(t, status, starts) for t, status, k, starts in got if k == key]
        episodes = {starts for _, status, starts in mine if status == "firing"}
        for episode in episodes:
            updates = sum(1 for _, status, starts in mine if status == "firing" and starts == episode)
            assert updates <= 1 + MAX_UPDATES, f"{key} updated more than {MAX_UPDATES} times: {timeline}"
        assert len([s for _, s, _ in mine if s == "resolved"]) <= len(episodes), f"{key}: {timeline}"
    # One incident, one page: each alert the fault raised fired once, stayed firing while the fault
    # lasted, and resolved once, after the restore. (A slice already firing before the fault, a
    # false alarm of its small reference, is reported above and not held to this.)
    assert raised - before, f"every alert the fault raised was already firing before it: {timeline}"
    for key in raised - before:
        mine = [(t, status, starts) for t, status, k, starts in got if k == key]
        assert len({starts for _, status, starts in mine if status == "firing"}) == 1, f"{key}: {timeline}"
        ends = [t for t, status, _ in mine if status == "resolved"]
        assert len(ends) == 1 and ends[0] >= restored, (
            f"{key} did not resolve once after the restore: {timeline}"
        )


def resolved_after(got: list[tuple[float, str, tuple[str, str], str]], t0: float) -> set[tuple[str, str]]:
    return {key for t, status, key, _ in got if status == "resolved" and t >= t0}


def run(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """README step 3: `rag-monitor run --config quickstart.yaml`, from the config's folder."""
    cmd = [sys.executable, "-m", "monitor.cli", "run", "--config", str(config)]
    return subprocess.Popen(cmd, cwd=config.parent, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def frozen(tmp_path: Path, reference: int) -> int:
    """Slices with a reference's worth of judged records in the results file."""
    path = tmp_path / "results.jsonl"
    if not path.exists():
        return 0
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            qt = json.loads(line).get("query_type", "")
            counts[qt] = counts.get(qt, 0) + 1
    return sum(n >= reference for n in counts.values())
