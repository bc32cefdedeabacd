"""Every judge call through `MeteredJudge`: the budget reserves an upper bound and is charged every
API request actually sent (repairs and SDK retries included), the cost metrics count every
judgement — golden replays too, which never count in the verdict metrics — and a budget refusal
sends and counts nothing.

The LLM cases run the real `anthropic` SDK against the local Messages-API fake of test_judge_llm.py.
"""

from __future__ import annotations

from typing import Any

from fake_llm import (
    USAGE,
    FakeAPI,
    Reply,
    anthropic,
    anthropic_message,
    error_body,
    good_output,
    record,
)
from prometheus_client import CollectorRegistry

from monitor.contracts.metrics import JudgeMetrics
from monitor.contracts.model import Judgement, RagRecord
from monitor.golden import GoldenRow, run_replay
from monitor.judge import Judge, LexicalJudge
from monitor.judge.budget import BudgetPolicy, JudgeBudget
from monitor.judge.metered import BUDGET_EXHAUSTED, MeteredJudge
from monitor.llm.outcome import JudgeOutcome


def _metered(judge: Judge, **limits: Any) -> tuple[MeteredJudge, CollectorRegistry]:
    registry = CollectorRegistry()
    budget = JudgeBudget(BudgetPolicy(**limits)) if limits else None
    return MeteredJudge(judge, budget, JudgeMetrics(registry)), registry


def _count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include `labels`."""
    return sum(
        s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def _remaining(m: MeteredJudge) -> dict[str, float]:
    assert m.budget is not None
    return m.budget.remaining()


_OVERLOADED = Reply(529, error_body("/v1/messages", "overloaded_error", "busy"), {"retry-after-ms": "10"})
_BILLED = sum(USAGE.values())  # tokens of one answered request in the fake


async def test_each_sdk_retry_is_a_request_and_is_charged(api: FakeAPI) -> None:
    api.script(_OVERLOADED, _OVERLOADED)  # then 200
    metered, registry = _metered(anthropic(api, max_retries=2), calls_per_minute=100, tokens_per_hour=10**6)
    j = await metered.try_judge(record())
    await metered.aclose()
    assert j is not None and j.ok, j
    assert j.requests == 3 == len(api.requests)
    assert _remaining(metered) == {"calls": 97.0, "tokens": 10**6 - _BILLED}  # the bound given back
    assert _count(registry, "ragmon_judge_requests_total", outcome="ok") == 1  # one judgement
    assert _count(registry, "ragmon_judge_tokens_total") == _BILLED


async def test_a_repair_and_a_retry_are_both_charged(api: FakeAPI) -> None:
    def invalid_then_valid(path: str, body: dict[str, Any]) -> Reply:
        out = good_output(body)
        if len(body["messages"]) == 1:  # the judgement: cite a chunk that was not given
            out["claims"][0]["chunk_id"] = "doc-404"
        return Reply(body=anthropic_message(out))

    api.script(_OVERLOADED)
    api.default = invalid_then_valid
    metered, registry = _metered(anthropic(api), calls_per_minute=100)
    j = await metered.try_judge(record())
    await metered.aclose()
    assert j is not None and j.ok, j
    assert j.requests == 3 == len(api.requests)  # 529 + retry, then the repair
    assert _remaining(metered) == {"calls": 97.0}
    assert _count(registry, "ragmon_judge_tokens_total") == 2 * _BILLED


async def test_a_budget_refusal_sends_and_counts_nothing(api: FakeAPI) -> None:
    # max_retries=2: the bound is 2 prompts x 3 tries = 6 requests, more than the 5 allowed.
    metered, registry = _metered(anthropic(api, max_retries=2), calls_per_minute=5)
    assert await metered.try_judge(record()) is None
    refused = await metered.judge(record())  # as the golden replay calls it
    await metered.aclose()
    assert refused.outcome is JudgeOutcome.BUDGET_EXHAUSTED and refused.error == BUDGET_EXHAUSTED
    assert refused.backend == "anthropic" and refused.claims == [] and refused.faithfulness is None
    assert api.requests == []
    assert _remaining(metered) == {"calls": 5.0}
    assert _count(registry, "ragmon_judge_requests_total") == 0


async def test_the_offline_judge_spends_one_call_per_judgement() -> None:
    metered, registry = _metered(LexicalJudge(), calls_per_minute=2)
    results = [await metered.try_judge(record()) for _ in range(3)]
    assert [r is not None and r.ok for r in results] == [True, True, False]
    assert results[2] is None
    assert _count(registry, "ragmon_judge_requests_total", backend="lexical", outcome="ok") == 2


class _Raising:
    name = "buggy"
    model = "buggy-1"

    async def judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        raise RuntimeError("a judge bug")

    async def aclose(self) -> None:
        return None


async def test_a_judge_that_raises_costs_one_internal_error() -> None:
    metered, registry = _metered(_Raising(), calls_per_minute=10)
    j = await metered.try_judge(record(), sampling_weight=4.0)
    assert j is not None
    assert j.outcome is JudgeOutcome.INTERNAL_ERROR and j.error == "unexpected RuntimeError"
    assert (j.backend, j.model, j.sampling_weight) == ("buggy", "buggy-1", 4.0)
    assert _remaining(metered) == {"calls": 9.0}  # a turn taken, though no request was sent
    labels = {"backend": "buggy", "model": "buggy-1", "outcome": "internal_error"}
    assert _count(registry, "ragmon_judge_requests_total", **labels) == 1


def fake_rag(query: str, k: int) -> dict[str, Any]:
    """A `module:function` golden-replay target."""
    answer = f"The answer to {query} is c1."
    return {"answer": answer, "chunks": [{"id": "c1", "content": answer}][:k]}


async def test_golden_replay_goes_through_the_budget_and_counts_only_in_cost_metrics() -> None:
    rows = [
        GoldenRow(id=f"r{i}", query=f"q{i}", query_type="lookup", relevant_chunk_ids=["c1"], answerable=True)
        for i in range(5)
    ]
    metered, registry = _metered(LexicalJudge(), calls_per_minute=3)
    assert isinstance(metered, Judge)
    report = await run_replay(rows, f"{__name__}:fake_rag", k=2, judge=metered)
    errors = sorted(r.judge_error or "" for r in report.rows)
    assert errors == ["", "", "", BUDGET_EXHAUSTED, BUDGET_EXHAUSTED]  # reported like any judge error
    assert any("2 rows not judged" in w for w in report.warnings)
    assert _count(registry, "ragmon_judge_requests_total", backend="lexical") == 3
    assert _count(registry, "ragmon_judge_latency_seconds_count") == 3
    for verdicts in ("ragmon_judged_total", "ragmon_claims_total", "ragmon_faithfulness_score_count"):
        assert _count(registry, verdicts) == 0  # production verdict metrics see no replay
