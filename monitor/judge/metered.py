"""One door for every judge call: the budget first, then the judge, then the cost metrics.

Production judging (`try_judge`) and the golden replay (`judge`, the `Judge` protocol, so that
`run_replay` can be handed a `MeteredJudge`) both pass through it, so the budget's limits hold
whoever asks for a judgement and the `ragmon_judge_*` cost metrics count every judgement paid for.
Verdict metrics are left to the caller (`JudgeMetrics.observe_verdicts`): golden replays must
never count in production's rates.
"""

from __future__ import annotations

import logging

from monitor.contracts.metrics import JudgeMetrics
from monitor.contracts.model import Judgement, RagRecord
from monitor.judge.budget import Cost, JudgeBudget, cost_bound
from monitor.judge.protocol import Judge, RecordMeta
from monitor.llm.outcome import JudgeOutcome

__all__ = ["BUDGET_EXHAUSTED", "MeteredJudge"]

log = logging.getLogger(__name__)

BUDGET_EXHAUSTED = "judge budget exhausted"


class MeteredJudge:
    """`judge` behind `budget` (None: no limits), its cost counted in `metrics`."""

    def __init__(self, judge: Judge, budget: JudgeBudget | None, metrics: JudgeMetrics) -> None:
        self.inner = judge
        self.budget = budget
        self.metrics = metrics

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def preferred_concurrency(self) -> int | None:
        """Judgements the inner judge wants in flight at once (a batching judge: enough to fill
        its batches), or None: no preference."""
        wanted = getattr(self.inner, "preferred_concurrency", None)
        return wanted if isinstance(wanted, int) else None

    async def try_judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement | None:
        """The judgement, or None when the budget cannot cover its upper-bound cost: then nothing
        is sent, spent or counted, and the record is not judged.

        A judgement cancelled midway keeps its whole reservation: what it spent is unknown.
        """
        budget = self.budget
        grant = None
        if budget is not None:
            grant = budget.try_acquire(cost_bound(record, self.inner))
            if grant is None:
                return None
        judgement = await self._judge_safely(record, sampling_weight)
        if budget is not None and grant is not None:
            budget.settle(grant, Cost.of(judgement))
        self.metrics.observe_cost(judgement)
        return judgement

    async def judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        """`try_judge` as the `Judge` protocol has it: a budget refusal is a failed judgement
        (outcome `budget_exhausted`, error `BUDGET_EXHAUSTED`), reported like any judge error."""
        judgement = await self.try_judge(record, sampling_weight=sampling_weight)
        if judgement is None:
            return self._failed(record, sampling_weight, JudgeOutcome.BUDGET_EXHAUSTED, BUDGET_EXHAUSTED)
        return judgement

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def _judge_safely(self, record: RagRecord, sampling_weight: float) -> Judgement:
        """Judges report their own failures; a bug in one must still cost one judgement, not the
        caller (a dead judge worker would stall its queue and, behind it, the partition)."""
        try:
            return await self.inner.judge(record, sampling_weight=sampling_weight)
        except Exception as exc:
            log.exception("judge %s failed unexpectedly on trace %s", self.name, record.trace_id)
            return self._failed(
                record, sampling_weight, JudgeOutcome.INTERNAL_ERROR, f"unexpected {type(exc).__name__}"
            )

    def _failed(
        self, record: RagRecord, sampling_weight: float, outcome: JudgeOutcome, error: str
    ) -> Judgement:
        meta = RecordMeta(
            record.trace_id, record.query_type, record.service, self.name, self.model, sampling_weight
        )
        return Judgement.failed(outcome, error, **meta.kwargs())
