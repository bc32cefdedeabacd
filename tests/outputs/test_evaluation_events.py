"""Judgements as GenAI evaluation events: the mapping, and the real OTel SDK pipeline against a local
OTLP/HTTP receiver (no mock of the SDK or of HTTP)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from support import eventually, result_lines, running, sample, settings_for

from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce
from monitor.outputs.config import EventsConfig
from monitor.outputs.evaluation_events import (
    EVENT_NAME,
    EvaluationEventSink,
    evaluation_events,
)
from tests.outputs.verdict_cases import (
    ADMITTED,
    ERROR,
    FAILED,
    FALSE_REFUSAL,
    GROUNDED,
    HALLUCINATED,
    MARKERS,
    ONE_UNSUPPORTED,
    SECRET,
    SPAN,
    TRACE,
    Receiver,
    attrs,
    by_name,
    claims,
    closed_port,
    grpc_receiver,
    hung_url,
    judged,
    otlp_receiver,
    record,
    verdict,
)

# -- the mapping -----------------------------------------------------------------------------------


def test_grounded_answer() -> None:
    events = by_name(evaluation_events(GROUNDED))
    assert set(events) == {"faithfulness", "false_refusal", "answer_relevance"}
    assert verdict(events["faithfulness"]) == (1.0, "pass", "3 of 3 claims supported")
    assert verdict(events["false_refusal"])[:2] == (0.0, "answered")
    assert verdict(events["answer_relevance"])[:2] == (3.0, "relevant")
    for e in events.values():
        assert e["rag.query_type"] == "lookup"
        assert e["rag.service"] == "shop-rag"
        assert e["rag.judge.backend"] == "anthropic"
        assert e["rag.judge.model"] == "claude-judge-x"
        assert e["rag.sampling_weight"] == 4.0 and isinstance(e["rag.sampling_weight"], float)
        assert "error.type" not in e and "gen_ai.request.model" not in e
        assert isinstance(e["gen_ai.evaluation.score.value"], float)


def test_one_unsupported_claim() -> None:
    events = by_name(evaluation_events(ONE_UNSUPPORTED))
    assert verdict(events["faithfulness"]) == (0.75, "fail", "3 of 4 claims supported")
    assert verdict(events["answer_relevance"])[:2] == (2.0, "partial")


def test_unanswerable_checks_hallucination_not_refusal() -> None:
    events = by_name(evaluation_events(HALLUCINATED))
    assert set(events) == {"faithfulness", "hallucination", "answer_relevance"}
    assert verdict(events["faithfulness"])[:2] == (0.0, "fail")
    assert verdict(events["hallucination"])[:2] == (1.0, "hallucinated")

    events = by_name(evaluation_events(ADMITTED))
    assert set(events) == {"hallucination", "answer_relevance"}  # no claims: no faithfulness score
    assert verdict(events["hallucination"])[:2] == (0.0, "admitted_uncertainty")
    assert verdict(events["answer_relevance"])[:2] == (1.0, "irrelevant")


def test_refusal_of_an_answerable_question() -> None:
    events = by_name(evaluation_events(FALSE_REFUSAL))
    assert set(events) == {"false_refusal", "answer_relevance"}
    assert verdict(events["false_refusal"])[:2] == (1.0, "false_refusal")


def test_failed_judgement_is_one_event_with_error_type() -> None:
    (event,) = evaluation_events(FAILED)
    assert event["gen_ai.evaluation.name"] == "rag.judgement"
    assert event["error.type"] == "timeout"
    assert "gen_ai.evaluation.score.value" not in event and "gen_ai.evaluation.score.label" not in event
    assert ERROR not in repr(event)


def test_mapping_never_carries_text() -> None:
    for j in (GROUNDED, ONE_UNSUPPORTED, HALLUCINATED, ADMITTED, FALSE_REFUSAL, FAILED):
        text = repr(evaluation_events(j))
        assert not [m for m in MARKERS if m in text]


def test_config() -> None:
    cfg = EventsConfig(
        endpoint="http://user:pw@collector:4318/v1/logs?k=v", headers={"Authorization": SECRET}
    )
    assert EventsConfig().endpoint is None and EventsConfig().resource_attributes["service.name"]
    assert "SECRETMARKER" not in repr(cfg) and "SECRETMARKER" not in str(cfg)
    redacted = repr(cfg.redacted())
    assert "SECRETMARKER" not in redacted and "pw" not in redacted and "Authorization" in redacted
    assert EvaluationEventSink.from_config(EventsConfig()) is None
    for bad in ("collector:4318", "ftp://x/v1/logs", "http://x:port/v1/logs"):
        with pytest.raises(ValidationError):
            EventsConfig(endpoint=bad)
    with pytest.raises(ValidationError):
        EventsConfig(endpoint="http://x/v1/logs", surprise=1)  # type: ignore[call-arg]


# -- the real pipeline -----------------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver("/v1/logs") as rec:
        yield rec


def sink_for(url: str, **overrides: Any) -> EvaluationEventSink:
    cfg: dict[str, Any] = {"endpoint": url, "export_interval_seconds": 0.05, **overrides}
    sink = EvaluationEventSink.from_config(EventsConfig(**cfg))
    assert sink is not None
    return sink


def test_events_arrive_on_the_judged_span(receiver: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    sink = sink_for(receiver.url, headers={"Authorization": SECRET}, compression="gzip")
    judgements = [GROUNDED, ONE_UNSUPPORTED, HALLUCINATED, FALSE_REFUSAL, FAILED]
    started = time.perf_counter()
    for j in judgements:
        sink.emit(j, record())
    assert time.perf_counter() - started < 0.5  # queued, not sent
    expected = sum(len(evaluation_events(j)) for j in judgements)
    assert len(receiver.wait_for(expected)) == expected  # sent by the batch thread, before shutdown
    assert sink.shutdown(5.0) is True
    assert sink.stats().queued == sink.stats().exported == expected
    assert sink.stats().dropped == sink.stats().failed == 0

    exported = receiver.records()
    for resource, lr in exported:
        assert lr.event_name == EVENT_NAME
        assert lr.trace_id == bytes.fromhex(TRACE)
        assert lr.span_id == bytes.fromhex(SPAN)
        assert lr.flags & 0x01  # sampled
        assert lr.time_unix_nano > 0
        assert lr.body.WhichOneof("value") is None  # no body: nothing but attributes
        a = attrs(lr)
        assert a["event.name"] == EVENT_NAME
        assert a["rag.query_type"] == "lookup" and a["rag.judge.model"] == "claude-judge-x"
        assert a["rag.sampling_weight"] == 4.0
        service = {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"]
        assert service == "rag-monitor"
    names = sorted(attrs(lr)["gen_ai.evaluation.name"] for _, lr in exported)
    assert names.count("faithfulness") == 3 and names.count("rag.judgement") == 1

    scores = {
        (
            a["gen_ai.evaluation.name"],
            a.get("gen_ai.evaluation.score.label"),
            a.get("gen_ai.evaluation.score.value"),
        )
        for a in (attrs(lr) for _, lr in exported)
    }
    assert {
        ("faithfulness", "pass", 1.0),
        ("faithfulness", "fail", 0.75),
        ("faithfulness", "fail", 0.0),
        ("hallucination", "hallucinated", 1.0),
        ("false_refusal", "false_refusal", 1.0),
        ("false_refusal", "answered", 0.0),
        ("answer_relevance", "partial", 2.0),
        ("rag.judgement", None, None),
    } <= scores
    (failed,) = [lr for _, lr in exported if attrs(lr)["gen_ai.evaluation.name"] == "rag.judgement"]
    assert attrs(failed)["error.type"] == "timeout"
    assert failed.severity_text == "WARN"

    # Headers are sent, to the configured path, compressed as configured...
    for cap in receiver.requests:
        assert cap.path == "/v1/logs"
        assert cap.headers["authorization"] == SECRET
        assert cap.headers["content-encoding"] == "gzip"
        assert cap.headers["content-type"] == "application/x-protobuf"
        # ...and no user text is in any exported byte.
        assert not [m for m in MARKERS if m.encode() in cap.body]
    # The secret header and user text never reach our own logs (DEBUG included: urllib3 too).
    assert "SECRETMARKER" not in caplog.text
    assert not [m for m in MARKERS if m in caplog.text]
    assert "exporting over OTLP/http to http://127.0.0.1" in caplog.text and "Authorization" in caplog.text


def test_events_over_grpc() -> None:
    with grpc_receiver("logs") as (url, received):
        sink = sink_for(url, protocol="grpc", headers={"Authorization": SECRET})
        sink.emit(ONE_UNSUPPORTED, record())
        assert sink.shutdown(5.0) is True
    assert sink.stats().exported == len(evaluation_events(ONE_UNSUPPORTED))
    ((request, metadata),) = received
    assert metadata["authorization"] == SECRET
    logs = [lr for rl in request.resource_logs for sl in rl.scope_logs for lr in sl.log_records]
    assert {attrs(lr)["gen_ai.evaluation.name"] for lr in logs} == {
        "faithfulness",
        "false_refusal",
        "answer_relevance",
    }
    assert all(lr.span_id == bytes.fromhex(SPAN) for lr in logs)


def test_invalid_ids_skip_the_record(receiver: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    sink = sink_for(receiver.url)
    bad = [
        record(trace_id="xyz"),
        record(trace_id="0" * 32),
        record(span_id="b7ad6b716920333"),  # 15 chars
        record(span_id="zz" * 8),
    ]
    for r in bad:
        with caplog.at_level(logging.WARNING, logger="monitor.outputs.evaluation_events"):
            caplog.clear()
            sink.emit(GROUNDED, r)  # never raises
            assert len([r for r in caplog.records if "skipped" in r.getMessage()]) == 1
    sink.emit(judged(claims(1), answerable=True, admits=False, relevance=3, trace_id="ff" * 16), record())
    sink.emit(ADMITTED, record())
    assert sink.shutdown(5.0) is True
    assert sink.stats().skipped_records == len(bad) + 1  # the mismatched trace too
    assert len(receiver.records()) == len(evaluation_events(ADMITTED))


def test_receiver_down_neither_raises_nor_hangs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"http://127.0.0.1:{closed_port()}/v1/logs"
    sink = sink_for(url, headers={"Authorization": SECRET}, timeout_seconds=10)
    for _ in range(5):
        sink.emit(GROUNDED, record())
    time.sleep(0.3)  # let the batch thread start failing and retrying
    started = time.monotonic()
    assert sink.shutdown(1.5) is False
    assert time.monotonic() - started < 2.5
    s = sink.stats()
    assert s.queued == 15 and s.exported == 0
    sink.emit(GROUNDED, record())  # after shutdown: dropped, counted, no error
    assert sink.stats().dropped == 3
    assert sink.shutdown(1.0) is False  # idempotent
    assert "SECRETMARKER" not in caplog.text


def test_hung_receiver_full_queue_drops_and_bounded_shutdown() -> None:
    # Accepts TCP connections (kernel backlog) but never answers: the exporter's request hangs.
    with hung_url("/v1/logs") as url:
        sink = sink_for(url, timeout_seconds=30, max_queue_size=4)
        started = time.perf_counter()
        for _ in range(100):
            sink.emit(GROUNDED, record())
        assert time.perf_counter() - started < 1.0  # emit never waits for the receiver
        s = sink.stats()
        assert (s.queued, s.dropped) == (4, 300 - 4)
        started = time.monotonic()
        assert sink.shutdown(1.0) is False
        assert time.monotonic() - started < 2.0


async def test_sidecar_sends_an_event_set_per_judged_trace(
    receiver: Receiver, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Through Kafka and the offline judge: each judged trace's verdicts come back as events on that
    trace's root span, and the exported count reaches /metrics."""
    work = generate(12, seed=5, mode="per_trace")
    results = tmp_path / "r.jsonl"
    settings = settings_for(
        broker.bootstrap_servers,
        topic,
        results,
        events={"endpoint": receiver.url, "export_interval_seconds": 0.05},
    )
    async with running(settings) as sidecar:
        await produce(broker.bootstrap_servers, topic, [(m.key, m.value) for m in work.messages])
        await eventually(lambda: len(result_lines(results)) == 12, what="every trace judged")
    # Stopped: shutdown flushed the queue, and the final count was exported.
    lines = {r["trace_id"]: r for r in result_lines(results)}
    anchors = {(lr.trace_id.hex(), lr.span_id.hex()) for _, lr in receiver.records()}
    assert anchors == {(t, r["span_id"]) for t, r in lines.items()}
    names = [attrs(lr)["gen_ai.evaluation.name"] for _, lr in receiver.records()]
    assert names.count("answer_relevance") == 12  # one per judgement, whatever else applied
    exported = sample(sidecar, "ragmon_evaluation_events_total", sink="logs", outcome="exported")
    assert exported == len(receiver.records()) > 12
