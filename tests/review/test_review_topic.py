"""`rag-monitor review --topic`: the queue read from a real (embedded) broker while the reviewer
works; lines that arrive later join the queue, bad ones are counted, and a broker that cannot be
reached is said on the screen, the labelling of what came going on."""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from review_cases import BERGEN, OSLO, SIZE, Pane, queue_lines, screen
from textual.pilot import Pilot

from monitor.contracts.results import encode_result
from monitor.demo.broker import EmbeddedBroker
from monitor.kafka.config import KafkaConfig
from monitor.review.app import ReviewApp
from monitor.review.labels import LabelsFile
from monitor.review.queue import QueueRead
from monitor.review.session import ReviewSession
from monitor.review.topic import topic_lines

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def lines() -> list[bytes]:
    return [encode_result(q) for q in queue_lines()]


async def _send(bootstrap: str, topic: str, *values: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)  # one partition: in order
    finally:
        await producer.stop()


def _app(bootstrap: str, topic: str, labels: Path) -> ReviewApp:
    feed = functools.partial(topic_lines, KafkaConfig(bootstrap_servers=bootstrap), topic)
    return ReviewApp(ReviewSession(QueueRead(), LabelsFile(labels)), feed=feed, source=f"topic {topic}")


async def _until(pilot: Pilot[None], text: str, tries: int = 300) -> str:
    shown = ""
    for _ in range(tries):
        shown = await screen(pilot)
        if text in shown:
            return shown
        await pilot.pause(0.1)
    raise AssertionError(f"{text!r} never shown:\n{shown}")


async def test_records_come_from_the_topic_as_they_are_queued(
    broker: EmbeddedBroker, topic: str, lines: list[bytes], tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    labels = tmp_path / "labels.jsonl"
    await _send(bs, topic, lines[0], b"\x00not json")
    async with _app(bs, topic, labels).run_test(size=SIZE) as pilot:
        shown = await _until(pilot, "When was the Oslo office opened?")
        await _until(pilot, "bad queue lines: 1 (1 not JSON)")
        assert "0 of 1 labelled" in shown
        await pilot.press("s", "s", "a", "enter")
        await _until(pilot, f"waiting for more on topic {topic}")
        await _send(bs, topic, lines[1])
        await _until(pilot, "Who leads the Bergen office?")
        await _until(pilot, "1 of 2 labelled")
        await pilot.press("s", "a", "enter")
        await _until(pilot, "2 of 2 labelled")
    assert [json.loads(x)["trace_id"] for x in labels.read_text().splitlines()] == [OSLO, BERGEN]

    # a restart reads the topic from its start: both labelled already, nothing shown again
    async with _app(bs, topic, labels).run_test(size=SIZE) as pilot:
        shown = await _until(pilot, "2 of 2 labelled")
        assert "All 2 queued records labelled" in shown


async def test_the_command_reads_the_topic_in_a_terminal(
    broker: EmbeddedBroker, topic: str, lines: list[bytes], tmp_path: Path, pane: Pane
) -> None:
    bs = broker.bootstrap_servers
    await _send(bs, topic, *lines)
    labels = tmp_path / "labels.jsonl"
    command = [sys.executable, "-m", "monitor", "review", "--topic", topic, "--bootstrap-servers", bs]
    pane.start([*command, "--labels", str(labels)], tmp_path)
    await asyncio.to_thread(pane.wait_for, "0 of 3 labelled")
    pane.keys("x")  # Oslo skipped: Bergen
    shown = await asyncio.to_thread(pane.wait_for, "Who leads the Bergen office?")
    assert "reasons: disagreement" in shown
    pane.keys("s", "a", "Enter")
    await asyncio.to_thread(pane.wait_for, "1 of 3 labelled")
    pane.keys("q")
    await asyncio.to_thread(pane.wait_for, "1 of 3 queued records labelled in")
    assert [json.loads(x)["trace_id"] for x in labels.read_text().splitlines()] == [BERGEN]


async def test_a_broker_out_of_reach_is_said_on_the_screen(tmp_path: Path) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with _app(f"127.0.0.1:{port}", "rag_review", tmp_path / "labels.jsonl").run_test(
        size=SIZE
    ) as pilot:
        shown = await _until(pilot, "error: reading topic rag_review stopped")
        assert "KafkaConnectionError" in shown
