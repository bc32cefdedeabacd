"""Memory held by the stages bounded in bytes, not only in count: the judge stage's held samples
(`pipeline.queue_bytes`). The trace assembler's byte bound and span cap are tested in
test_assemble.py (both assemblers)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from support import eventually, running, settings_for, slowed

from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.samples import encode_sample
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import produce


async def test_the_judge_stage_pauses_on_the_bytes_it_holds(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Samples of ~15 KB each with a slow judge: the stage pauses once it holds `queue_bytes`
    (150 KB, ten samples), long before `queue_size` (200): it used to read on to 200 samples
    (3 MB) whatever their size."""
    bs = broker.bootstrap_servers
    queue, queue_bytes = 200, 150_000
    settings = settings_for(
        bs, topic, tmp_path / "r.jsonl", pipeline={"queue_size": queue, "queue_bytes": queue_bytes}
    )
    text = "The pump moves 40 litres a minute. " * 400  # ~14 KB
    samples = []
    for i in range(400):
        record = RagRecord(
            trace_id=f"{i:032x}",
            span_id="1" * 16,
            service="svc",
            query="How much does the pump move?",
            query_type="lookup",
            chunks=[Chunk("c1", text, 0.9)],
            answer="It moves 40 litres a minute.",
        )
        samples.append((record.trace_id.encode(), encode_sample(record, 1.0, "svc", "span", time.time())))
    size = len(samples[0][1])
    assert 12_000 < size < 20_000
    most = [0, 0]
    async with running(settings, slowed(settings, 0.2)) as sidecar:
        stage = sidecar.judge_stage
        assert stage is not None

        async def watch() -> None:
            while True:
                most[0] = max(most[0], stage._held)
                most[1] = max(most[1], stage._held * size)
                await asyncio.sleep(0.005)

        watcher = asyncio.create_task(watch())
        try:
            # The first few tell the stage the samples' size; a fetch then takes what fits.
            await produce(bs, settings.pipeline.samples_topic, samples[:5])
            await eventually(lambda: stage.written == 5, what="the first samples written")
            await produce(bs, settings.pipeline.samples_topic, samples[5:])
            await eventually(lambda: stage.source.paused, what="the judge stage paused")
            await asyncio.sleep(2.0)
        finally:
            watcher.cancel()
    # Paused at the bytes bound (ten samples); the fetch in flight by then comes on top: a fetch
    # takes half the bytes bound at the last batch's mean size.
    assert most[0] <= 20, f"held {most[0]} samples ({most[1]} bytes) with queue_bytes {queue_bytes}"
