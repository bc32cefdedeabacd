"""The judge stage under hostile traffic, on the embedded broker: a huge record never blocks the
event loop (the member would be evicted from its group and loop on the same sample); a rejected
key or an empty account is an outage that holds the samples, not a verdict on each of them."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from fake_llm import FakeAPI, Reply, anthropic_message, default_reply, error_body, good_output
from support import committed_total, eventually, result_ids, result_lines, running, sample, settings_for

from monitor.contracts.model import Chunk, RagRecord
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce

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
    # The sample carries the whole record (by default it would clip it first, to 16,000 characters
    # a chunk): what reaches the judge is what it must clip itself.
    pipeline = {"sample_max_chunk_chars": 500_000, "max_message_bytes": 8_000_000}
    settings = settings_for(bs, topic, results, pipeline=pipeline)
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


_CREDIT = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing."


@pytest.mark.parametrize(
    ("backend", "refusal"),
    [("anthropic", "revoked_key"), ("anthropic", "credit"), ("openai", "revoked_key")],
)
async def test_a_refused_key_or_account_holds_every_sample_until_it_works(
    api: FakeAPI,
    broker: EmbeddedBroker,
    topic: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    backend: str,
    refusal: str,
) -> None:
    """The real SDK (or httpx for openai) against a local server: while it answers 401 (the
    configured key revoked) or 400 "credit balance too low", no sample is written failed, no
    samples offset is committed, the breaker shows open and the log names the cause without the
    key; once the key works again, every sample gets a real judgement."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    key = api.key
    base_url = api.url if backend == "anthropic" else f"{api.url}/v1"
    options = {"api_key": key, "base_url": base_url, "max_retries": 0, "timeout_seconds": 2.0}
    breaker = {"failures": 3, "min_pause_seconds": 0.2, "max_pause_seconds": 1.0}
    settings = settings_for(
        bs, topic, results, judge={"backend": backend, "options": options, "breaker": breaker}
    )
    if refusal == "revoked_key":
        api.key = "sk-ant-FAKEKEY-the-one-that-replaced-it"  # the server now refuses ours: 401
    else:

        def no_credit(path: str, body: dict[str, Any]) -> Reply:
            return Reply(400, error_body(path, "invalid_request_error", _CREDIT))

        api.default = no_credit
    work = generate(30, seed=93)
    ids = {t.trace_id for t in work.traces}
    pc = settings.pipeline
    caplog.set_level(logging.WARNING, logger="monitor.judge.breaker")
    async with running(settings) as sidecar:
        await produce(bs, topic, work.pairs())
        await eventually(lambda: sidecar.ingest is not None and sidecar.ingest.records_seen == 30)
        await eventually(lambda: sample(sidecar, "ragmon_judge_circuit_open") == 1, what="breaker open")
        await asyncio.sleep(2.0)  # probes fail, commit intervals pass
        assert result_lines(results) == []
        assert await committed_total(bs, pc.samples_topic, pc.judge_group_id) == 0
        assert sample(sidecar, "ragmon_judge_circuit_open") == 1
        outcome = "auth_error" if refusal == "revoked_key" else "billing_error"
        assert sidecar.judge_stage is not None and sidecar.judge_stage.judge is not None
        model = sidecar.judge_stage.judge.model
        assert (
            sample(sidecar, "ragmon_judge_requests_total", backend=backend, model=model, outcome=outcome) > 0
        )
        # Recovery: the key works again.
        api.key, api.default = key, default_reply
        await eventually(lambda: result_ids(results) >= ids, within=60, what="every record judged")
        assert sample(sidecar, "ragmon_judge_circuit_open") == 0
    outcomes = {r["judge"]["outcome"] for r in result_lines(results) if "judge_skipped" not in r}
    assert outcomes == {"ok"}, outcomes
    down = [r.getMessage() for r in caplog.records if "paused" in r.getMessage()]
    assert len(down) == 1, down  # one line a minute
    assert outcome in down[0] and ("bad key" in down[0] or "credit balance" in down[0])
    assert key not in caplog.text


async def test_an_llm_judge_with_no_budget_configured_stops_at_the_default_cap(
    api: FakeAPI, broker: EmbeddedBroker, topic: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No `judge.budget` at all: the start says the default cap holds, and once the day's 10 USD
    cannot cover another judgement (a dear model here: 4 USD a reply, at most 8.2 reserved), the
    other samples are written skipped for the budget instead of being paid for."""
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"

    def long_reply(path: str, body: dict[str, Any]) -> Reply:
        message = anthropic_message(good_output(body))
        message["usage"] = {"input_tokens": 1000, "output_tokens": 2000}
        return Reply(body=message)

    api.default = long_reply
    dear = {"claude-haiku-4-5": {"input": 1.0, "output": 2000.0}}  # USD per million tokens
    options = {"api_key": api.key, "base_url": api.url, "max_retries": 0, "prices": dear}
    settings = settings_for(
        bs, topic, results, judge={"backend": "anthropic", "options": options, "workers": 1}
    )
    work = generate(20, seed=94)
    caplog.set_level(logging.WARNING, logger="monitor.judge.stage")
    async with running(settings) as sidecar:
        await produce(bs, topic, work.pairs())
        await eventually(lambda: len(result_ids(results)) == 20, within=60, what="every record written")
        await eventually(lambda: sample(sidecar, "ragmon_judge_budget_remaining", limit="usd") < 8.2)
    lines = result_lines(results)
    judged = [r for r in lines if "judge_skipped" not in r]
    assert len(judged) in (1, 2) and sum(r["judge"]["cost_usd"] for r in judged) <= 10.0
    assert {r["judge_skipped"] for r in lines if r not in judged} == {"budget"}
    assert "default 10 USD a day" in caplog.text
