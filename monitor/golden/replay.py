"""One golden replay: ask the target every row, score retrieval and generation separately,
compare with a baseline, gate (`run_replay`).

`run_replay` is what both the one-shot CLI (CI, CronJob) and the sidecar's golden service call. It
writes no file and touches nothing but the gauges it is given: the caller decides where the report
and the baseline go. A row the target cannot answer (timeout after retries, malformed JSON, wrong
shape) fails the whole run with `ReplayFailed` — never a partial report or baseline, because a
missing row would read as a retrieval miss.

The target answers every row before the judge sees any: what the judge will be sent is then known,
so a caller can price it and stop before spending (`approve_judging`, the CLI's cost estimate).
The answers are judged without their citation markers, as the judge stage judges. What the rows
measure is `scores`; the baseline and the gate, `comparison`; the report, `report`. `baselines`
adds the oracle and no-context replays of the same rows (`monitor.golden.baselines`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from monitor.contracts.model import RagRecord
from monitor.golden.baselines import (
    REPLAY_SERVICE,
    BaselineMode,
    ModeResult,
    ModeRow,
    ask_mode,
    match_reference,
    replay_ids,
)
from monitor.golden.change import Change
from monitor.golden.comparison import Baseline, BaselineError, GateConfig
from monitor.golden.gauges import GoldenGauges
from monitor.golden.intervals import IntervalConfig
from monitor.golden.report import ReplayReport, build_report
from monitor.golden.retrieval import score_ranking
from monitor.golden.schema import GoldenRow
from monitor.golden.scores import RowResult, rating_ratio
from monitor.golden.targets import Target, TargetError, make_target
from monitor.judge import Judge, create_judge, skip_reason
from monitor.judge.citations import check_citations, read_citations

__all__ = ["ReplayFailed", "run_replay"]


class ReplayFailed(Exception):
    """The target could not be replayed (bad input: exit 2). `errors` name the rows."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"replay failed: {errors[0] if errors else 'unknown error'}{more}")


@dataclass(slots=True)
class _State:
    failures: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Asked:
    """A row the target answered, and the record the judge will be given (None: not judged)."""

    result: RowResult | ModeRow
    record: RagRecord | None


async def _ask_row(
    row: GoldenRow,
    target: Target,
    k: int,
    slots: asyncio.Semaphore,
    state: _State,
    generator_model: str | None = None,
) -> _Asked | None:
    async with slots:
        if state.failures:  # fail fast: the run is lost, do not keep the target busy
            return None
        t0 = time.perf_counter()
        try:
            resp = await target.ask(row_id=row.id, query=row.query, query_type=row.query_type, k=k)
        except TargetError as exc:
            state.failures.append(str(exc))
            return None
        latency = time.perf_counter() - t0
    retrieved = [c.id for c in resp.chunks]
    scores = score_ranking(retrieved, row.relevance(), k) if row.answerable else None
    result = RowResult(
        row.id,
        row.query_type,
        row.answerable,
        retrieved,
        resp.answer,
        scores,
        latency_s=latency,
        correctness=match_reference(resp.answer, row.reference_answer) if row.answerable else None,
        difficulty=row.difficulty,
    )
    trace_id, span_id = replay_ids(row.id)
    record = RagRecord(
        trace_id,
        span_id,
        REPLAY_SERVICE,
        row.query,
        row.query_type,
        list(resp.chunks),
        resp.answer,
        model=generator_model,
        replay=True,
    )
    skipped = skip_reason(record)
    if skipped is not None:
        result.judge_error = f"skipped: {skipped}"
        return _Asked(result, None)
    return _Asked(result, record)


async def _judge_row(asked: _Asked, judge: Judge, slots: asyncio.Semaphore) -> None:
    result, record = asked.result, asked.record
    if record is None:
        return
    async with slots:
        try:
            # Without its citation markers, as the judge stage judges (`read_citations`).
            judged, cited = read_citations(record)
            judgement = await judge.judge(judged)
        except Exception as exc:  # a judge is not supposed to raise; one bad row must not end the run
            result.judge_error = f"{exc.__class__.__name__}: {exc}"
            if isinstance(result, RowResult):
                result.judge_failed = True
            return
    if judgement.error is not None:
        result.judge_error = judgement.error
        if isinstance(result, RowResult):
            result.judge_failed = True
    else:
        result.faithfulness = judgement.faithfulness
        result.refused = judgement.refuses  # no answer given; a hedged answer is an answer
        if isinstance(result, RowResult):
            reason = judgement.undecided.get("faithfulness")
            result.undecided = None if reason is None else reason.value
            result.citations = check_citations(record.chunks, cited, judgement)
            result.answer_relevance = rating_ratio(judgement.answer_relevance)
            result.context_relevance = rating_ratio(judgement.context_relevance)


async def run_replay(
    rows: Sequence[GoldenRow],
    target: Target | str,
    *,
    k: int = 5,
    judge: Judge | str | None = None,
    concurrency: int = 8,
    baseline: Baseline | None = None,
    gate: GateConfig | None = None,
    intervals: IntervalConfig | None = None,
    golden_sha256: str = "",
    golden_path: str = "",
    gauges: GoldenGauges | None = None,
    config: Mapping[str, Any] | None = None,
    approve_judging: Callable[[Sequence[RagRecord]], None] | None = None,
    baselines: Sequence[BaselineMode] = (),
    change: Change | None = None,
    generator_model: str | None = None,
) -> ReplayReport:
    """Replay `rows` against `target`, score, gate. Raises ReplayFailed / BaselineError (bad input).

    `target` and `judge` given as objects are not closed (the caller owns them); given by name they
    are made and closed here. `gauges` (a `GoldenGauges`) is updated only after a complete run, so
    `ragmon_golden_last_run_timestamp_seconds` going stale is what a failing schedule looks like.
    `approve_judging` is called with the records about to be judged, after the target answered
    every row and before the first judge request; whatever it raises ends the run, nothing judged.
    `baselines` ("oracle", "no_context") replays the rows again with the given context; their
    judgements are in what `approve_judging` sees. A baseline the target cannot serve is reported
    as not measured and never fails the run. `generator_model`: the model that wrote the target's
    answers, when known (the report notes a judge of the same model: `self_evaluation`).
    """
    if k < 1 or concurrency < 1:
        raise ValueError("k and concurrency must be >= 1")
    if not rows:
        raise ReplayFailed(["no golden rows"])
    gate = gate or GateConfig()
    interval_cfg = intervals or IntervalConfig()
    warnings = _baseline_warnings(baseline, k, golden_sha256)
    async with _opened(target, judge, concurrency) as (tgt, jdg):
        started, t0 = time.time(), time.perf_counter()
        done, modes = await _ask_and_judge(
            rows, tgt, jdg, k, concurrency, baselines, approve_judging, generator_model
        )
    results = [a.result for a in done if isinstance(a.result, RowResult)]
    report = await asyncio.to_thread(
        build_report,
        results,
        modes,
        k=k,
        gate=gate,
        baseline=baseline,
        interval_config=interval_cfg,
        judge=jdg,
        config=_run_config(tgt, jdg, k, concurrency, gate, list(modes), config),
        golden_sha256=golden_sha256,
        golden_path=golden_path,
        started=started,
        t0=t0,
        warnings=warnings,
        change=change,
        generator_model=generator_model,
    )
    if gauges is not None:
        gauges.publish(report)
    return report


@asynccontextmanager
async def _opened(
    target: Target | str, judge: Judge | str | None, concurrency: int
) -> AsyncIterator[tuple[Target, Judge]]:
    """The target and the judge; those given by name are made here and closed on leaving (the
    caller owns those given as objects)."""
    tgt = make_target(target, concurrency=concurrency) if isinstance(target, str) else target
    jdg = create_judge(judge or "lexical") if judge is None or isinstance(judge, str) else judge
    try:
        yield tgt, jdg
    finally:
        if tgt is not target:
            await tgt.aclose()
        if jdg is not judge:
            await jdg.aclose()


def _run_config(
    tgt: Target,
    jdg: Judge,
    k: int,
    concurrency: int,
    gate: GateConfig,
    modes: list[BaselineMode],
    config: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """How the run was made, as the report records it (the caller's `config` added)."""
    return {
        "k": k,
        "target": tgt.description,
        "judge": {"backend": jdg.name, "model": jdg.model},
        "concurrency": concurrency,
        "gate": gate.model_dump(),
        "baselines": modes,
        **(config or {}),
    }


def _baseline_warnings(baseline: Baseline | None, k: int, golden_sha256: str) -> list[str]:
    """What the report should say about the baseline; BaselineError when it cannot be compared."""
    if baseline is None:
        return []
    if baseline.k != k:
        raise BaselineError(f"baseline {baseline.path} was made with k={baseline.k}, this run uses k={k}")
    if golden_sha256 and baseline.sha256 != golden_sha256:
        return [
            f"the baseline was made from another golden file (sha256 {baseline.sha256[:12]}…, now "
            f"{golden_sha256[:12]}…): rows are compared by id"
        ]
    return []


async def _ask_and_judge(
    rows: Sequence[GoldenRow],
    tgt: Target,
    jdg: Judge,
    k: int,
    concurrency: int,
    baselines: Sequence[BaselineMode],
    approve_judging: Callable[[Sequence[RagRecord]], None] | None,
    generator_model: str | None,
) -> tuple[list[_Asked], dict[BaselineMode, ModeResult]]:
    """Every row asked of the target (then the baseline modes), and only once all have answered,
    approved and judged: the rows the target answered, and each mode's results."""
    state = _State()
    http_slots, judge_slots = asyncio.Semaphore(concurrency), asyncio.Semaphore(concurrency)
    asked = await asyncio.gather(*(_ask_row(r, tgt, k, http_slots, state, generator_model) for r in rows))
    if state.failures:
        raise ReplayFailed(state.failures)
    done = [a for a in asked if a is not None]
    wanted = list(dict.fromkeys(baselines))
    answered = await asyncio.gather(*(ask_mode(rows, tgt, k, m, http_slots) for m in wanted))
    modes: dict[BaselineMode, ModeResult] = dict(zip(wanted, answered, strict=True))
    extra = [
        _Asked(row, record)
        for res in modes.values()
        for row, record in zip(res.rows, res.records, strict=True)
    ]
    if approve_judging is not None:
        approve_judging([a.record for a in (*done, *extra) if a.record is not None])
    await asyncio.gather(*(_judge_row(a, jdg, judge_slots) for a in (*done, *extra)))
    return done, modes
