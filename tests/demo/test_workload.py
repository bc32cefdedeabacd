"""The synthetic workload: real SDK bytes, the three Kafka layouts, and ground truth that matches."""

from __future__ import annotations

import itertools
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, TracesData
from support import read_topic

from monitor.demo.workload import (
    QUERY_TYPES,
    REFUSAL,
    TraceTruth,
    WorkloadConfig,
    generate,
    iter_workload,
    load_corpus,
    produce,
    trace_messages,
)

T0 = 1_760_000_000_000_000_000  # a fixed clock: output is then byte-for-byte reproducible
REFUSALS = {
    REFUSAL,
    "The provided documents do not contain enough information to answer that.",
    "I'm sorry, but I couldn't find that in the available documents.",
}
LEAD_INS = ("According to the documents, ", "Based on the retrieved context, ")


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _attrs(span: Span) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in span.attributes}


def _parse(value: bytes) -> tuple[dict[str, Any], list[Span]]:
    """Resource attributes and spans of one Kafka value, read as the consumer will read it."""
    data = TracesData()
    data.ParseFromString(value)
    assert len(data.resource_spans) == 1
    rs = data.resource_spans[0]
    assert len(rs.scope_spans) == 1
    assert rs.scope_spans[0].scope.name == "monitor.demo.workload"
    return {kv.key: _value(kv.value) for kv in rs.resource.attributes}, list(rs.scope_spans[0].spans)


def _spans_by_trace(pairs: list[tuple[bytes | None, bytes]]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = defaultdict(list)
    for _, value in pairs:
        for s in _parse(value)[1]:
            out[s.trace_id.hex()].append(s)
    return out


def _role(span: Span) -> str:
    return str(_attrs(span)["openinference.span.kind"])


def _quotes(answer: str, sentence: str) -> bool:
    return sentence in answer or (sentence[:1].lower() + sentence[1:]) in answer


# ------------------------------------------------------------------ corpus


def test_bundled_corpus_is_consistent(repo_root: Path) -> None:
    corpus = load_corpus()
    path = repo_root / "monitor" / "data" / "corpus.jsonl"
    assert 150 <= len(corpus.chunks) <= 300
    assert 60 <= len(corpus.questions) <= 120
    assert set(corpus.by_type()) == set(QUERY_TYPES)
    assert len({q.id for q in corpus.questions}) == len(corpus.questions)
    for q in corpus.questions:
        assert q.answerable == (q.query_type != "out_of_corpus") == bool(q.relevant_chunk_ids)
        texts = [corpus.chunks[c].text for c in q.relevant_chunk_ids]
        assert all(any(e in t for t in texts) for e in q.evidence)
        assert all(c in corpus.chunks for c in q.related_chunk_ids)
        assert set(q.golden_row()) == {
            "id",
            "query",
            "query_type",
            "relevant_chunk_ids",
            "reference_answer",
            "answerable",
        }
    assert len(path.read_bytes()) < 400_000
    notes = (path.parent / "LICENSE-NOTES.md").read_text()
    for licence in ("Apache", "CC BY-SA 4.0", "ODC-BY"):
        assert licence in notes


# ------------------------------------------------------------------ determinism and the SDK


def test_same_seed_same_bytes_other_seed_other_traffic() -> None:
    a = generate(60, seed=7, start_ns=T0)
    b = generate(60, seed=7, start_ns=T0)
    c = generate(60, seed=8, start_ns=T0)
    assert a.pairs() == b.pairs()
    assert a.traces == b.traces
    assert {t.trace_id for t in a.traces}.isdisjoint(t.trace_id for t in c.traces)
    assert [t.question_id for t in a.traces] != [t.question_id for t in c.traces]


def test_wall_clock_changes_only_times() -> None:
    a, b = generate(20, seed=3), generate(20, seed=3)
    strip = [(t.trace_id, t.question_id, t.answer, t.chunk_ids, t.outcome) for t in a.traces]
    assert strip == [(t.trace_id, t.question_id, t.answer, t.chunk_ids, t.outcome) for t in b.traces]
    now = time.time_ns()
    for t in a.traces:  # every trace has just ended when it is generated
        assert now - 60 * 10**9 < t.start_ns < t.end_ns <= now


def test_prefix_and_mode_do_not_change_the_requests() -> None:
    short = generate(15, seed=5, start_ns=T0)
    long = generate(40, seed=5, start_ns=T0, mode="split")
    assert short.traces == long.traces[:15]


@pytest.mark.parametrize("mode", ["per_trace", "batched", "split"])
def test_fast_engine_bytes_equal_the_sdk_encoder(mode: str) -> None:
    # the reference engine sends every span through TracerProvider + encode_spans
    fast = generate(40, seed=11, start_ns=T0, mode=mode, batch=7, config=WorkloadConfig(pool_size=16))  # type: ignore[arg-type]
    sdk = generate(
        40,
        seed=11,
        start_ns=T0,
        mode=mode,  # type: ignore[arg-type]
        batch=7,
        config=WorkloadConfig(pool_size=16),
        engine="sdk",
    )
    assert fast.pairs() == sdk.pairs()
    assert fast.traces == sdk.traces


def test_trace_messages_streams_what_generate_returns() -> None:
    w = generate(30, seed=2, start_ns=T0, mode="split", batch=4)
    assert list(trace_messages(30, seed=2, start_ns=T0, mode="split", batch=4)) == w.pairs()
    blocks = list(iter_workload(30, seed=2, start_ns=T0, mode="split", batch=4))
    assert [len(truths) for truths, _ in blocks] == [4] * 7 + [2]


# ------------------------------------------------------------------ what the spans say


def test_per_trace_messages_hold_one_openinference_trace() -> None:
    w = generate(80, seed=1, start_ns=T0)
    corpus = load_corpus()
    assert len(w.messages) == 80
    for m in w.messages:
        truth = w.truth(m.trace_ids[0])
        assert m.key == truth.trace_id.encode()
        resource, spans = _parse(m.value)
        assert resource["service.name"] == "rag-demo"
        # the Collector's other framing of the same bytes
        assert len(ExportTraceServiceRequest.FromString(m.value).resource_spans[0].scope_spans[0].spans) == 3
        assert [s.name for s in spans] == ["rag.retrieve", "rag.generate", "rag.request"]  # end order
        retriever, llm, root = spans
        assert {s.trace_id.hex() for s in spans} == {truth.trace_id}
        assert root.span_id.hex() == truth.root_span_id and root.parent_span_id == b""
        assert retriever.parent_span_id == root.span_id == llm.parent_span_id
        assert len({s.span_id for s in spans}) == 3
        assert root.kind == Span.SPAN_KIND_SERVER and llm.kind == Span.SPAN_KIND_CLIENT

        ra, rr, rl = _attrs(root), _attrs(retriever), _attrs(llm)
        assert ra["openinference.span.kind"] == "CHAIN"
        assert ra["input.value"] == truth.query == rr["input.value"]
        assert ra["output.value"] == truth.answer == rl["llm.output_messages.0.message.content"]
        assert ra["rag.query_type"] == truth.query_type
        assert rr["openinference.span.kind"] == "RETRIEVER" and rl["openinference.span.kind"] == "LLM"
        ids = [rr[f"retrieval.documents.{i}.document.id"] for i in range(4)]
        scores = [rr[f"retrieval.documents.{i}.document.score"] for i in range(4)]
        assert tuple(ids) == truth.chunk_ids
        assert scores == sorted(scores, reverse=True) and 0 < scores[-1] < scores[0] < 1
        assert "retrieval.documents.4.document.id" not in rr
        for i, cid in enumerate(ids):
            assert rr[f"retrieval.documents.{i}.document.content"] == corpus.chunks[cid].text
        assert rl["llm.model_name"] == "gpt-4o-mini"
        assert rl["llm.output_messages.0.message.role"] == "assistant"

        # children inside the root, retrieval before generation, realistic latencies
        assert root.start_time_unix_nano == truth.start_ns and root.end_time_unix_nano == truth.end_ns
        assert root.start_time_unix_nano < retriever.start_time_unix_nano < retriever.end_time_unix_nano
        assert retriever.end_time_unix_nano < llm.start_time_unix_nano < llm.end_time_unix_nano
        assert llm.end_time_unix_nano < root.end_time_unix_nano
        assert 0.1e9 < root.end_time_unix_nano - root.start_time_unix_nano < 30e9


def test_batched_messages_carry_many_whole_traces() -> None:
    w = generate(45, seed=4, start_ns=T0, mode="batched", batch=10)
    assert [len(m.trace_ids) for m in w.messages] == [10, 10, 10, 10, 5]
    assert all(m.key is None for m in w.messages)
    for m in w.messages:
        _, spans = _parse(m.value)
        assert len(spans) == 3 * len(m.trace_ids)
        assert {s.trace_id.hex() for s in spans} == set(m.trace_ids)
    assert set(_spans_by_trace(w.pairs())) == {t.trace_id for t in w.traces}


def test_split_spreads_each_trace_over_shuffled_messages() -> None:
    w = generate(60, seed=9, start_ns=T0, mode="split", batch=10)
    by_trace = _spans_by_trace(w.pairs())
    root_not_last = 0
    for t in w.traces:
        msgs = w.messages_of(t.trace_id)
        assert 2 <= len(msgs) <= 3
        assert all(m.key == t.trace_id.encode() and m.trace_ids == (t.trace_id,) for m in msgs)
        spans = by_trace[t.trace_id]
        assert sorted(s.name for s in spans) == ["rag.generate", "rag.request", "rag.retrieve"]
        roles = [_role(s) for m in msgs for s in _parse(m.value)[1]]
        root_not_last += roles[-1] != "CHAIN"
    assert root_not_last > 10  # children arrive after their root, in any order
    # messages of different traces interleave
    order = [m.trace_ids[0] for m in w.messages]
    runs = sum(1 for a, b in itertools.pairwise(order) if a != b)
    assert runs > len(w.traces)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(0, 25),
    seed=st.integers(0, 2**32),
    mode=st.sampled_from(["per_trace", "batched", "split"]),
    batch=st.integers(1, 8),
)
def test_every_span_arrives_exactly_once(n: int, seed: int, mode: Any, batch: int) -> None:
    w = generate(n, seed=seed, mode=mode, batch=batch, start_ns=T0)
    by_trace = _spans_by_trace(w.pairs())
    assert set(by_trace) == {t.trace_id for t in w.traces}
    for t in w.traces:
        spans = by_trace[t.trace_id]
        assert len(spans) == 3 and len({s.span_id for s in spans}) == 3
        assert sum(1 for s in spans if not s.parent_span_id) == 1


# ------------------------------------------------------------------ answers and rates


def _check_answer(t: TraceTruth) -> None:
    corpus = load_corpus()
    retrieved = [corpus.chunks[c].text for c in t.chunk_ids]
    q = next(q for q in corpus.questions if q.id == t.question_id)
    if t.answerable:
        assert set(t.relevant_chunk_ids) <= set(t.chunk_ids)
    else:
        assert not set(t.chunk_ids) & set(t.relevant_chunk_ids)
    if t.outcome == "refusal":
        assert t.answer in REFUSALS and t.invented is None
        return
    assert t.answer not in REFUSALS
    if t.outcome == "hallucinated":
        assert not t.answerable and t.invented and t.answer.startswith(t.invented)
        assert not any(t.invented in c for c in retrieved)
        return
    # grounded / ungrounded: the evidence, an optional lead-in, and for ungrounded one invention
    evidence = q.evidence[:4]
    assert all(_quotes(t.answer, e) for e in evidence)
    assert all(any(e in c for c in retrieved) for e in evidence)
    rest = t.answer
    for e in evidence:
        rest = rest.replace(e, "").replace(e[:1].lower() + e[1:], "")
    if t.outcome == "ungrounded":
        assert t.invented and t.invented in t.answer
        assert not any(t.invented in c for c in retrieved)
        rest = rest.replace(t.invented, "")
    else:
        assert t.invented is None
    for lead in LEAD_INS:
        rest = rest.replace(lead.strip(), "")
    assert rest.strip() == "", rest


def test_answers_match_their_ground_truth() -> None:
    w = generate(400, seed=12, start_ns=T0)
    for t in w.traces:
        _check_answer(t)
    outcomes = Counter(t.outcome for t in w.traces)
    assert set(outcomes) == {"grounded", "ungrounded", "refusal", "hallucinated"}
    assert all(t.grounded == (t.outcome in ("grounded", "refusal")) for t in w.traces)
    assert all(t.hallucinated <= (not t.answerable) for t in w.traces)


def test_default_mix_and_rates() -> None:
    w = generate(1024, seed=21, start_ns=T0)  # exactly the default pool
    n = len(w.traces)
    types = Counter(t.query_type for t in w.traces)
    defaults = WorkloadConfig().query_type_weights
    for qtype, weight in defaults.items():
        assert abs(types[qtype] / n - weight) < 0.04, (qtype, types)
    answerable = [t for t in w.traces if t.answerable]
    unanswerable = [t for t in w.traces if not t.answerable]
    assert all(t.query_type == "out_of_corpus" for t in unanswerable)
    ungrounded = sum(t.outcome == "ungrounded" for t in answerable) / len(answerable)
    assert abs(ungrounded - 0.15) < 0.035
    assert all(t.outcome in ("grounded", "ungrounded") for t in answerable)  # no false refusals
    refused = sum(t.refusal for t in unanswerable) / len(unanswerable)
    assert abs(refused - 0.8) < 0.07
    assert all(t.labelled for t in w.traces)
    refusal_texts = Counter(t.answer for t in unanswerable if t.refusal)
    assert refusal_texts.most_common(1)[0][0] == REFUSAL


def test_configured_rates_and_labels() -> None:
    cfg = WorkloadConfig(
        ungrounded_rate=0.5,
        hallucination_rate=0.5,
        false_refusal_rate=0.1,
        query_type_rate=0.3,
        query_type_weights={"lookup": 1, "out_of_corpus": 1},
        service_name="shop-assistant",
        model_name="claude-x",
        k=6,
    )
    w = generate(800, seed=5, start_ns=T0, config=cfg, mode="batched", batch=50)
    types = Counter(t.query_type for t in w.traces)
    assert set(types) == {"lookup", "out_of_corpus"} and abs(types["lookup"] / 800 - 0.5) < 0.05
    answerable = [t for t in w.traces if t.answerable]
    shares = Counter(t.outcome for t in answerable)
    assert abs(shares["ungrounded"] / len(answerable) - 0.5) < 0.07
    assert abs(shares["refusal"] / len(answerable) - 0.1) < 0.04
    unanswerable = [t for t in w.traces if not t.answerable]
    assert abs(sum(t.hallucinated for t in unanswerable) / len(unanswerable) - 0.5) < 0.07
    assert abs(sum(t.labelled for t in w.traces) / 800 - 0.3) < 0.05

    by_trace = _spans_by_trace(w.pairs())
    resource, _ = _parse(w.messages[0].value)
    assert resource["service.name"] == "shop-assistant"
    for t in w.traces:
        spans = {_role(s): _attrs(s) for s in by_trace[t.trace_id]}
        assert ("rag.query_type" in spans["CHAIN"]) == t.labelled
        assert "retrieval.documents.5.document.id" in spans["RETRIEVER"]
        assert len(t.chunk_ids) == 6 and spans["LLM"]["llm.model_name"] == "claude-x"


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        generate(5, seed=1, batch=0)
    with pytest.raises(ValueError):
        generate(5, seed=1, config=WorkloadConfig(query_type_weights={"nonsense": 1.0}))


# ------------------------------------------------------------------ Kafka


@pytest.mark.kafka
async def test_produce_delivers_every_message(broker: Any, topic: str) -> None:

    w = generate(50, seed=6, mode="split", batch=10)
    t0 = time.monotonic()
    sent = await produce(broker.bootstrap_servers, topic, w.pairs(), rate=400.0)
    assert sent == len(w.messages)
    assert time.monotonic() - t0 >= (sent - 1) / 400.0 * 0.9  # the rate limit holds

    got = [(m.key, m.value) for m in await read_topic(broker.bootstrap_servers, topic, count=sent)]
    assert sorted(got, key=repr) == sorted(w.pairs(), key=repr)
