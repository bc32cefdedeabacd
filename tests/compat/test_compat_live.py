"""The instrumentations users run, end to end: each app (tests/compat/apps) runs in its library's
virtualenv (`make compat-venvs`) with the real library, its real instrumentation and fake models,
exports OTLP/HTTP to a receiver this test runs, which produces the requests to the embedded broker
as the Collector's kafkaexporter does; a default sidecar reads them, and its results lines must
carry every request's query, answer and chunks, and nothing else (no index build, no embedding
call). `make test-compat` runs these; `make test` leaves them out (`-m "not compat"`)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from support import REPO, committed_total, eventually, result_lines, running, sample, settings_for

from monitor.demo.broker import EmbeddedBroker
from tests.compat.readback import makes_record, mismatches
from tests.compat.receiver import otlp_receiver, produce

pytestmark = [pytest.mark.compat, pytest.mark.kafka]

# capture name -> (app module, virtualenv under .venv-compat/)
APPS = {
    "llamaindex_openinference": ("llamaindex_openinference", "llamaindex"),
    "llamaindex_openllmetry": ("llamaindex_openllmetry", "llamaindex"),
    "langchain_openinference": ("langchain_openinference", "langchain"),
    "langchain_openllmetry": ("langchain_openllmetry", "langchain"),
    "langchain_openllmetry_040": ("langchain_openllmetry", "langchain-040"),
    "haystack_native": ("haystack_native", "haystack"),
    "haystack_openinference": ("haystack_openinference", "haystack"),
    "haystack2_native": ("haystack2_native", "haystack2"),
    "dspy_openinference": ("dspy_openinference", "dspy"),
}


def venv_python(venv: str) -> Path:
    python = REPO / ".venv-compat" / venv / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} missing: `make compat-venvs` makes it (tests/compat/requirements-{venv}.txt)")
    return python


@pytest.mark.parametrize("name", sorted(APPS))
async def test_an_instrumented_app_reads_right_through_the_broker(
    name: str, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    module, venv = APPS[name]
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    with otlp_receiver() as (endpoint, received):
        proc = await asyncio.create_subprocess_exec(
            str(venv_python(venv)),
            "-m",
            f"tests.compat.apps.{module}",
            "--endpoint",
            endpoint,
            "--service",
            name,
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=240)
        assert proc.returncode == 0, err.decode()[-4000:]
        bodies = received.take()
    expected = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    requests = [e for e in expected if e["kind"] == "request"]
    readable = [e for e in requests if makes_record(name, e["style"])]
    assert requests and bodies, (name, sys.executable)

    settings = settings_for(bs, topic, results)
    async with running(settings) as sidecar:
        produced = await produce(bs, topic, bodies)
        await eventually(lambda: len(result_lines(results)) >= len(readable), within=60, what="results lines")
        await eventually(
            lambda: sidecar.ingest is not None and sidecar.ingest.assembler.open_traces == 0,
            within=30,
            what="every trace finished",
        )
        committed = 0

        async def all_committed() -> None:
            nonlocal committed
            committed = await committed_total(bs, topic, settings.kafka.group_id)

        for _ in range(100):
            await all_committed()
            if committed == produced:
                break
            await asyncio.sleep(0.2)
        assert committed == produced
        unread = sum(
            sample(sidecar, "ragmon_rejected_total", reason=r)
            for r in ("missing_query", "missing_answer", "unreadable")
        )
    lines = result_lines(results)
    assert mismatches(name, expected, lines) == [], lines
    assert unread == len(requests) - len(readable)
