"""Phoenix span annotations: the mapping, and the sink against a loopback HTTP server that answers
as Phoenix 20.26's `POST /v1/span_annotations?sync=true` does (200 when stored; 404 naming the
span ids it lacks, storing nothing; its behaviour against a real Phoenix is
tests/compat/test_phoenix_live.py). Retries, waits for late spans, refusals and bounds."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from support import eventually

from monitor.app.config import load_settings
from monitor.judge.model import SelfEvaluationGuard
from monitor.outputs.config import PhoenixConfig
from monitor.outputs.phoenix_annotations import PhoenixAnnotationSink, span_annotations
from tests.outputs.verdict_cases import (
    FAILED,
    GROUNDED,
    MARKERS,
    ONE_UNSUPPORTED,
    SPAN,
    claims,
    closed_port,
    hung_url,
    judged,
    record,
)

TOKEN = "px-TOKENMARKER-t9"
OTHER_SPAN = "c8be7c8270314442"


@dataclass
class FakePhoenix:
    """Known spans, the annotations stored (span id, name) -> body, every request seen."""

    url: str = ""
    known: set[str] = field(default_factory=set)
    stored: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    status: int | None = None  # answer this to everything, when set

    def names(self, span_id: str) -> set[str]:
        return {name for (sid, name) in self.stored if sid == span_id}


@pytest.fixture
def phoenix() -> Iterator[FakePhoenix]:
    fake = FakePhoenix(known={SPAN})
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            with lock:
                fake.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                if fake.status is not None:
                    return self.reply(fake.status, "no")
                if self.path != "/v1/span_annotations?sync=true":
                    return self.reply(404, "Not Found")
                missing = {d["span_id"] for d in body["data"]} - fake.known
                if missing:
                    return self.reply(404, f"Spans with IDs {', '.join(sorted(missing))} do not exist.")
                for d in body["data"]:
                    fake.stored[(d["span_id"], d["name"])] = d
            self.reply(200, json.dumps({"data": [{"id": "x"} for _ in body["data"]]}))

        def reply(self, status: int, text: str) -> None:
            raw = text.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def sink_for(url: str, **overrides: Any) -> PhoenixAnnotationSink:
    sink = PhoenixAnnotationSink.from_config(
        PhoenixConfig(url=url, span_retry_seconds=0.1, **overrides), text_limit=None
    )
    assert sink is not None
    sink.start()
    return sink


# -- the mapping -----------------------------------------------------------------------------------


def test_one_annotation_per_check_by_the_right_annotator() -> None:
    notes = {a["name"]: a for a in span_annotations(ONE_UNSUPPORTED, SPAN.upper(), replay=True)}
    assert set(notes) == {"faithfulness", "false_refusal", "answer_relevance"}
    faith = notes["faithfulness"]
    assert faith["span_id"] == SPAN and faith["annotator_kind"] == "LLM"  # an anthropic judge
    assert faith["result"] == {"label": "fail", "score": 0.75, "explanation": "3 of 4 claims supported"}
    assert faith["identifier"] == "rag-monitor"
    meta = faith["metadata"]
    assert meta["replay"] is True and meta["self_judged"] is False and meta["judge.model"] == "claude-judge-x"
    assert not [m for m in MARKERS if m in json.dumps(notes)]
    lexical = judged(claims(1), answerable=True, admits=False, relevance=3)
    lexical.backend = "lexical"
    SelfEvaluationGuard().check("claude-judge-x", lexical)  # the judge wrote the answer
    (note, *_) = span_annotations(lexical, SPAN)
    assert note["annotator_kind"] == "CODE"
    assert note["metadata"]["self_judged"] is lexical.self_judged


# -- the sink ----------------------------------------------------------------------------------------


async def test_annotations_are_stored_with_the_token(
    phoenix: FakePhoenix, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sink = sink_for(phoenix.url, token=TOKEN)
    sink.emit(GROUNDED, record())
    sink.emit(FAILED, record())  # a failed judgement has nothing to annotate
    await eventually(lambda: len(phoenix.stored) == 3, within=10, what="annotations stored")
    assert await sink.close(2.0) is True
    assert phoenix.names(SPAN) == {"faithfulness", "false_refusal", "answer_relevance"}
    s = sink.stats()
    assert (s.queued, s.exported, s.failed, s.dropped) == (3, 3, 0, 0)
    path, headers, _ = phoenix.requests[0]
    assert path == "/v1/span_annotations?sync=true"  # synced: a 404 tells a span Phoenix lacks
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert "TOKENMARKER" not in caplog.text and "TOKENMARKER" not in repr(sink.stats())


async def test_the_token_comes_from_a_file(phoenix: FakePhoenix, tmp_path: Path) -> None:
    secret = tmp_path / "phoenix-token"
    secret.write_text(f"{TOKEN}\n")
    sink = sink_for(phoenix.url, token_file=str(secret))
    sink.emit(GROUNDED, record())
    await eventually(lambda: len(phoenix.stored) == 3, within=10, what="annotations stored")
    await sink.close(1.0)
    assert phoenix.requests[0][1]["authorization"] == f"Bearer {TOKEN}"
    with pytest.raises(ValueError, match="phoenix-token-missing") as caught:
        PhoenixConfig(url=phoenix.url, token_file=tmp_path / "phoenix-token-missing").bearer()
    assert "TOKENMARKER" not in str(caught.value)
    with pytest.raises(ValidationError, match="not both"):
        PhoenixConfig(url=phoenix.url, token_file=secret, token=TOKEN)


async def test_a_span_phoenix_does_not_have_yet_waits_and_lands(phoenix: FakePhoenix) -> None:
    sink = sink_for(phoenix.url, batch_size=100, span_wait_seconds=30)
    sink.emit(GROUNDED, record())
    sink.emit(ONE_UNSUPPORTED, record(span_id=OTHER_SPAN))  # the service has not sent it yet
    await eventually(lambda: len(phoenix.stored) == 3, within=10, what="the known span's annotations")
    assert phoenix.names(OTHER_SPAN) == set()
    phoenix.known.add(OTHER_SPAN)  # the service's exporter catches up
    await eventually(lambda: len(phoenix.names(OTHER_SPAN)) == 3, within=10, what="the late span's")
    assert await sink.close(2.0) is True
    assert sink.stats().exported == 6 and sink.stats().failed == 0


async def test_a_span_that_never_comes_is_given_up_and_counted(phoenix: FakePhoenix) -> None:
    sink = sink_for(phoenix.url, span_wait_seconds=0.5)
    sink.emit(GROUNDED, record(span_id=OTHER_SPAN))
    await eventually(lambda: sink.stats().failed == 3, within=10, what="given up")
    assert phoenix.stored == {} and len(phoenix.requests) >= 2  # retried meanwhile
    assert await sink.close(1.0) is False


@pytest.mark.parametrize(("status", "tries"), [(503, 3), (429, 3), (401, 1), (422, 1)])
async def test_failures_retry_or_give_up(phoenix: FakePhoenix, status: int, tries: int) -> None:
    phoenix.status = status
    sink = sink_for(phoenix.url, attempts=3)
    sink.emit(GROUNDED, record())
    await eventually(lambda: sink.stats().failed == 3, within=15, what="the batch given up")
    assert len(phoenix.requests) == tries  # transient: retried with backoff; a refusal: once
    await sink.close(1.0)


async def test_dead_or_hung_phoenix_never_holds_the_caller() -> None:
    for url_of in (lambda: f"http://127.0.0.1:{closed_port()}", None):
        with hung_url() as hung:
            url = url_of() if url_of is not None else hung
            sink = sink_for(url, max_queue_size=4, timeout_seconds=30, attempts=50)
            started = time.perf_counter()
            for _ in range(10):
                sink.emit(GROUNDED, record())
            assert time.perf_counter() - started < 0.5
            await asyncio.sleep(0.3)
            s = sink.stats()
            assert s.queued == 4 and s.dropped == 26 and s.exported == 0
            started = time.monotonic()
            assert await sink.close(1.0) is False
            assert time.monotonic() - started < 2.0
            assert sink.stats().failed == 4  # counted, not lost silently
            sink.emit(GROUNDED, record())  # after close: dropped, no error
            assert sink.stats().dropped == 29


async def test_the_queue_is_bounded_in_bytes() -> None:
    with hung_url() as url:
        sink = sink_for(url, max_queue_bytes=2000, timeout_seconds=30)
        for _ in range(10):
            sink.emit(GROUNDED, record())
        s = sink.stats()
        assert 0 < s.queued < 10 and s.dropped == 30 - s.queued
        assert sink.budget.pending_bytes <= 2000
        await sink.close(0.5)


def test_config_show_masks_the_token_and_url_credentials() -> None:
    settings = load_settings(
        None, {"events": {"phoenix": {"url": "http://u:pw@phoenix:6006/", "token": TOKEN}}}
    )
    shown = json.dumps(settings.redacted())
    assert "TOKENMARKER" not in shown and "pw@" not in shown and "http://phoenix:6006/" in shown
    assert TOKEN in settings.secrets()  # and so blanked from every log line
    assert "TOKENMARKER" not in repr(settings.events.phoenix)
