"""The review queue on a demo-like run: which share of the queued records each reason brings.

The sidecar (embedded broker, offline lexical judge, every record sampled, the demo's drift
settings: references of 50 judged records, alarms from 10) gets the synthetic workload in three
phases, as `rag-monitor demo` degrades its service: healthy (`--healthy` traces, the workload's
default rates: 15 % of answers with an invented sentence, 20 % of unanswerable questions answered
anyway), degraded (`--degraded` traces, 80 % invented, 80 % answered anyway), healthy again. The
review queue runs on its defaults (`review.uniform_share` 0.02 unless `--uniform-share`,
`review.max_per_hour` 200, half of it for the uniform share) with `judge.repeat_fraction`
`--repeat`. The run takes a few minutes, well within the hour, so the hourly bound binds as it
would in the first hour of a deployment.

Reported: judged records, lines queued, per reason the lines that carry it and their share of the
lines (a line with two reasons counts under both, so shares add up to more than 1), and the
records dropped, by why. The lexical judge is deterministic: it never disagrees with itself, so
`disagreement` stays 0 here; an LLM judge's repeat judgements do differ.

    python bench/review_queue.py
    python bench/review_queue.py --healthy 1200 --degraded 600 --uniform-share 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from monitor.app.config import load_settings
from monitor.app.sidecar import Sidecar
from monitor.contracts.results import ReviewLine, ReviewReason
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import WorkloadConfig, generate, produce
from monitor.kafka.client import ensure_topics

DEGRADED = WorkloadConfig(ungrounded_rate=0.8, hallucination_rate=0.8)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="review-bench-") as tmp:
        bs = broker.bootstrap_servers
        topic = f"spans-{uuid.uuid4().hex[:8]}"
        review_file = Path(tmp) / "review.jsonl"
        settings = load_settings(
            None,
            {
                "kafka": {
                    "bootstrap_servers": bs,
                    "topic": topic,
                    "group_id": f"g-{topic}",
                    "auto_offset_reset": "earliest",
                },
                "assembly": {"grace_seconds": 0.2},
                "sampling": {"rate": 1.0},
                "judge": {"repeat_fraction": args.repeat},
                "alerts": {
                    "drift": {
                        "reference_records": 50,
                        "min_records": 10,
                        "min_effect": {"hallucination": 0.25},
                    }
                },
                "review": {"enabled": True, "file": str(review_file), "uniform_share": args.uniform_share},
            },
        )
        await ensure_topics(settings.kafka, [topic], 3)
        sidecar = Sidecar(settings)
        stop = asyncio.Event()
        task = asyncio.create_task(sidecar.run(stop))
        await asyncio.wait_for(sidecar.wait_assigned(), 60)
        stage = sidecar.judge_stage
        assert stage is not None and stage.review is not None
        t0 = time.perf_counter()
        sent = 0
        for n, seed, config in (
            (args.healthy, 1, None),
            (args.degraded, 2, DEGRADED),
            (args.healthy, 3, None),
        ):
            await produce(bs, topic, generate(n, seed=seed, config=config).pairs())
            sent += n
            while stage.written < sent:  # noqa: ASYNC110 (a counter, polled)
                await asyncio.sleep(0.1)
        review = stage.review
        while review.written < review.queued:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        seconds = time.perf_counter() - t0
        registry = sidecar.metrics.registry
        dropped = {
            f"{why}{' (uniform share)' if uniform == 'true' else ''}": int(value)
            for why in ("duplicate", "rate_limited", "queue_full")
            for uniform in ("true", "false")
            if (
                value := registry.get_sample_value(
                    "ragmon_review_dropped_total", {"reason": why, "uniform": uniform}
                )
            )
        }
        alerts = int(
            sum(
                s.value
                for f in registry.collect()
                for s in f.samples
                if s.name == "ragmon_drift_alarms_total"
            )
        )
        stop.set()
        await task
        lines = [ReviewLine.model_validate_json(raw) for raw in review_file.read_text().splitlines()]
    reasons = collections.Counter(
        r.value for line in lines for r in (line.review.reasons or []) if line.review
    )
    return {
        "traces": sent,
        "judged": stage.judged_seen,
        "seconds": round(seconds, 1),
        "drift_alarms": alerts,
        "queued": len(lines),
        "by_reason": {r.value: reasons.get(r.value, 0) for r in ReviewReason},
        "share_of_lines": {
            r.value: round(reasons.get(r.value, 0) / max(1, len(lines)), 3) for r in ReviewReason
        },
        "dropped": dropped,
        "settings": {
            "uniform_share": args.uniform_share,
            "max_per_hour": settings.review.max_per_hour,
            "uniform_budget": settings.review.uniform_budget,
            "repeat_fraction": args.repeat,
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--healthy", type=int, default=1200, help="traces in each healthy phase")
    parser.add_argument("--degraded", type=int, default=600, help="traces in the degraded phase")
    parser.add_argument("--uniform-share", type=float, default=0.02)
    parser.add_argument("--repeat", type=float, default=0.1, help="judge.repeat_fraction")
    logging.basicConfig(level=logging.ERROR)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
