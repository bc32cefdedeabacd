"""The judgement span: the mapping, and the real OTel SDK pipeline against local OTLP receivers,
HTTP and gRPC (a real grpcio server; no mock of the SDK or of the transport)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from pydantic import ValidationError

from monitor.contracts.model import Claim, Quote, Verdict
from monitor.outputs.config import EventsConfig
from monitor.outputs.judgement_span import JudgementSpanSink, judgement_span
from tests.outputs.verdict_cases import (
    FAILED,
    GROUNDED,
    HALLUCINATED,
    MARKERS,
    ONE_UNSUPPORTED,
    SECRET,
    SPAN,
    TRACE,
    Receiver,
    attrs,
    grpc_receiver,
    judged,
    otlp_receiver,
    record,
)

HOSTILE = (
    "\x1b[31mred\x1b[0m <img src=x onerror=alert(1)>the [refund](http://evil.example) window\u202eis\n30 days"
)


def event_attrs(plan_events: list[tuple[str, dict[str, Any]]], name: str) -> list[dict[str, Any]]:
    return [a for n, a in plan_events if n == name]


def scored(attributes: dict[str, Any], check: str) -> tuple[Any, Any]:
    return attributes[f"rag.evaluation.{check}.score"], attributes[f"rag.evaluation.{check}.label"]


# -- the mapping -----------------------------------------------------------------------------------


def test_span_carries_every_check_and_every_claim_without_text() -> None:
    plan = judgement_span(ONE_UNSUPPORTED)
    a = plan.attributes
    assert a["openinference.span.kind"] == "EVALUATOR"
    assert (a["rag.evaluation.faithfulness.score"], a["rag.evaluation.faithfulness.label"]) == (0.75, "fail")
    assert (a["rag.evaluation.false_refusal.score"], a["rag.evaluation.false_refusal.label"]) == (
        0.0,
        "answered",
    )
    assert a["rag.evaluation.answer_relevance.label"] == "partial"
    assert (a["rag.claims.total"], a["rag.claims.supported"], a["rag.claims.unsupported"]) == (4, 3, 1)
    assert a["rag.replay"] is False and a["rag.self_judged"] is False
    assert "faithfulness: fail (0.75) - 3 of 4 claims supported" in str(a["output.value"])
    # The semantic-convention attributes, one evaluation an event, as the log events carry them.
    checks = event_attrs(plan.events, "gen_ai.evaluation.result")
    assert sorted(c["gen_ai.evaluation.name"] for c in checks) == [
        "answer_relevance",
        "faithfulness",
        "false_refusal",
    ]
    claims = event_attrs(plan.events, "rag.claim")
    assert [c["rag.claim.verdict"] for c in claims] == ["supported"] * 3 + ["not_in_context"]
    assert [c["rag.claim.index"] for c in claims] == [0, 1, 2, 3]
    assert not [m for m in MARKERS if m in repr(plan)]  # no claim text, no chunk id by default


def test_include_text_sends_claims_cleaned_and_clipped() -> None:
    claim = Claim(
        HOSTILE + " " + "x" * 500,
        Verdict.CONTRADICTED,
        evidence=[Quote("c<b>1</b>", "refunds are <script>accepted</script>\x07 within 30 days", True)],
    )
    supported = Claim("CLAIMMARKER ok", True, "c1")
    j = judged([supported, claim], answerable=True, admits=False, relevance=2)
    plan = judgement_span(j, replay=True, text_limit=60)
    bad = event_attrs(plan.events, "rag.claim")[1]
    text = bad["rag.claim.text"]
    assert len(text) <= 60 and text.endswith("…")
    assert text.startswith("red the refund window is 30 days")
    for unsafe in ("\x1b", "<", ">", "](", "\u202e", "\n"):
        assert unsafe not in text
    assert bad["rag.claim.quotes"] == ["refunds are accepted within 30 days"]
    assert event_attrs(plan.events, "rag.claim")[0]["rag.claim.chunk_ids"] == ["c1"]
    (faith,) = [c for c in event_attrs(plan.events, "gen_ai.evaluation.result")
                if c["gen_ai.evaluation.name"] == "faithfulness"]  # fmt: skip
    assert faith["gen_ai.evaluation.explanation"].startswith('1 of 2 claims supported; unsupported: "red the')
    assert plan.attributes["rag.replay"] is True


def test_claims_beyond_the_limit_are_counted_not_sent() -> None:
    many = judged([Claim(f"c{i}", True, "c1") for i in range(30)], answerable=True, admits=False, relevance=3)
    plan = judgement_span(many, max_claims=10)
    assert len(event_attrs(plan.events, "rag.claim")) == 10
    assert plan.attributes["rag.claims.omitted"] == 20 and plan.attributes["rag.claims.total"] == 30


def test_config_needs_a_traces_endpoint_for_the_span() -> None:
    for mode in ("span", "both"):
        with pytest.raises(ValidationError, match="traces_endpoint"):
            EventsConfig(mode=mode)  # type: ignore[arg-type]
    cfg = EventsConfig(
        mode="span", traces_endpoint="http://c:4318/v1/traces", endpoint="http://c:4318/v1/logs"
    )
    assert cfg.span_on and not cfg.logs_on
    both = EventsConfig(
        mode="both", traces_endpoint="http://c:4318/v1/traces", endpoint="http://c:4318/v1/logs"
    )
    assert both.span_on and both.logs_on
    assert not EventsConfig(endpoint="http://c:4318/v1/logs").span_on  # logs: today's default
    with pytest.raises(ValidationError):
        EventsConfig(mode="span", traces_endpoint="collector:4317")


# -- the real pipeline -----------------------------------------------------------------------------


def span_sink(url: str, **overrides: Any) -> JudgementSpanSink:
    cfg: dict[str, Any] = {
        "mode": "span",
        "traces_endpoint": url,
        "export_interval_seconds": 0.05,
        **overrides,
    }
    sink = JudgementSpanSink.from_config(EventsConfig(**(cfg | overrides)))
    assert sink is not None
    return sink


def check_span(sp: Any) -> None:
    assert sp.name == "rag.judgement"
    assert sp.trace_id == bytes.fromhex(TRACE) and sp.parent_span_id == bytes.fromhex(SPAN)
    assert sp.span_id != bytes.fromhex(SPAN)
    assert sp.kind == ProtoSpan.SPAN_KIND_INTERNAL
    assert sp.end_time_unix_nano >= sp.start_time_unix_nano > 0
    a = attrs(sp)
    assert a["openinference.span.kind"] == "EVALUATOR" and a["rag.judge.model"] == "claude-judge-x"
    names = [e.name for e in sp.events]
    assert names.count("rag.claim") == a["rag.claims.total"]
    assert "gen_ai.evaluation.result" in names


@pytest.fixture
def traces() -> Iterator[Receiver]:
    with otlp_receiver("/v1/traces") as rec:
        yield rec


def test_spans_over_http(traces: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    sink = span_sink(traces.url, headers={"Authorization": SECRET}, compression="gzip")
    started = time.perf_counter()
    for j in (GROUNDED, ONE_UNSUPPORTED, HALLUCINATED, FAILED):
        sink.emit(j, record())
    assert time.perf_counter() - started < 0.5
    assert len(traces.wait_for(3)) == 3  # a failed judgement has no span
    assert sink.shutdown(5.0) is True
    s = sink.stats()
    assert (s.queued, s.exported, s.failed, s.dropped) == (3, 3, 0, 0)
    for resource, sp in traces.spans():
        check_span(sp)
        assert {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"] == "rag-monitor"
    labels = {attrs(sp)["rag.evaluation.faithfulness.label"] for _, sp in traces.spans()}
    assert labels == {"pass", "fail"}
    for cap in traces.requests:
        assert cap.headers["authorization"] == SECRET and cap.headers["content-encoding"] == "gzip"
        assert not [m for m in MARKERS if m.encode() in cap.body]
    assert "SECRETMARKER" not in caplog.text


def test_spans_over_grpc() -> None:
    with grpc_receiver("traces") as (url, received):
        sink = span_sink(url, protocol="grpc", headers={"Authorization": SECRET}, include_text=True)
        sink.emit(ONE_UNSUPPORTED, record())
        assert sink.shutdown(5.0) is True
    assert sink.stats().exported == 1
    ((request, metadata),) = received
    assert metadata["authorization"] == SECRET
    (sp,) = [sp for rs in request.resource_spans for ss in rs.scope_spans for sp in ss.spans]
    check_span(sp)
    texts = [attrs(e)["rag.claim.text"] for e in sp.events if e.name == "rag.claim"]
    assert texts[-1] == "CLAIMMARKER-k7 u0"  # include_text: the claims leave, deliberately
