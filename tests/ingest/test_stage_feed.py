"""The ingest stage's compiled loop (`_wire.feed`) against its own per-message path.

`IngestStage._process` hands each run of messages to `feed`, which decodes and assembles the plain
ones in C and stops at the first it leaves to `IngestStage._message` (no value, too large, JSON,
anything the reference decoder must take, problems). Two stages — one with `feed`, one without —
fed the same batches must finish the same records in the same order, count the same rejections
and leave the same offsets committable.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from decode_compare import REQUIRED, bad_input_corpus

from monitor.app.config import load_settings
from monitor.app.sidecar import ingest_stage
from monitor.contracts.metrics import Metrics
from monitor.demo.workload import trace_messages
from monitor.ingest.assemble import Finished
from monitor.ingest.decode import compiled_feed
from monitor.ingest.stage import IngestStage
from monitor.kafka.config import Encoding
from monitor.kafka.producer import KafkaOutput

PURE = os.environ.get("RAGMON_PURE_PYTHON", "") not in ("", "0")
pytestmark = pytest.mark.skipif(
    compiled_feed(Encoding.OTLP_PROTO) is None and (PURE or not REQUIRED), reason="compiled decoder unused"
)

TP = TopicPartition("spans", 0)
MAX_BYTES = 6_000


def stage(encoding: str, feed: bool) -> tuple[IngestStage, KafkaOutput, list[tuple[str, Any, Any, int]]]:
    settings = load_settings(
        None,
        {
            "kafka": {
                "bootstrap_servers": "127.0.0.1:9",
                "encoding": encoding,
                "max_message_bytes": MAX_BYTES,
            },
            "assembly": {"grace_seconds": 0.0},
            "sampling": {"rate": 0.0, "min_per_window": 0},
            "judge": {"backend": "none"},
            "pipeline": {"role": "ingest"},
        },
    )
    output = KafkaOutput(settings.kafka)  # never started: nothing is sampled
    st = ingest_stage(settings, Metrics(), output)
    st._account = None  # every record through `_finish`, recorded below (the accounting has its own test)
    st.tracker.assign([TP])
    if not feed:
        st._feed = None
    else:
        assert st._feed is not None
    seen: list[tuple[str, Any, Any, int]] = []
    finish = st._finish

    def recording(fin: Finished, now: float) -> None:
        record = fin.record.to_json_dict() if fin.record is not None else None
        seen.append((fin.trace_id, record, fin.reason, len(fin.refs)))
        finish(fin, now)

    st._finish = recording  # type: ignore[method-assign]
    return st, output, seen


def rejected(st: IngestStage) -> dict[str, float]:
    return {
        s.labels["reason"]: s.value
        for m in st.metrics.registry.collect()
        for s in m.samples
        if s.name == "ragmon_rejected_total" and s.value
    }


def messages() -> list[bytes | None]:
    """Workload traces (one and three to a message, split across messages) with the bad-input corpus,
    empty, missing and oversized values, and JSON (flat and OTLP) shuffled in."""
    values: list[bytes | None] = [v for _, v in trace_messages(120, seed=5, mode="per_trace")]
    values += [v for _, v in trace_messages(60, seed=6, mode="split")]
    values += [v for _, v in trace_messages(60, seed=7, mode="batched", batch=3)]
    odd: list[bytes | None] = [*bad_input_corpus(), b"", None, b"\n" * 10, b"x" * (MAX_BYTES + 1)]
    odd += [b'{"trace_id": "t1", "query": "q", "answer": "a", "chunks": []}', b' \n{"resourceSpans": []}']
    rng = random.Random(13)
    for v in odd * 3:
        values.insert(rng.randrange(len(values) + 1), v)
    return values


@pytest.mark.parametrize("encoding", ["auto", "otlp_proto"])
def test_feed_gives_what_the_per_message_path_gives(encoding: str) -> None:
    values = messages()

    async def drive(feed: bool) -> tuple[IngestStage, list[tuple[str, Any, Any, int]]]:
        st, output, seen = stage(encoding, feed)
        msgs = [SimpleNamespace(offset=i, key=None, value=v) for i, v in enumerate(values)]
        for i in range(0, len(msgs), 97):  # batches that split traces and runs
            await st._process({TP: msgs[i : i + 97]})
        await asyncio.sleep(0.01)
        await st._process({})
        for fin in st.assembler.flush(complete_only=False):
            st._finish(fin, time.time())
        await output.close()
        return st, seen

    fast, fast_seen = asyncio.run(drive(True))
    slow, slow_seen = asyncio.run(drive(False))
    assert fast_seen == slow_seen
    assert sum(1 for _, r, _, _ in fast_seen if r is not None) > 150  # records, not only rejects
    assert rejected(fast) == rejected(slow)
    assert {"empty", "too_large", "decode_error"} <= set(rejected(fast))
    assert fast.tracker.committable() == slow.tracker.committable() == {TP: len(values)}
    assert fast.records_seen == slow.records_seen


def test_feed_and_init_take_named_arguments() -> None:
    """`_wire.feed` and `_wire.init` take every argument by keyword (named fields, not positions):
    positions, a missing name or an unknown one are refused, and `feed` called by name works."""
    feed = compiled_feed(Encoding.OTLP_PROTO)
    assert feed is not None
    args: dict[str, Any] = dict(
        messages=[],
        refs=[],
        start=0,
        now_ns=1,
        auto=False,
        max_bytes=1,
        add_spans=print,
        now=1.0,
        finished=[],
    )
    assert feed(**args) == 0
    with pytest.raises(TypeError, match="by keyword"):
        feed(*args.values())
    with pytest.raises(TypeError, match="by keyword"):
        feed(**{k: v for k, v in args.items() if k != "now"})
    with pytest.raises(TypeError, match="by keyword"):
        feed(**{**args, "nw": 1.0})
    from monitor.ingest import _wire

    with pytest.raises((TypeError, RuntimeError)):  # called once already: refused either way
        _wire.init(1, 2)  # type: ignore[misc]
