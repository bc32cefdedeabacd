"""Abstention as a verdict: a check the judge could not decide is `undecided` with a reason, in the
judgement, its results line (read back, and derived for lines written before the field) and the
decided/undecided counters, and is scored neither as faithful nor as unfaithful."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fake_llm import PARIS, FakeAPI, Reply, anthropic, anthropic_message, openai, openai_completion, shown
from fake_llm import record as fake_record
from prometheus_client import CollectorRegistry

from monitor.contracts.estimate import estimate_values
from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Chunk, Claim, Judgement, RagRecord, Undecided, Verdict
from monitor.contracts.results import ResultLine, encode_result, result_line
from monitor.drift.reference import drift_values, judged_values
from monitor.judge.prompt import SYSTEM_PROMPT

META: dict[str, Any] = {
    "trace_id": "ab" * 16,
    "query_type": "comparison",
    "service": "svc",
    "backend": "lexical",
    "model": "lexical-v2",
}


def judgement(claims: list[Claim], answerable: bool | None = True, **kw: Any) -> Judgement:
    return Judgement.from_verdicts(
        claims, answerable_from_context=answerable, answer_relevance=2, **{**META, **kw}
    )


def record(answer: str = "Both were American.") -> RagRecord:
    return RagRecord(
        "ab" * 16,
        "cd" * 8,
        "svc",
        "Were Scott Derrickson and Ed Wood of the same nationality?",
        "comparison",
        [Chunk("c1", "Scott Derrickson is an American director.", 0.8)],
        answer,
        end_ns=1_800_000_000_000_000_000,
    )


def test_a_record_with_no_decided_claim_is_undecided_and_not_scored() -> None:
    j = judgement([Claim("Both were American.", Verdict.UNCERTAIN, note="low_alignment")], answerable=None)
    assert j.decided is False
    assert j.undecided == {"faithfulness": Undecided.UNCERTAIN, "unanswerable": Undecided.UNCERTAIN}
    assert j.faithfulness is None and j.hallucinated is None and j.false_refusal is None
    assert "faithfulness" not in j.checks() and "unanswerable" not in j.checks()
    # Neither faithful nor unfaithful, neither hallucinated nor not: only the refusal flag stands.
    assert [m for m, _ in estimate_values(j)] == ["refusal", "relevance"]


def test_the_reason_follows_the_claims_and_a_refusal_is_not_undecided() -> None:
    yes_no = judgement(
        [Claim("Yes.", Verdict.UNCERTAIN, note="yes_no"), Claim("x", Verdict.UNCERTAIN)], answerable=None
    )
    assert yes_no.undecided == {"faithfulness": Undecided.YES_NO, "unanswerable": Undecided.YES_NO}
    # An LLM judge decides answerability itself: its claims alone can be undecided.
    unplaced = judgement([Claim("x", Verdict.UNCERTAIN, note="unplaced")], answerable=True)
    assert unplaced.undecided == {"faithfulness": Undecided.UNPLACED}
    assert unplaced.hallucinated is False and unplaced.decided is False
    # An answer the judge found no claim in, although it answers.
    no_claim = judgement([], refuses=False, hedges=False)
    assert no_claim.undecided == {"faithfulness": Undecided.NO_CLAIM}
    # A refusal has nothing to check for faithfulness: decided, not undecided.
    refusal = judgement([], answer_admits_uncertainty=True)
    assert refusal.refuses and refusal.decided is True and refusal.undecided == {}
    # One decided claim decides the record; uncertain ones are left out of its score.
    some = judgement([Claim("a", Verdict.SUPPORTED, "c1"), Claim("b", Verdict.UNCERTAIN)])
    assert some.decided is True and some.faithfulness == 1.0
    # Only answerability missing.
    assert judgement([Claim("a", True, "c1")], answerable=None).undecided == {
        "unanswerable": Undecided.ANSWERABILITY
    }


def test_results_lines_carry_decided_and_read_back_and_older_lines_derive_it() -> None:
    j = judgement([Claim("Both were American.", Verdict.UNCERTAIN)], answerable=None, sampling_weight=4.0)
    line = result_line(record(), sampling_weight=4.0, query_type_source="span", judgement=j)
    written = encode_result(line)
    doc = json.loads(written)
    assert doc["v"] == 1 and doc["decided"] is False
    assert doc["undecided"] == {"faithfulness": "uncertain", "unanswerable": "uncertain"}
    assert doc["claims"][0]["decided"] is False
    back = ResultLine.model_validate_json(written)
    assert encode_result(back) == written
    assert back.undecided_checks == doc["undecided"] and back.is_decided is False
    # A line written before `decided` existed reads the same from its verdicts.
    older = {k: v for k, v in doc.items() if k not in ("decided", "undecided")}
    for claim in older["claims"]:
        del claim["decided"]
    old = ResultLine.model_validate_json(json.dumps(older))
    assert old.undecided_checks == doc["undecided"] and old.is_decided is False
    # The drift stage watches the undecided share; the estimate values stay without the record.
    assert drift_values(back) == (
        "comparison",
        4.0,
        [("refusal", 0.0), ("relevance", 2.0), ("undecided", 1.0)],
    )
    assert judged_values(back) == ("comparison", 4.0, [("refusal", 0.0), ("relevance", 2.0)])
    decided = result_line(
        record(), sampling_weight=1.0, query_type_source="span", judgement=judgement([Claim("a", True, "c1")])
    )
    assert decided.is_decided is True and drift_values(decided)[2][-1] == ("undecided", 0.0)  # type: ignore[index]
    # An unknown reason in a hand-made line reads as absent, and is derived instead.
    odd = ResultLine.model_validate_json(json.dumps({**doc, "undecided": {"faithfulness": "???"}}))
    assert odd.undecided_checks == doc["undecided"]


def test_decided_and_undecided_counters_per_check() -> None:
    metrics = Metrics(CollectorRegistry())
    judgements = [
        judgement([Claim("a", True, "c1")]),
        judgement([Claim("b", Verdict.UNCERTAIN)], answerable=None),
        judgement([Claim("c", Verdict.UNCERTAIN, note="yes_no")], answerable=None),
        judgement([], answer_admits_uncertainty=True),  # a refusal: no faithfulness check
    ]
    for j in judgements:
        metrics.judge.observe_verdicts(j, "svc")
    g = metrics.registry.get_sample_value
    base = {"judge": "lexical", "query_type": "comparison"}

    def decided(check: str) -> float | None:
        return g("ragmon_judge_decided_total", {**base, "check": check})

    def undecided(check: str, reason: str) -> float | None:
        return g("ragmon_judge_undecided_total", {**base, "check": check, "reason": reason})

    assert (decided("faithfulness"), decided("unanswerable")) == (1, 2)
    assert undecided("faithfulness", "uncertain") == 1 and undecided("faithfulness", "yes_no") == 1
    assert undecided("unanswerable", "uncertain") == 1 and undecided("unanswerable", "yes_no") == 1
    # Every reason exists from the first judgement of a slice, so a ratio over them does too.
    assert undecided("faithfulness", "no_claim") == 0 and undecided("unanswerable", "answerability") == 0
    # The hallucination check counts decided records only.
    labels = {"service": "svc", "query_type": "comparison", "judge": "lexical"}
    assert g("ragmon_judged_total", {**labels, "check": "unanswerable"}) == 2


# -- an LLM judge's abstention: the real SDKs against the local fake API ------------------------------

JUDGES = [pytest.param(anthropic, id="anthropic"), pytest.param(openai, id="openai")]


def wrapped(path: str, output: dict[str, Any]) -> Reply:
    if path == "/v1/messages":
        return Reply(body=anthropic_message(output))
    return Reply(body=openai_completion(json.dumps(output)))


def llm_verdict(claims: list[dict[str, Any]], ids: list[str]) -> dict[str, Any]:
    return {
        "claims": claims,
        "answerable_from_context": True,
        "refuses": False,
        "hedges": False,
        "answer_relevance": 2,
        "context_relevance": [2 for _ in ids],
    }


@pytest.mark.parametrize("make", JUDGES)
async def test_an_llm_judges_uncertain_claims_make_the_same_undecided_record(
    api: FakeAPI, make: Callable[..., Any]
) -> None:
    """The prompt offers `uncertain`; a judge that uses it for every claim leaves the record
    undecided as the offline judge does: same fields, same counters, no faithfulness. A claim it
    quotes nothing for (or nothing found) it could not place; one it quotes it placed."""
    answer = "Paris is the capital of France. It has 90 million inhabitants."
    claims = [
        {
            "text": "Paris is the capital of France.",
            "verdict": "uncertain",
            "quotes": [{"chunk": "1", "quote": PARIS[:40]}],
        },
        {"text": "It has 90 million inhabitants.", "verdict": "uncertain", "quotes": []},
    ]
    api.default = lambda path, body: wrapped(path, llm_verdict(claims, list(shown(body)[1])))
    judge = make(api)
    j = await judge.judge(fake_record(answer))
    await judge.aclose()
    assert j.ok and j.requests == 1, j.error  # uncertain needs no quote: nothing to repair
    system = json.dumps(api.requests[0].body)
    assert '"uncertain" only if you cannot tell' in SYSTEM_PROMPT and "uncertain" in system
    assert [(c.verdict, c.note) for c in j.claims] == [
        (Verdict.UNCERTAIN, None),
        (Verdict.UNCERTAIN, "unplaced"),
    ]
    assert j.claims[0].evidence[0].found
    # The most specific reason of its claims: one could not be placed in the context.
    assert j.faithfulness is None and j.undecided == {"faithfulness": Undecided.UNPLACED}
    assert j.hallucinated is False  # the judge decided answerability itself: that check stands
    doc = json.loads(
        encode_result(
            result_line(fake_record(answer), sampling_weight=1.0, query_type_source="span", judgement=j)
        )
    )
    assert doc["decided"] is False and doc["undecided"] == {"faithfulness": "unplaced"}
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.judge.observe_verdicts(j, "svc")
    labels = {"judge": j.backend, "query_type": "lookup", "check": "faithfulness"}
    assert registry.get_sample_value("ragmon_judge_undecided_total", {**labels, "reason": "unplaced"}) == 1
    assert registry.get_sample_value("ragmon_judge_decided_total", labels) == 0
    assert registry.get_sample_value("ragmon_judge_decided_total", {**labels, "check": "unanswerable"}) == 1


@pytest.mark.parametrize("make", JUDGES)
async def test_a_quote_not_found_still_counts_against_faithfulness(
    api: FakeAPI, make: Callable[..., Any]
) -> None:
    """A supported claim whose quote is in no chunk is not made undecided: injected text that makes
    a model say supported must not take a bad claim out of the score."""
    answer = "Paris is the capital of France. It has 90 million inhabitants."
    claims = [
        {"text": "Paris is the capital of France.", "verdict": "uncertain", "quotes": []},
        {
            "text": "It has 90 million inhabitants.",
            "verdict": "supported",
            "quotes": [{"chunk": "1", "quote": "Paris has 90 million inhabitants"}],
        },
    ]
    api.default = lambda path, body: wrapped(path, llm_verdict(claims, list(shown(body)[1])))
    judge = make(api)
    j = await judge.judge(fake_record(answer))
    await judge.aclose()
    assert j.ok, j.error
    assert (j.claims[1].verdict, j.claims[1].note) == (Verdict.NOT_IN_CONTEXT, "not_in_chunk")
    assert j.faithfulness == 0.0 and j.decided is True


def test_a_pinned_baseline_takes_the_undecided_share_and_leaves_undecided_records_out_of_faithfulness() -> (
    None
):
    """`baseline pin` from results lines: the undecided share's reference is over every judged
    line, faithfulness's over the decided ones only."""
    from monitor.drift.reference import from_results

    lines = []
    for i in range(10):
        abstain = i < 3
        j = judgement(
            [Claim("x", Verdict.UNCERTAIN if abstain else Verdict.SUPPORTED, "c1")],
            answerable=None if abstain else True,
        )
        lines.append(result_line(record(), sampling_weight=1.0, query_type_source="span", judgement=j))
    slices, dropped = from_results(lines, None, None)
    refs = slices["comparison"]
    assert not dropped
    assert (refs["undecided"].records, refs["undecided"].mean) == (10, 0.3)
    assert (refs["faithfulness"].records, refs["faithfulness"].mean) == (7, 1.0)
    assert refs["hallucination"].records == 7
