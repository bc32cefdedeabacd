"""The judge's spending limits: calls per minute, tokens per hour and USD per day, all at once.

Each limit is a token bucket in its strict form: a spent token comes back exactly one period
after it was spent (a sliding window), rather than trickling back at limit/period. The classic
refill lets a full bucket plus a period's refill — up to twice the limit — through in one period
under a burst; this form never lets more than `limit` through in *any* period-long interval.
Spending is kept in 60 time buckets per period, and a bucket counts until the whole of it has left
the window, so the check errs by at most 1/60 of a period towards spending less.

A judgement's cost is only known afterwards, so `try_acquire` reserves an upper bound of it
(`cost_bound`: an LLM judge's own, `LLMJudgeBase.cost_bound`, says why it is one) and `settle`
replaces that with what was spent. A call is one API request, as the provider's rate limits count
them: a repair request and every retry of the HTTP client are calls; a judge that makes no request
(the offline lexical judge) spends one call per judgement. The limits hold exactly because the
reservations are upper bounds; were one short, the overshoot would be at most the error of the
judgements in flight, and the excess would then block further calls until it left the window.

With `state_file` set, spending survives a restart: the buckets are written (atomically: temp
file, fsync, rename) after every change, with wall-clock times. An unreadable state file fails
closed — the budget counts as spent for one period — because guessing "nothing spent" could
exceed the limit.

Replicas do not talk to each other, so the limits are split statically: with `replicas: N` each
process enforces limit / N, and N processes together can never exceed the limit — a coordinator
or a shared ledger could not promise that without a round trip per judgement. Unused shares are
lost (a replica that is down spends nothing), which errs towards spending less. When the consumer
group proves there are more members than N (this member owns fewer partitions than any of N
members would), the share shrinks to the partitions owned, so the group's steady spending still
fits the limits, and an error says to raise `replicas`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from monitor.contracts.model import Judgement, RagRecord
from monitor.judge.protocol import Judge

__all__ = [
    "DEFAULT_USD_PER_DAY",
    "OFFLINE_COST",
    "BudgetPolicy",
    "Cost",
    "CostBounded",
    "Grant",
    "JudgeBudget",
    "SlidingLimit",
    "cost_bound",
]

log = logging.getLogger(__name__)

_SLOTS = 60
_STATE_VERSION = 1
# The USD a day an LLM judge may spend when `judge.budget.usd_per_day` is not set (see
# `BudgetPolicy.with_default_cap`): a mis-set sampling rate or a flood of traffic then costs at
# most this, not whatever the account allows.
DEFAULT_USD_PER_DAY = 10.0


class BudgetPolicy(BaseModel):
    """The `judge.budget` config section; None = no limit of that kind."""

    model_config = ConfigDict(extra="forbid")

    calls_per_minute: int | None = Field(
        None,
        ge=0,
        description="API requests, repairs and client retries included (offline judge: 1 a judgement)",
    )
    tokens_per_hour: int | None = Field(None, ge=0)
    usd_per_day: float | None = Field(None, ge=0)
    state_file: Path | None = Field(None, description="keeps spending across restarts")
    replicas: int = Field(
        1, ge=1, description="sidecar replicas sharing these limits: each one enforces limit / replicas"
    )

    # True when `usd_per_day` is the default cap, not configured: the judge stage says so at start.
    _default_cap: bool = PrivateAttr(default=False)

    @property
    def enabled(self) -> bool:
        return any(x is not None for x in (self.calls_per_minute, self.tokens_per_hour, self.usd_per_day))

    @property
    def default_cap(self) -> bool:
        return self._default_cap

    def with_default_cap(self) -> BudgetPolicy:
        """For a judge that costs money: `DEFAULT_USD_PER_DAY` unless `usd_per_day` was set, an
        explicit null included (no USD limit, by choice)."""
        if "usd_per_day" in self.model_fields_set:
            return self
        capped = self.model_copy(update={"usd_per_day": DEFAULT_USD_PER_DAY})
        capped._default_cap = True
        return capped


class SlidingLimit:
    """At most `limit` spent in any `period` seconds (bucketed; see the module docstring)."""

    __slots__ = ("_slots", "limit", "period", "width")

    def __init__(self, limit: float, period: float) -> None:
        self.limit = float(limit)
        self.period = float(period)
        self.width = self.period / _SLOTS
        self._slots: dict[int, float] = {}  # slot index (time // width) -> amount spent

    def _expire(self, now: float) -> None:
        # Slot k covers [k*width, (k+1)*width): it counts while any of it is within the window.
        oldest = math.floor((now - self.period) / self.width)
        if self._slots and min(self._slots) < oldest:
            self._slots = {k: v for k, v in self._slots.items() if k >= oldest}

    def spent(self, now: float) -> float:
        self._expire(now)
        return sum(self._slots.values())

    def allows(self, amount: float, now: float) -> bool:
        return self.spent(now) + amount <= self.limit * (1 + 1e-12)

    def charge(self, amount: float, at: float) -> None:
        slot = math.floor(at / self.width)
        self._slots[slot] = self._slots.get(slot, 0.0) + amount

    def adjust(self, delta: float, at: float, now: float) -> None:
        """Correct an earlier charge made at `at`; once that slot has left the window, a
        positive correction lands now (it still has to count somewhere), a negative one is moot."""
        self._expire(now)
        slot = math.floor(at / self.width)
        if slot in self._slots:
            self._slots[slot] = max(0.0, self._slots[slot] + delta)
        elif delta > 0:
            self.charge(delta, now)

    def fill(self, now: float) -> None:
        """Count the limit as wholly spent now (fail closed)."""
        self._slots = {math.floor(now / self.width): self.limit}

    def dump(self) -> dict[str, Any]:
        return {"limit": self.limit, "period": self.period, "slots": [[k, v] for k, v in self._slots.items()]}

    def load(self, state: dict[str, Any], now: float) -> None:
        if float(state["period"]) != self.period:
            raise ValueError("period changed")
        self._slots = {int(k): float(v) for k, v in state["slots"] if float(v) >= 0}
        self._expire(now)


@dataclass(slots=True, frozen=True)
class Cost:
    """What one judgement may spend (the bound `try_acquire` reserves) or spent (what `settle`
    charges instead): API requests, tokens, USD. `usd` None: unknown, the model has no price."""

    calls: int
    tokens: int
    usd: float | None

    @classmethod
    def of(cls, judgement: Judgement) -> Cost:
        """What `judgement` spent. At least one call: a judgement that sent no request (the offline
        judge, or an LLM judge failing before it sent one) still took its turn."""
        return cls(max(1, judgement.requests), sum(judgement.tokens.as_dict().values()), judgement.cost_usd)


OFFLINE_COST = Cost(calls=1, tokens=0, usd=0.0)


@runtime_checkable
class CostBounded(Protocol):
    """A judge that knows, before judging, an upper bound of what a record can cost (the LLM judges)."""

    def cost_bound(self, record: RagRecord) -> Cost: ...


def cost_bound(record: RagRecord, judge: Judge) -> Cost:
    """What to reserve for `judge` judging `record`: the judge's own bound, or for a judge that has
    none — an offline one, which sends no request — one call and nothing else."""
    return judge.cost_bound(record) if isinstance(judge, CostBounded) else OFFLINE_COST


@dataclass(slots=True, frozen=True)
class Grant:
    """A reservation made by `try_acquire`, to be handed back to `settle`."""

    at: float
    bound: Cost


class JudgeBudget:
    """Calls/minute, tokens/hour and USD/day enforced together: a call goes ahead only if all
    three have room for it, and then it is charged to all three."""

    def __init__(self, policy: BudgetPolicy, clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self._clock = clock
        self._last = -math.inf
        self._warned = -math.inf
        self._limits: dict[str, SlidingLimit] = {}
        self._full: dict[str, float] = {}  # the configured (whole-group) limits
        share = 1.0 / policy.replicas
        for name, limit, period in (
            ("calls", policy.calls_per_minute, 60.0),
            ("tokens", policy.tokens_per_hour, 3600.0),
            ("usd", policy.usd_per_day, 86400.0),
        ):
            if limit is not None:
                self._full[name] = float(limit)
                self._limits[name] = SlidingLimit(limit * share, period)
        self.share = share
        self._path = policy.state_file
        if self._path is not None:
            self._restore(self._path)

    def _now(self) -> float:
        # Monotonic even if the wall clock steps back, so a slot is never charged twice over.
        t = self._clock()
        if t < self._last:
            t = self._last
        self._last = t
        return t

    def try_acquire(self, bound: Cost) -> Grant | None:
        """Reserve `bound` (a judgement's upper-bound cost); None when any limit lacks room (skip
        it, and count `ragmon_judge_skipped_total{reason="budget"}`). A bound without USD reserves
        none: a USD limit cannot be enforced for a model whose price is unknown."""
        now = self._now()
        amounts = _amounts(bound)
        limits = self._limits
        if not all(lim.allows(amounts[name] or 0.0, now) for name, lim in limits.items()):
            return None
        for name, lim in limits.items():
            lim.charge(amounts[name] or 0.0, now)
        self._persist()
        return Grant(now, bound)

    def settle(self, grant: Grant, actual: Cost) -> None:
        """Replace the grant's reservation with what was spent, limit by limit (unknown USD: keep
        the reservation — an unpriced model is not free)."""
        now = self._now()
        reserved, spent = _amounts(grant.bound), _amounts(actual)
        for name, lim in self._limits.items():
            amount = spent[name]
            if amount is not None:
                lim.adjust(amount - (reserved[name] or 0.0), grant.at, now)
        self._persist()

    def set_group(self, owned: int, total: int) -> None:
        """Re-split after a rebalance: this member owns `owned` of the topic's `total` partitions.

        With at most `replicas` members, each owns at least total // replicas partitions (the
        assignors balance counts), so fewer proves an undersized `replicas`.
        """
        replicas = self.policy.replicas
        share = 1.0 / replicas
        undersized = total >= replicas and owned < total // replicas
        if undersized:
            share = owned / total
        if share == self.share:
            return
        if undersized:
            log.error(
                "judge budget: this member owns %d of %d partitions, so the group has more than "
                "judge.budget.replicas=%d members; enforcing %.3g of each limit here (raise replicas)",
                owned,
                total,
                replicas,
                share,
            )
        self.share = share
        for name, lim in self._limits.items():
            lim.limit = self._full[name] * share

    def remaining(self) -> dict[str, float]:
        """Room left per configured limit (for logs and a gauge)."""
        now = self._now()
        return {name: max(0.0, lim.limit - lim.spent(now)) for name, lim in self._limits.items()}

    # -- persistence -------------------------------------------------------------------------

    def _persist(self) -> None:
        if self._path is None:
            return
        state = {
            "version": _STATE_VERSION,
            "clock": self._last,
            "limits": {name: lim.dump() for name, lim in self._limits.items()},
        }
        path = self._path
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(state, f, separators=(",", ":"))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            # The limits still hold in memory; only a restart could forget spending. Say so,
            # at most once a minute, rather than stop judging over a full disk.
            mono = time.monotonic()
            if mono - self._warned >= 60.0:
                self._warned = mono
                log.warning("cannot write judge budget state %s: %s", path, exc)

    def _restore(self, path: Path) -> None:
        now = self._now()
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            return
        except OSError as exc:
            self._fail_closed(path, f"cannot read it ({exc})", now)
            return
        try:
            state = json.loads(raw)
            if state.get("version") != _STATE_VERSION:
                raise ValueError(f"version {state.get('version')!r}")
            saved = state["limits"]
            self._last = max(self._last, float(state.get("clock", 0.0)))
            for name, lim in self._limits.items():
                if name in saved:
                    lim.load(saved[name], self._last)
        except (ValueError, KeyError, TypeError) as exc:
            self._fail_closed(path, f"unusable state ({exc})", now)

    def _fail_closed(self, path: Path, why: str, now: float) -> None:
        log.error(
            "judge budget state %s: %s; counting every budget as spent for one period "
            "(delete the file to start afresh)",
            path,
            why,
        )
        for lim in self._limits.values():
            lim.fill(now)


def _amounts(cost: Cost) -> dict[str, float | None]:
    """`cost` per limit name."""
    return {"calls": float(cost.calls), "tokens": float(cost.tokens), "usd": cost.usd}
