"""The verdicts in a real Phoenix: the synthetic service sends its traces to a Phoenix server
(`.venv-compat/phoenix`) over OTLP/HTTP and to the embedded broker as the Collector would; a sidecar
judges them with the offline judge and sends the judgement span (OTLP/gRPC) and the annotations
(REST) to the same Phoenix. Read back through Phoenix's API, each judged root span carries one
annotation per check and a `rag.judgement` child with the scores and claims of its results line;
headless Chromium shows them on the trace page. Two traces reach Phoenix only after they are
judged (the service's exporter is late): their annotations wait and land. `make test-compat`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import REPO, eventually, result_lines, running, sample, settings_for

from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import Message, generate, produce
from monitor.plumbing.safe_text import trace_text
from tests.compat.phoenix import Phoenix, browse, phoenix_server

pytestmark = [pytest.mark.compat, pytest.mark.kafka]

TEXT_LIMIT = 300
SCREENSHOT = REPO / "docs" / "images" / "phoenix-trace.png"


def send_traces(phoenix: Phoenix, messages: list[Message]) -> None:
    """As the service's OTLP exporter does (a TracesData message is an export request's bytes)."""
    for m in messages:
        r = httpx.post(
            f"{phoenix.url}/v1/traces",
            content=m.value,
            headers={"Content-Type": "application/x-protobuf"},
            timeout=10,
        )
        assert r.status_code == 200, r.text


def expected_checks(line: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """What the results line says each check scored: (score, label)."""
    out: dict[str, tuple[float, str]] = {}
    decided = [c for c in line["claims"] if c["decided"]]
    if decided:
        supported = sum(c["supported"] for c in decided)
        out["faithfulness"] = (supported / len(decided), "pass" if supported == len(decided) else "fail")
    if line.get("answerable_from_context") is False:
        hallucinated = line["hallucinated"]
        out["hallucination"] = (1.0, "hallucinated") if hallucinated else (0.0, "admitted_uncertainty")
    elif line.get("answerable_from_context") is True:
        out["false_refusal"] = (1.0, "false_refusal") if line["false_refusal"] else (0.0, "answered")
    return out


def judged_view(phoenix: Phoenix, line: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The trace's `rag.judgement` span (None: not there yet) and its root span's annotations."""
    spans = phoenix.spans(line["trace_id"])
    judgement = next((s for s in spans if s["name"] == "rag.judgement"), None)
    return judgement, phoenix.annotations(line["span_id"])


async def test_phoenix_shows_the_verdicts(broker: EmbeddedBroker, topic: str, tmp_path: Path) -> None:
    work = generate(8, seed=23, mode="per_trace")
    on_time, late = work.messages[:6], work.messages[6:]
    with phoenix_server(tmp_path) as phoenix:
        send_traces(phoenix, on_time)
        results = tmp_path / "results.jsonl"
        settings = settings_for(
            broker.bootstrap_servers,
            topic,
            results,
            events={
                "mode": "span",
                "traces_endpoint": phoenix.grpc_url,
                "protocol": "grpc",
                "export_interval_seconds": 0.1,
                "include_text": True,
                "max_text_chars": TEXT_LIMIT,
                "phoenix": {"url": phoenix.url, "span_wait_seconds": 120},
            },
        )
        async with running(settings) as sidecar:
            await produce(broker.bootstrap_servers, topic, [(m.key, m.value) for m in work.messages])
            await eventually(lambda: len(result_lines(results)) == 8, within=60, what="every trace judged")
            log = tmp_path / "phoenix.log"
            unknown = '"POST /v1/span_annotations?sync=true HTTP/1.1" 404'
            # The late traces' annotations meet Phoenix's 404 (span unknown) first and wait ...
            await eventually(lambda: unknown in log.read_text(errors="replace"), within=60, what="a 404")
            send_traces(phoenix, late)  # ... until their spans come
            lines = [line for line in result_lines(results) if line.get("claims") is not None]
            assert len(lines) == 8

            def all_there() -> bool:
                for line in lines:
                    judgement, annotations = judged_view(phoenix, line)
                    if judgement is None or len(annotations) < len(expected_checks(line)) + 1:
                        return False
                return True

            await eventually(all_there, within=90, what="annotations and judgement spans in Phoenix")
            stored = sum(len(judged_view(phoenix, line)[1]) for line in lines)
        # ... then land (every annotation is in Phoenix: `all_there`).
        assert '"POST /v1/span_annotations?sync=true HTTP/1.1" 200' in log.read_text(errors="replace")
        assert sample(sidecar, "ragmon_evaluation_events_total", sink="span", outcome="exported") == 8
        assert sample(sidecar, "ragmon_evaluation_events_total", sink="phoenix", outcome="exported") == stored
        for outcome in ("failed", "dropped"):
            for sink in ("span", "phoenix"):
                assert sample(sidecar, "ragmon_evaluation_events_total", sink=sink, outcome=outcome) == 0

        unfaithful = None
        for line in lines:
            judgement, annotations = judged_view(phoenix, line)
            assert judgement is not None
            # The judgement span: a child of the judged root span, an evaluator to Phoenix.
            assert judgement["parent_id"] == line["span_id"]
            assert judgement["context"]["trace_id"] == line["trace_id"]
            assert judgement["span_kind"] == "EVALUATOR"
            attrs = judgement["attributes"]
            assert attrs["rag.claims.total"] == len(line["claims"])
            events = judgement["events"]
            claims = [e["attributes"] for e in events if e["name"] == "rag.claim"]
            assert [c["rag.claim.verdict"] for c in claims] == [c["verdict"] for c in line["claims"]]
            assert [c["rag.claim.text"] for c in claims] == [
                trace_text(c["text"], TEXT_LIMIT) for c in line["claims"]
            ]
            checks = {a["name"]: a for a in annotations}
            for name, (score, label) in expected_checks(line).items():
                assert attrs[f"rag.evaluation.{name}.score"] == pytest.approx(score)
                assert attrs[f"rag.evaluation.{name}.label"] == label
                # The annotation on the root span: the same verdict, by code (the offline judge).
                result = checks[name]["result"]
                assert (result["score"], result["label"]) == (pytest.approx(score), label)
                assert checks[name]["annotator_kind"] == "CODE"
                assert checks[name]["metadata"]["replay"] is False
            assert "answer_relevance" in checks
            if "faithfulness" in checks and checks["faithfulness"]["result"]["label"] == "fail":
                unfaithful = line
                # include_text: the explanation names the unsupported claim.
                bad = next(c for c in line["claims"] if c["verdict"] != "supported" and c["decided"])
                assert trace_text(bad["text"], TEXT_LIMIT) in checks["faithfulness"]["result"]["explanation"]
        assert unfaithful is not None, "the workload has an ungrounded answer"

        # What a person sees: the trace page, its span tree and the root span's annotations.
        shot = tmp_path / "phoenix-trace.png"
        text = browse(f"{phoenix.url}/redirects/traces/{unfaithful['trace_id']}", shot)
        assert unfaithful["trace_id"] in text
        assert "rag.judgement" in text and "rag.request" in text
        assert "Annotations" in text and "Annotations 0" not in text
        assert shot.stat().st_size > 10_000
        if os.environ.get("RAGMON_UPDATE_SCREENSHOTS"):
            shutil.copyfile(shot, SCREENSHOT)
