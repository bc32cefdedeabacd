"""The judge budget: no limit is ever exceeded in any period-long interval, whatever the burst,
and spending survives a restart through the state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.contracts.model import Chunk, RagRecord
from monitor.judge import LexicalJudge
from monitor.judge.anthropic_judge import AnthropicJudge, AnthropicJudgeConfig
from monitor.judge.budget import OFFLINE_COST, BudgetPolicy, Cost, Grant, JudgeBudget, cost_bound
from monitor.judge.llm_judge import LLMJudgeBase
from monitor.judge.openai_judge import OpenAIJudge, OpenAIJudgeConfig
from monitor.judge.prompt import build_prompt
from monitor.llm.fence import escape_data

T0 = 1_700_000_000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def max_in_any_window(events: list[tuple[float, float]], period: float) -> float:
    """The largest total of `events` (time, amount) inside any half-open interval of `period`."""
    events = sorted(events)
    best = total = 0.0
    j = 0
    for t, amount in events:
        total += amount
        while events[j][0] <= t - period:
            total -= events[j][1]
            j += 1
        best = max(best, total)
    return best


steps = st.lists(
    st.tuples(
        st.floats(0.0, 120.0),  # seconds since the previous attempt (0 = a burst)
        st.integers(1, 6),  # bound of API requests (the judgement, a repair, retries)
        st.integers(0, 5000),  # bound of tokens
        st.floats(0.0, 0.05),  # bound of USD
        st.floats(0.0, 1.0),  # actual / bound
        st.integers(0, 3),  # attempts at the same instant
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(
    steps=steps,
    calls=st.integers(1, 30),
    tokens=st.integers(1000, 40_000),
    usd=st.floats(0.01, 0.5),
)
def test_limits_are_never_exceeded_under_bursts(
    steps: list[tuple[float, int, int, float, float, int]], calls: int, tokens: int, usd: float
) -> None:
    clock = Clock()
    budget = JudgeBudget(
        BudgetPolicy(calls_per_minute=calls, tokens_per_hour=tokens, usd_per_day=usd), clock=clock
    )
    call_log: list[tuple[float, float]] = []
    token_log: list[tuple[float, float]] = []
    usd_log: list[tuple[float, float]] = []
    open_grants: list[tuple[Grant, Cost]] = []
    for gap, bound_calls, bound_tokens, bound_usd, ratio, burst in steps:
        clock.t += gap
        for _ in range(burst + 1):
            grant = budget.try_acquire(Cost(bound_calls, bound_tokens, bound_usd))
            if grant is not None:
                # billed at the call's start: what the window is about
                actual = Cost(
                    max(1, round(bound_calls * ratio)), int(bound_tokens * ratio), bound_usd * ratio
                )
                call_log.append((clock.t, actual.calls))
                token_log.append((clock.t, actual.tokens))
                usd_log.append((clock.t, actual.usd or 0.0))
                open_grants.append((grant, actual))
        # Judgements finish later, some while others start: settle about half of the open ones.
        while len(open_grants) > 2:
            budget.settle(*open_grants.pop(0))
    for g, actual in open_grants:
        budget.settle(g, actual)
    assert max_in_any_window(call_log, 60.0) <= calls
    assert max_in_any_window(token_log, 3600.0) <= tokens
    assert max_in_any_window(usd_log, 86400.0) <= usd * (1 + 1e-9)


def test_a_burst_gets_exactly_the_limit_then_room_comes_back_a_period_later() -> None:
    clock = Clock()
    budget = JudgeBudget(BudgetPolicy(calls_per_minute=10), clock=clock)
    granted = [budget.try_acquire(Cost(1, 100, 0.0)) for _ in range(50)]
    assert sum(g is not None for g in granted) == 10
    clock.t += 30
    assert budget.try_acquire(Cost(1, 100, 0.0)) is None  # a classic token bucket would have refilled half
    clock.t += 31  # the burst's slot has left the 60 s window (plus at most one 1 s slot)
    assert budget.try_acquire(Cost(1, 100, 0.0)) is not None


def test_settling_gives_back_an_overestimate_and_charges_an_underestimate() -> None:
    clock = Clock()
    budget = JudgeBudget(BudgetPolicy(tokens_per_hour=10_000), clock=clock)
    g = budget.try_acquire(Cost(1, 8000, 0.0))
    assert g is not None
    assert budget.try_acquire(Cost(1, 8000, 0.0)) is None
    budget.settle(g, Cost(1, 1000, 0.0))
    assert budget.remaining()["tokens"] == 9000
    g2 = budget.try_acquire(Cost(1, 1000, 0.0))
    assert g2 is not None
    budget.settle(g2, Cost(1, 9000, 0.0))  # an under-estimate: the excess is charged, and blocks
    assert budget.remaining()["tokens"] == 0
    assert budget.try_acquire(Cost(1, 1, 0.0)) is None


def test_unpriced_model_keeps_its_usd_estimate() -> None:
    budget = JudgeBudget(BudgetPolicy(usd_per_day=1.0), clock=Clock())
    g = budget.try_acquire(Cost(1, 0, 0.4))
    assert g is not None
    budget.settle(g, Cost(1, 500, None))
    assert budget.remaining()["usd"] == pytest.approx(0.6)


def test_all_three_must_have_room() -> None:
    budget = JudgeBudget(
        BudgetPolicy(calls_per_minute=100, tokens_per_hour=1000, usd_per_day=10.0), clock=Clock()
    )
    assert budget.try_acquire(Cost(1, 1001, 0.0)) is None  # tokens refuse, calls and USD had room
    assert budget.try_acquire(Cost(1, 10, 10.01)) is None
    assert budget.remaining() == {"calls": 100.0, "tokens": 1000.0, "usd": 10.0}  # refusals charge nothing


def test_no_limits_means_always_yes() -> None:
    policy = BudgetPolicy()
    assert not policy.enabled
    budget = JudgeBudget(policy, clock=Clock())
    assert all(budget.try_acquire(Cost(1, 10**9, 1e6)) is not None for _ in range(1000))


# -- restarts ------------------------------------------------------------------------------------


def test_spending_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "sub" / "budget.json"
    clock = Clock()
    policy = BudgetPolicy(calls_per_minute=1000, usd_per_day=1.0, state_file=state)
    first = JudgeBudget(policy, clock=clock)
    for _ in range(4):
        g = first.try_acquire(Cost(1, 0, 0.2))
        assert g is not None
        first.settle(g, Cost(1, 0, 0.25))  # billed 1.00 in all
    assert json.loads(state.read_text())["version"] == 1
    assert [p.name for p in state.parent.iterdir()] == ["budget.json"]  # no temp files left behind
    clock.t += 3600  # restarted an hour later: the day's spending is still there
    second = JudgeBudget(policy, clock=clock)
    assert second.try_acquire(Cost(1, 0, 0.01)) is None
    assert second.remaining()["calls"] == 1000  # calls/minute has long since come back
    clock.t += 86400 + 1440
    third = JudgeBudget(policy, clock=clock)
    assert third.try_acquire(Cost(1, 0, 0.5)) is not None


def test_a_reservation_is_on_disk_before_the_call_is_made(tmp_path: Path) -> None:
    """A crash between acquire and settle (SIGKILL mid-judgement) keeps the estimate counted."""
    state = tmp_path / "budget.json"
    clock = Clock()
    policy = BudgetPolicy(tokens_per_hour=1000, state_file=state)
    assert JudgeBudget(policy, clock=clock).try_acquire(Cost(1, 900, 0.0)) is not None
    assert JudgeBudget(policy, clock=clock).try_acquire(Cost(1, 200, 0.0)) is None


def test_an_unreadable_state_file_fails_closed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "budget.json"
    state.write_text("{not json")
    clock = Clock()
    policy = BudgetPolicy(calls_per_minute=10, usd_per_day=5.0, state_file=state)
    budget = JudgeBudget(policy, clock=clock)
    assert budget.try_acquire(Cost(1, 0, 0.0)) is None
    assert "counting every budget as spent" in caplog.text
    clock.t += 61
    assert budget.try_acquire(Cost(1, 0, 0.01)) is None  # USD/day is still closed
    clock.t += 86400 + 1440  # a day, plus the one slot (1/60 of the period) the check errs by
    assert budget.try_acquire(Cost(1, 0, 1.0)) is not None


def test_a_clock_stepping_back_does_not_reopen_the_window(tmp_path: Path) -> None:
    clock = Clock()
    budget = JudgeBudget(BudgetPolicy(calls_per_minute=2, state_file=tmp_path / "b.json"), clock=clock)
    assert budget.try_acquire(Cost(1, 0, 0.0)) and budget.try_acquire(Cost(1, 0, 0.0))
    clock.t -= 3600
    assert budget.try_acquire(Cost(1, 0, 0.0)) is None
    restarted = JudgeBudget(BudgetPolicy(calls_per_minute=2, state_file=tmp_path / "b.json"), clock=clock)
    assert restarted.try_acquire(Cost(1, 0, 0.0)) is None


def test_calls_settle_to_the_requests_actually_sent() -> None:
    """A judgement reserves every request it might make (repair, retries); settling gives back
    those it did not make, as tokens are given back."""
    budget = JudgeBudget(BudgetPolicy(calls_per_minute=10), clock=Clock())
    g = budget.try_acquire(Cost(6, 0, 0.0))
    assert g is not None
    assert budget.try_acquire(Cost(6, 0, 0.0)) is None
    budget.settle(g, Cost(3, 0, 0.0))  # e.g. 529, 529, then an answer
    assert budget.remaining()["calls"] == 7
    assert budget.try_acquire(Cost(6, 0, 0.0)) is not None


# -- the bound reserved per judgement ------------------------------------------------------------


def test_the_offline_judge_costs_one_call_and_nothing_else() -> None:
    rec = RagRecord("t", "s", "svc", "q", "lookup", [Chunk("c1", "text")], "a")
    judge = LexicalJudge()
    assert cost_bound(rec, judge) == OFFLINE_COST == Cost(1, 0, 0.0)
    assert Cost.of(judge.judge_sync(rec)) == Cost(1, 0, 0.0)  # no request sent, still one call


def _llm_judges(**config: object) -> list[LLMJudgeBase]:
    return [
        AnthropicJudge(AnthropicJudgeConfig.model_validate({"api_key": "sk-test", **config})),
        OpenAIJudge(OpenAIJudgeConfig.model_validate({"api_key": "sk-test", **config})),
    ]


def _old_upper_bound(record: RagRecord, max_output_tokens: int) -> int:
    """The former estimate: 3 characters a token, 1500 for the instructions, two attempts."""
    chars = len(record.query) + len(record.answer)
    for chunk in record.chunks[:20]:
        chars += min(len(chunk.content or ""), 4000) + len(chunk.id) + 32
    one_prompt = 1500 + chars // 3 + 1
    return 2 * one_prompt + max_output_tokens + 2 * max_output_tokens


async def test_llm_bound_counts_the_bytes_sent_so_it_holds_for_cjk_and_emoji() -> None:
    """Byte-level BPE emits at most one token per UTF-8 byte: the bound covers every byte of both
    prompts on every try. Characters-per-token undercounted scripts of several bytes a character."""
    rec = RagRecord(
        "t",
        "s",
        "svc",
        "東京の人口は何人ですか？" * 20,
        "lookup",
        [Chunk("doc-東京", "東京都の人口は約千四百万人である。" * 300), Chunk("emoji", "🙂👍🏽🇯🇵" * 500)],
        "約千四百万人です 🙂" * 200,
    )
    prompt = build_prompt(rec)
    sent = len(prompt.system.encode()) + len(prompt.user.encode())
    max_tokens = 2048
    # One prompt of this record may take more tokens than the old bound allowed for the whole judgement.
    assert len(prompt.user.encode()) > _old_upper_bound(rec, max_tokens)
    for judge in _llm_judges(max_retries=2, max_tokens=max_tokens):
        bound = judge.cost_bound(rec)
        tries = 3
        assert bound.calls == 2 * tries  # the judgement and a repair, each tried 1 + max_retries times
        assert bound.tokens >= tries * (2 * sent + 2 * max_tokens)
        await judge.aclose()


async def test_llm_bound_is_of_the_prompt_as_sent_escaped_and_clipped() -> None:
    def rec(chunk_chars: int, answer: str) -> RagRecord:
        return RagRecord("t", "s", "svc", "q", "lookup", [Chunk("c", "x" * chunk_chars)], answer)

    for judge in _llm_judges(max_retries=0):
        # Escaping: each "<" is sent as "&lt;", 4 bytes.
        escaped = judge.cost_bound(rec(10, "<" * 3000)).tokens - judge.cost_bound(rec(10, "a" * 3000)).tokens
        assert escaped == 2 * 3 * 3000  # two prompts (judgement and repair), 3 more bytes each
        assert escape_data("<") == "&lt;"
        # Clipping: a chunk beyond max_chunk_chars is never sent, so it never costs.
        assert judge.cost_bound(rec(100_000, "a")) == judge.cost_bound(rec(4001, "a"))
        await judge.aclose()


async def test_llm_bound_in_usd_prices_input_at_the_dearer_rate() -> None:
    rec = RagRecord("t", "s", "svc", "q", "lookup", [Chunk("c", "text")], "a")
    anthropic, openai = _llm_judges(max_retries=1, max_tokens=1000)
    bound = anthropic.cost_bound(rec)
    tokens_out = 2 * 2 * 1000  # two prompts, two tries each
    tokens_in = bound.tokens - tokens_out
    assert bound.usd == pytest.approx((tokens_in * 1.25 + tokens_out * 5.0) / 1e6)  # haiku 4.5: cache write
    unpriced = _llm_judges(model="my-local-model")[1]
    assert unpriced.cost_bound(rec).usd == 0.0  # unknown price: a USD limit cannot hold it back
    for judge in (anthropic, openai, unpriced):
        await judge.aclose()


def test_an_unwritable_state_file_does_not_stop_judging(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "budget.json"
    budget = JudgeBudget(BudgetPolicy(calls_per_minute=1, state_file=state), clock=Clock())
    state.mkdir()  # os.replace onto a directory fails
    assert budget.try_acquire(Cost(1, 0, 0.0)) is not None
    assert budget.try_acquire(Cost(1, 0, 0.0)) is None  # still enforced in memory
    assert "cannot write judge budget state" in caplog.text


def test_replicas_split_the_limits_so_the_group_never_exceeds_them() -> None:
    """Three replicas, each bursting on its own: together they get the limit, never 3x it."""
    clock = Clock()
    policy = BudgetPolicy(calls_per_minute=30, tokens_per_hour=9000, replicas=3)
    group = [JudgeBudget(policy, clock=clock) for _ in range(3)]
    calls: list[tuple[float, float]] = []
    for _ in range(3):  # three minutes of bursts at every replica
        for budget in group:
            for _ in range(40):
                if budget.try_acquire(Cost(1, 100, 0.0)) is not None:
                    calls.append((clock.t, 1.0))
        clock.t += 61
    assert max_in_any_window(calls, 60.0) == 30  # 10 each: the whole limit is usable, no more
    assert len(calls) * 100 == 9000  # and the hour's tokens: 3 x 3000, then every replica stops
    assert [b.remaining() for b in group] == [{"calls": 10.0, "tokens": 0.0}] * 3


def test_a_group_larger_than_replicas_shrinks_this_members_share(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    budget = JudgeBudget(BudgetPolicy(calls_per_minute=60, replicas=2), clock=clock)
    budget.set_group(owned=3, total=6)  # as configured: half the partitions, half the limit
    assert budget.share == 0.5 and not caplog.records
    budget.set_group(owned=1, total=6)  # two members would own >= 3 each: there are more than 2
    assert budget.share == pytest.approx(1 / 6)
    assert "more than judge.budget.replicas=2" in caplog.text
    assert sum(budget.try_acquire(Cost(1, 1, 0.0)) is not None for _ in range(60)) == 10
    caplog.clear()
    budget.set_group(owned=1, total=6)  # the same evidence again: already said
    assert not caplog.records
    budget.set_group(owned=2, total=3)  # uneven but possible with 2 members: the static share
    assert budget.share == 0.5
