"""The sidecar end to end against the real embedded broker: wire formats, layouts, dialects."""

from __future__ import annotations

import json
from pathlib import Path

from support import (
    eventually,
    read_topic,
    result_ids,
    result_lines,
    running,
    sample,
    sdk_trace,
    settings_for,
    to_otlp_json,
)

from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig

GOLDEN = Path(__file__).resolve().parent.parent / "examples" / "golden.jsonl"


async def test_every_layout_and_wire_format_becomes_records(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    per_trace = generate(30, seed=1, mode="per_trace")
    batched = generate(30, seed=2, mode="batched", batch=7)
    split = generate(30, seed=3, mode="split", batch=10)  # children before roots, traces interleaved
    as_json = generate(10, seed=4, mode="per_trace")
    flat = generate(10, seed=5).traces
    pairs = per_trace.pairs() + batched.pairs() + split.pairs()
    pairs += [(k, to_otlp_json(v)) for k, v in as_json.pairs()]
    pairs += [
        (
            None,
            json.dumps(
                {
                    "trace_id": t.trace_id,
                    "query": t.query,
                    "answer": t.answer,
                    "query_type": t.query_type,
                    "chunks": [{"id": c, "content": "text", "score": 0.5} for c in t.chunk_ids],
                }
            ).encode(),
        )
        for t in flat
    ]
    truths = {t.trace_id: t for w in (per_trace, batched, split, as_json) for t in w.traces}
    truths.update({t.trace_id: t for t in flat})

    results = tmp_path / "results.jsonl"
    async with running(settings_for(broker.bootstrap_servers, topic, results)) as sidecar:
        assert await produce(broker.bootstrap_servers, topic, pairs) == len(pairs)
        await eventually(lambda: result_ids(results) >= truths.keys(), what="every trace in the results")
        # Windowed, weighted estimates with bounds, per slice and overall ("all").
        await eventually(
            lambda: sample(sidecar, "ragmon_window_samples", query_type="all") >= len(truths) - 10
        )
        for qt in ("all", "lookup"):
            low, est, high = (
                sample(sidecar, "ragmon_faithfulness_window_ratio", query_type=qt, bound=b)
                for b in ("lower", "estimate", "upper")
            )
            assert 0 <= low <= est <= high <= 1 and high - low > 0

    lines = result_lines(results)
    assert {r["trace_id"] for r in lines} == truths.keys()
    for r in lines:
        truth = truths[r["trace_id"]]
        assert r["query"] == truth.query and r["answer"] == truth.answer
        assert [c["id"] for c in r["chunks"]] == list(truth.chunk_ids)
        assert r["query_type"] == truth.query_type
        assert r["sampling_weight"] == 1.0
    by_type: dict[str, int] = {}
    for t in truths.values():
        by_type[t.query_type] = by_type.get(t.query_type, 0) + 1
    for qt, n in by_type.items():
        counted = sum(
            sample(sidecar, "ragmon_records_total", service=s, query_type=qt)
            for s in ("rag-demo", "unknown_service")
        )
        assert counted >= n  # at-least-once: never fewer
    assert sample(sidecar, "ragmon_rejected_total", reason="decode_error") == 0

    # Every record was judged (offline lexical judge, the default) with claim-level verdicts.
    spans_truth = {t.trace_id: t for w in (per_trace, batched, split, as_json) for t in w.traces}
    outcomes: dict[str, list[dict[str, object]]] = {}
    for r in lines:
        if r["trace_id"] in spans_truth:
            assert r["judge"]["backend"] == "lexical" and r["error"] is None
            outcomes.setdefault(spans_truth[r["trace_id"]].outcome, []).append(r)
    assert all(r["faithfulness"] == 1.0 for r in outcomes["grounded"])
    assert all(r["faithfulness"] < 1.0 for r in outcomes.get("ungrounded", []))  # type: ignore[operator]
    for r in outcomes.get("refusal", []):
        assert r["faithfulness"] is None and r["answer_admits_uncertainty"] and not r["hallucinated"]
    claims = sum(len(r["claims"]) for rs in outcomes.values() for r in rs)  # type: ignore[arg-type]
    metric_claims = sum(
        s.value
        for f in sidecar.metrics.registry.collect()
        for s in f.samples
        if s.name == "ragmon_claims_total"
    )
    assert metric_claims >= claims > 0


async def test_other_dialects_through_kafka(broker: EmbeddedBroker, topic: str, tmp_path: Path) -> None:
    genai_docs = json.dumps(
        [{"id": "g1", "score": 0.9, "content": "Paris is the capital."}, {"id": "g2", "score": 0.4}]
    )
    genai_id, genai = sdk_trace(
        [
            ("invoke_agent rag", {"gen_ai.operation.name": "invoke_agent", "rag.query_type": "lookup"}),
            (
                "retrieval",
                {
                    "gen_ai.operation.name": "retrieval",
                    "gen_ai.retrieval.query.text": "Capital of France?",
                    "gen_ai.retrieval.documents": genai_docs,
                },
            ),
            (
                "chat",
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "m-genai",
                    "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": "Paris."}]}]
                    ),
                },
            ),
        ],
        service="svc-genai",
    )
    legacy_id, legacy = sdk_trace(
        [
            (
                "workflow",
                {
                    "traceloop.span.kind": "workflow",
                    "traceloop.entity.input": json.dumps({"inputs": {"question": "Who wrote Hamlet?"}}),
                    "traceloop.entity.output": json.dumps({"outputs": {"answer": "Shakespeare."}}),
                },
            ),
            (
                "openai.chat",
                {
                    "gen_ai.prompt.0.role": "user",
                    "gen_ai.prompt.0.content": "Who wrote Hamlet?",
                    "gen_ai.completion.0.content": "Shakespeare.",
                    "gen_ai.request.model": "m-legacy",
                },
            ),
        ],
        service="svc-traceloop",
    )
    results = tmp_path / "r.jsonl"
    golden = {"file": str(GOLDEN), "target": "support:oracle_target", "interval_seconds": 1.0}
    results_topic = f"{topic}-results"
    bs = broker.bootstrap_servers
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [results_topic], partitions=1)
    settings = settings_for(
        broker.bootstrap_servers,
        topic,
        results,
        judge={"repeat_fraction": 1.0},
        golden=golden,
        results={"topic": results_topic},
    )
    async with running(settings) as sidecar:
        await produce(broker.bootstrap_servers, topic, [(None, genai), (None, legacy)])
        await eventually(lambda: {genai_id, legacy_id} <= result_ids(results))
        # The scheduled golden replay ran on this member (it owns partition 0) against a perfect target.
        await eventually(lambda: sample(sidecar, "ragmon_golden_last_run_timestamp_seconds") > 0)
        assert sample(sidecar, "ragmon_golden_metric_ratio", query_type="all", metric="recall_at_k") == 1.0
    # The results topic holds the same lines as the file, keyed by query type (the drift stage's
    # one partition per slice).
    lines = [(m.key, json.loads(m.value)) for m in await read_topic(bs, results_topic, count=2, within=5.0)]
    assert {v["trace_id"] for _, v in lines} == {genai_id, legacy_id}
    assert all(k == v["query_type"].encode() for k, v in lines)
    # Judged twice: the deterministic lexical judge agrees with itself.
    assert sample(sidecar, "ragmon_judge_repeats_total") == 2
    assert all(r["repeat_disagreements"] == [] for r in result_lines(results))
    got = {r["trace_id"]: r for r in result_lines(results)}
    g = got[genai_id]
    assert (g["query"], g["answer"], g["model"], g["service"]) == (
        "Capital of France?",
        "Paris.",
        "m-genai",
        "svc-genai",
    )
    assert [c["id"] for c in g["chunks"]] == ["g1", "g2"] and g["query_type"] == "lookup"
    t = got[legacy_id]
    assert (t["query"], t["answer"], t["model"], t["query_type"]) == (
        "Who wrote Hamlet?",
        "Shakespeare.",
        "m-legacy",
        "lookup",  # no rag.query_type: the rule-based classifier's answer
    )
