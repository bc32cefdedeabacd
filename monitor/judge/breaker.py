"""A circuit breaker for the judge: an outage pauses judging instead of burning samples.

Closed: every judgement goes ahead. `failures` consecutive outage errors (refused connections,
429, 5xx, 529, timeouts, a rejected key, a refusal for billing — the judge's trouble, not the
record's) open it: nothing goes ahead for a
pause, then one probe at a time (half-open). A probe that succeeds closes it; one that fails opens it
again for twice the pause, up to `max_pause_seconds`. The samples stay on their topic meanwhile,
their offsets uncommitted, so an outage costs time, never judgements. While it lasts, one log
line a minute names its cause (the judge's redacted error: never a key).
"""

from __future__ import annotations

import asyncio
import logging
import time
from enum import StrEnum

from prometheus_client import Gauge

from monitor.judge.config import BreakerConfig
from monitor.llm.outcome import JudgeOutcome

log = logging.getLogger(__name__)

# Outcomes that say the judge service is unavailable, whatever the record: retried later. A record
# whose own content fails the judge (invalid output twice, a 4xx) is written with its error.
OUTAGE = frozenset(
    {
        JudgeOutcome.CONNECTION_ERROR,
        JudgeOutcome.OVERLOADED,
        JudgeOutcome.SERVER_ERROR,
        JudgeOutcome.RATE_LIMITED,
        JudgeOutcome.TIMEOUT,
        # A revoked key or an empty account fails every record alike: written failed, each sample
        # would be lost and its offset committed, burning the backlog until someone noticed.
        JudgeOutcome.AUTH_ERROR,
        JudgeOutcome.BILLING_ERROR,
    }
)
_CREDENTIALS = frozenset({JudgeOutcome.AUTH_ERROR, JudgeOutcome.BILLING_ERROR})
_LOG_EVERY_SECONDS = 60.0


class State(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    def __init__(self, config: BreakerConfig, gauge: Gauge | None = None) -> None:
        self._cfg = config
        self._gauge = gauge
        self.state = State.CLOSED
        self._failures = 0
        self._pause = config.min_pause_seconds
        self._reopen_at = 0.0
        self._probing = False
        self.successes = 0  # judgements that went through, ever
        self._logged_at = -_LOG_EVERY_SECONDS  # the last "judge unavailable" line
        self._changed = asyncio.Condition()

    async def admit(self) -> bool:
        """Wait until a judgement may go ahead; True when it is the half-open probe."""
        async with self._changed:
            while True:
                if self.state is State.CLOSED:
                    return False
                now = time.monotonic()
                if self.state is State.OPEN and now >= self._reopen_at:
                    self.state = State.HALF_OPEN
                if self.state is State.HALF_OPEN and not self._probing:
                    self._probing = True
                    return True
                wait = self._reopen_at - now if self.state is State.OPEN else None
                try:
                    async with asyncio.timeout(wait):
                        await self._changed.wait()
                except TimeoutError:
                    pass

    async def success(self) -> None:
        self.successes += 1
        async with self._changed:
            if self.state is not State.CLOSED:
                log.info("judge reachable again: circuit closed")
            self.state = State.CLOSED
            self._failures = 0
            self._pause = self._cfg.min_pause_seconds
            self._probing = False
            self._logged_at = -_LOG_EVERY_SECONDS
            self._set_gauge()
            self._changed.notify_all()

    async def abandon_probe(self) -> None:
        """The probe was not sent after all (e.g. the budget said no): another may go."""
        async with self._changed:
            self._probing = False
            self._changed.notify_all()

    async def failure(self, outcome: JudgeOutcome, probe: bool, cause: str = "") -> None:
        """Count an outage error (`probe`: of the half-open probe); `cause` is the judge's error
        text, already redacted, for the log."""
        async with self._changed:
            if probe:
                self._probing = False
                self._pause = min(self._pause * 2, self._cfg.max_pause_seconds)
                self._open()
            elif self.state is State.CLOSED:
                self._failures += 1
                if self._failures >= self._cfg.failures:
                    self._open()
            if self.state is not State.CLOSED:
                self._report(outcome, cause)
            self._changed.notify_all()

    def _open(self) -> None:
        self.state = State.OPEN
        self._reopen_at = time.monotonic() + self._pause
        self._set_gauge()

    def _report(self, outcome: JudgeOutcome, cause: str) -> None:
        """At most one line a minute while the judge is down, naming why."""
        now = time.monotonic()
        if now - self._logged_at < _LOG_EVERY_SECONDS:
            return
        self._logged_at = now
        what = "judge credentials or billing refused" if outcome in _CREDENTIALS else "judge unavailable"
        log.warning(
            "%s (%s: %s): judging paused, samples wait on their topic; probing every %.0fs+",
            what,
            outcome.value,
            cause[:300] or "no detail",
            self._pause,
        )

    def _set_gauge(self) -> None:
        if self._gauge is not None:
            self._gauge.set(0 if self.state is State.CLOSED else 1)
