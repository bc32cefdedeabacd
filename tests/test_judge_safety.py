"""The judge stage under hostile traffic, on the embedded broker: a huge record never blocks the
event loop (the member would be evicted from its group and loop on the same sample)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer
from support import eventually, result_lines, running, settings_for

from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce
from monitor.model import Chunk, RagRecord

_WORDS = ["the", "river", "Alder", "flows", "past", "Kent", "Mill", "and", "joins", "Severn", "in", "1841"]


def _text(chars: int, seed: int) -> str:
    """Sentences of few distinct words: every sentence aligns with every other, the lexical
    judge's worst case."""
    out: list[str] = []
    size, i = 0, seed
    while size < chars:
        words = [_WORDS[(i * 7 + k * 5) % len(_WORDS)] for k in range(8 + i % 12)]
        sentence = " ".join(words).capitalize() + f" in {1000 + (i * 37) % 1000}."
        out.append(sentence)
        size += len(sentence) + 1
        i += 1
    return " ".join(out)[:chars]


async def test_a_huge_record_is_judged_while_the_loop_keeps_running(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """A 500 KB answer over five 500 KB chunks (flat JSON, the default lexical judge): judged,
    clipped as an LLM prompt would be, while a 100 ms heartbeat on the sidecar's event loop never
    misses by a second and ordinary traffic keeps being ingested and judged."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    settings = settings_for(bs, topic, results)
    huge = RagRecord(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        service="rag-demo",
        query="When did the Alder join the Severn?",
        query_type="lookup",
        chunks=[Chunk(f"doc-{i}", _text(500_000, i * 1000), 0.9) for i in range(5)],
        answer=_text(500_000, 99),
    )
    work = generate(60, seed=91)
    gaps: list[float] = []

    async def heartbeat() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async with running(settings) as sidecar:
        beat = asyncio.create_task(heartbeat())
        producer = AIOKafkaProducer(bootstrap_servers=bs, max_request_size=8 << 20)
        await producer.start()
        try:
            await producer.send_and_wait(topic, json.dumps(huge.to_json_dict()).encode(), key=b"huge")
        finally:
            await producer.stop()
        await produce(bs, topic, work.pairs())
        ids = {t.trace_id for t in work.traces} | {huge.trace_id}
        written = lambda: {r["trace_id"] for r in result_lines(results)}  # noqa: E731
        await eventually(lambda: written() >= ids, within=120, what="every record judged")
        assert sidecar.ingest is not None and sidecar.ingest.records_seen == 61
        beat.cancel()
    line = next(r for r in result_lines(results) if r["trace_id"] == huge.trace_id)
    assert line["judge"]["outcome"] == "ok" and line["claims"], line.get("error")
    assert line["raw"]["clipped"] == {"answer_chars": 500_000, "chunks_cut": 5}
    assert max(gaps) < 1.0, f"the event loop stalled {max(gaps):.2f}s"
