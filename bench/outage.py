"""Judge outage benchmark: ingestion rate with the judge down ÷ with it up, and no judgement lost.

One process runs both stages (`Sidecar`, role all) against the embedded broker, with the Anthropic
judge (the real SDK) aimed at the tests' local Messages API server (`tests/fake_llm.FakeAPI`,
replies in ~0 ms). Three phases, each a backlog of the synthetic workload (`--traces` traces, three
OpenInference spans per message) produced while the ingest stage's partitions are paused, then
drained with them resumed, timed from resume to the last record counted (`records_seen`):

  up      the judge answers every request;
  down    it answers 529 (overloaded) to every request: the breaker opens and probes;
  up      it answers again; the run ends when every sample produced has its results line.

Reported: records/s in `down` ÷ in the first `up` (the issue's goal: >= 0.95; in one process the
judge's own work competes for the CPU while it is up, so the ratio can exceed 1), the results
written during the outage (a few: samples of the `up` phase judged before the breaker opened), the
samples produced, the results lines written, and how many say the judge failed (goal: none; every
sample gets a real judgement after recovery). Sampling: rate 0.05 plus the default floors, as a
production sidecar would run.

    python bench/outage.py                  # 20,000 traces a phase
    python bench/outage.py --traces 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fake_llm import FakeAPI, Reply, default_reply, error_body

from monitor.app.config import load_settings
from monitor.app.sidecar import Sidecar
from monitor.contracts.results import ResultLine
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce
from monitor.kafka.client import ensure_topics


async def drain_phase(sidecar: Sidecar, bs: str, topic: str, traces: int, seed: int) -> float:
    """Records/s of one backlog of `traces`, from resume to the last record counted."""
    ingest = sidecar.ingest
    assert ingest is not None
    work = generate(traces, seed=seed)
    ingest.source.pause()
    await produce(bs, topic, work.pairs())
    start_count = ingest.records_seen
    ingest.source.resume()
    t0 = time.perf_counter()
    while ingest.records_seen < start_count + traces:  # noqa: ASYNC110 (a counter, polled)
        await asyncio.sleep(0.01)
    return traces / (time.perf_counter() - t0)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    api = FakeAPI()
    api.thread.start()
    api.reset(f"sk-ant-bench-{uuid.uuid4().hex}")
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="outage-bench-") as tmp:
        bs = broker.bootstrap_servers
        topic = f"spans-{uuid.uuid4().hex[:8]}"
        await ensure_topics(load_settings(None, {"kafka": {"bootstrap_servers": bs}}).kafka, [topic], 3)
        results = Path(tmp) / "results.jsonl"
        settings = load_settings(
            None,
            {
                "kafka": {"bootstrap_servers": bs, "topic": topic, "auto_offset_reset": "earliest"},
                "assembly": {"grace_seconds": 0.05},
                "sampling": {"rate": 0.05},
                "judge": {
                    "backend": "anthropic",
                    "options": {"api_key": api.key, "base_url": api.url, "max_retries": 0},
                },
                "results": {"file": str(results)},
                "pipeline": {"samples_topic": f"{topic}-samples"},
            },
        )
        sidecar = Sidecar(settings)
        stop = asyncio.Event()
        task = asyncio.create_task(sidecar.run(stop))
        await asyncio.wait_for(sidecar.wait_assigned(), 60)
        assert sidecar.ingest is not None and sidecar.judge_stage is not None
        before = await drain_phase(sidecar, bs, topic, args.traces, seed=1)
        api.default = lambda path, body: Reply(529, error_body(path, "overloaded_error", "Overloaded"))
        written_before = sidecar.judge_stage.written
        during = await drain_phase(sidecar, bs, topic, args.traces, seed=2)
        breaker = sidecar.judge_stage.breaker.state.value
        written_during = sidecar.judge_stage.written - written_before
        api.default = default_reply
        t0 = time.perf_counter()
        while sidecar.judge_stage.written < sidecar.ingest.samples.delivered:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        recovered = time.perf_counter() - t0
        stop.set()
        await task
        lines = [ResultLine.model_validate_json(line) for line in results.read_text().splitlines()]
    api.server.shutdown()
    failed = sum(1 for r in lines if r.error)
    return {
        "traces_per_phase": args.traces,
        "records_per_s_up": round(before),
        "records_per_s_down": round(during),
        "down_over_up": round(during / before, 3),
        "breaker_during_outage": breaker,
        "results_written_during_outage": written_during,
        "samples_produced": sidecar.ingest.samples.delivered,
        "results_lines": len(lines),
        "results_failed": failed,
        "seconds_to_catch_up_after_recovery": round(recovered, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", type=int, default=20_000)
    logging.basicConfig(level=logging.ERROR)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
