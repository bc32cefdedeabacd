"""The judge budget: no limit is ever exceeded in any period-long interval, whatever the burst,
and spending survives a restart through the state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.judge.base import Price
from monitor.judge.budget import BudgetPolicy, Grant, JudgeBudget, upper_bound
from monitor.model import Chunk, RagRecord

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
        st.integers(0, 5000),  # estimated tokens
        st.floats(0.0, 0.05),  # estimated USD
        st.floats(0.0, 1.0),  # actual / estimate
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
    steps: list[tuple[float, int, float, float, int]], calls: int, tokens: int, usd: float
) -> None:
    clock = Clock()
    budget = JudgeBudget(
        BudgetPolicy(calls_per_minute=calls, tokens_per_hour=tokens, usd_per_day=usd), clock=clock
    )
    call_log: list[tuple[float, float]] = []
    token_log: list[tuple[float, float]] = []
    usd_log: list[tuple[float, float]] = []
    open_grants: list[tuple[Grant, int, float]] = []
    for gap, est_tokens, est_usd, ratio, burst in steps:
        clock.t += gap
        for _ in range(burst + 1):
            grant = budget.try_acquire(est_tokens, est_usd)
            if grant is not None:
                # billed at the call's start: what the window is about
                actual_t, actual_u = int(est_tokens * ratio), est_usd * ratio
                call_log.append((clock.t, 1.0))
                token_log.append((clock.t, actual_t))
                usd_log.append((clock.t, actual_u))
                open_grants.append((grant, actual_t, actual_u))
        # Judgements finish later, some while others start: settle about half of the open ones.
        while len(open_grants) > 2:
            g, at, au = open_grants.pop(0)
            budget.settle(g, at, au)
    for g, at, au in open_grants:
        budget.settle(g, at, au)
    assert max_in_any_window(call_log, 60.0) <= calls
    assert max_in_any_window(token_log, 3600.0) <= tokens
    assert max_in_any_window(usd_log, 86400.0) <= usd * (1 + 1e-9)


def test_a_burst_gets_exactly_the_limit_then_room_comes_back_a_period_later() -> None:
    clock = Clock()
    budget = JudgeBudget(BudgetPolicy(calls_per_minute=10), clock=clock)
    granted = [budget.try_acquire(100, 0.0) for _ in range(50)]
    assert sum(g is not None for g in granted) == 10
    clock.t += 30
    assert budget.try_acquire(100, 0.0) is None  # a classic token bucket would have refilled half
    clock.t += 31  # the burst's slot has left the 60 s window (plus at most one 1 s slot)
    assert budget.try_acquire(100, 0.0) is not None


def test_settling_gives_back_an_overestimate_and_charges_an_underestimate() -> None:
    clock = Clock()
    budget = JudgeBudget(BudgetPolicy(tokens_per_hour=10_000), clock=clock)
    g = budget.try_acquire(8000, 0.0)
    assert g is not None
    assert budget.try_acquire(8000, 0.0) is None
    budget.settle(g, 1000, 0.0)
    assert budget.remaining()["tokens"] == 9000
    g2 = budget.try_acquire(1000, 0.0)
    assert g2 is not None
    budget.settle(g2, 9000, 0.0)  # an under-estimate: the excess is charged, and blocks
    assert budget.remaining()["tokens"] == 0
    assert budget.try_acquire(1, 0.0) is None


def test_unpriced_model_keeps_its_usd_estimate() -> None:
    budget = JudgeBudget(BudgetPolicy(usd_per_day=1.0), clock=Clock())
    g = budget.try_acquire(0, 0.4)
    assert g is not None
    budget.settle(g, 500, None)
    assert budget.remaining()["usd"] == pytest.approx(0.6)


def test_all_three_must_have_room() -> None:
    budget = JudgeBudget(
        BudgetPolicy(calls_per_minute=100, tokens_per_hour=1000, usd_per_day=10.0), clock=Clock()
    )
    assert budget.try_acquire(1001, 0.0) is None  # tokens refuse, calls and USD had room
    assert budget.try_acquire(10, 10.01) is None
    assert budget.remaining() == {"calls": 100.0, "tokens": 1000.0, "usd": 10.0}  # refusals charge nothing


def test_no_limits_means_always_yes() -> None:
    policy = BudgetPolicy()
    assert not policy.enabled
    budget = JudgeBudget(policy, clock=Clock())
    assert all(budget.try_acquire(10**9, 10**6) is not None for _ in range(1000))


# -- restarts ------------------------------------------------------------------------------------


def test_spending_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "sub" / "budget.json"
    clock = Clock()
    policy = BudgetPolicy(calls_per_minute=1000, usd_per_day=1.0, state_file=state)
    first = JudgeBudget(policy, clock=clock)
    for _ in range(4):
        g = first.try_acquire(0, 0.2)
        assert g is not None
        first.settle(g, 0, 0.25)  # billed 1.00 in all
    assert json.loads(state.read_text())["version"] == 1
    assert [p.name for p in state.parent.iterdir()] == ["budget.json"]  # no temp files left behind
    clock.t += 3600  # restarted an hour later: the day's spending is still there
    second = JudgeBudget(policy, clock=clock)
    assert second.try_acquire(0, 0.01) is None
    assert second.remaining()["calls"] == 1000  # calls/minute has long since come back
    clock.t += 86400 + 1440
    third = JudgeBudget(policy, clock=clock)
    assert third.try_acquire(0, 0.5) is not None


def test_a_reservation_is_on_disk_before_the_call_is_made(tmp_path: Path) -> None:
    """A crash between acquire and settle (SIGKILL mid-judgement) keeps the estimate counted."""
    state = tmp_path / "budget.json"
    clock = Clock()
    policy = BudgetPolicy(tokens_per_hour=1000, state_file=state)
    assert JudgeBudget(policy, clock=clock).try_acquire(900, 0.0) is not None
    assert JudgeBudget(policy, clock=clock).try_acquire(200, 0.0) is None


def test_an_unreadable_state_file_fails_closed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "budget.json"
    state.write_text("{not json")
    clock = Clock()
    policy = BudgetPolicy(calls_per_minute=10, usd_per_day=5.0, state_file=state)
    budget = JudgeBudget(policy, clock=clock)
    assert budget.try_acquire(0, 0.0) is None
    assert "counting every budget as spent" in caplog.text
    clock.t += 61
    assert budget.try_acquire(0, 0.01) is None  # USD/day is still closed
    clock.t += 86400 + 1440  # a day, plus the one slot (1/60 of the period) the check errs by
    assert budget.try_acquire(0, 1.0) is not None


def test_a_clock_stepping_back_does_not_reopen_the_window(tmp_path: Path) -> None:
    clock = Clock()
    budget = JudgeBudget(BudgetPolicy(calls_per_minute=2, state_file=tmp_path / "b.json"), clock=clock)
    assert budget.try_acquire(0, 0.0) and budget.try_acquire(0, 0.0)
    clock.t -= 3600
    assert budget.try_acquire(0, 0.0) is None
    restarted = JudgeBudget(BudgetPolicy(calls_per_minute=2, state_file=tmp_path / "b.json"), clock=clock)
    assert restarted.try_acquire(0, 0.0) is None


def test_upper_bound_covers_the_prompt_and_the_output_cap() -> None:
    record = RagRecord(
        "t", "s", "svc", "q" * 300, "lookup", [Chunk("c1", "x" * 9000), Chunk("c2", None)], "a" * 600
    )
    price = Price(input=1.0, output=5.0, cache_write=1.25)
    tokens, usd = upper_bound(record, max_output_tokens=2048, price=price, attempts=1)
    # 300 + 600 + min(9000, 4000) + ids and framing, at 3 chars a token, + instructions + output cap
    assert tokens >= 1500 + (300 + 600 + 4000) // 3 + 2048
    assert usd == pytest.approx(((tokens - 2048) * 1.25 + 2048 * 5.0) / 1e6)
    assert upper_bound(record, max_output_tokens=2048, price=None, attempts=1) == (tokens, 0.0)
    # a repair request re-sends the prompt and the rejected output
    twice, _ = upper_bound(record, max_output_tokens=2048, price=price)
    assert twice == 2 * tokens + 2048


def test_an_unwritable_state_file_does_not_stop_judging(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "budget.json"
    budget = JudgeBudget(BudgetPolicy(calls_per_minute=1, state_file=state), clock=Clock())
    state.mkdir()  # os.replace onto a directory fails
    assert budget.try_acquire(0, 0.0) is not None
    assert budget.try_acquire(0, 0.0) is None  # still enforced in memory
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
                if budget.try_acquire(100, 0.0) is not None:
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
    assert sum(budget.try_acquire(1, 0.0) is not None for _ in range(60)) == 10
    caplog.clear()
    budget.set_group(owned=1, total=6)  # the same evidence again: already said
    assert not caplog.records
    budget.set_group(owned=2, total=3)  # uneven but possible with 2 members: the static share
    assert budget.share == 0.5
