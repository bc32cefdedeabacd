"""Oracle and no-context baselines: the golden rows replayed with the labelled relevant chunks as
the context (oracle) and with no context at all, beside the normal replay.

Why: a faithfulness of 0.8 does not say which half lost the rest. Given the right chunks (oracle),
generation shows what it does when retrieval is perfect, so normal − oracle is what retrieval costs
(the oracle gap, paired per row with its bootstrap interval). Given nothing, the answerable rows the
model still gets right come from its memory: on those rows the golden set cannot tell a grounded
answer from a remembered one (a grounding risk), and the refusals say whether it knows to stop.

Measured only when the target honours the context: each response must come back with exactly the
chunks given (same ids, none for no-context). A target that cannot take context (no context field
configured, a callable without a ``context`` parameter), that fails on context requests, or that
returns other chunks on any row is reported `not_measured` with the reason — never scored as if it
had been. An oracle row needs its relevant chunks' text (`relevant_chunks` in the golden row); rows
without it are left out of the oracle and counted. Unanswerable rows get an empty oracle context:
perfect retrieval finds nothing relevant for them.

`answer_match` (all three modes): an answerable row's answer holds at least `MATCH_SHARE` of the
reference answer's key tokens (lower-cased words and numbers, stop words out; "90,790" is 90 and
790). A lexical stand-in for "the answer is right": it misses paraphrases and yes/no answers
phrased as sentences, the same way in every mode, so the columns compare. Faithfulness with no
context has nothing to be faithful to: it is not reported for that mode (`answered_rate` is).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from monitor.contracts.model import Chunk, RagRecord
from monitor.golden.intervals import Interval, IntervalConfig, drop_intervals, mean_intervals
from monitor.golden.schema import GoldenRow
from monitor.golden.targets import ContextChunk, Target, TargetError, TargetResponse
from monitor.judge import skip_reason

__all__ = [
    "BASELINE_MODES",
    "MATCH_SHARE",
    "MODE_METRICS",
    "REPLAY_SERVICE",
    "STOP_WORDS",
    "BaselineMode",
    "Baselines",
    "ModeResult",
    "ModeRow",
    "ask_mode",
    "match_reference",
    "parse_modes",
    "replay_ids",
    "score_baselines",
]

BaselineMode = Literal["oracle", "no_context"]
BASELINE_MODES: tuple[BaselineMode, ...] = get_args(BaselineMode)
MODE_METRICS = ("faithfulness", "refusal_accuracy", "false_refusal_rate", "answered_rate", "answer_match")
_LOWER_IS_BETTER = frozenset(("false_refusal_rate",))
_NOT_FOR = {"no_context": frozenset(("faithfulness",))}
REPLAY_SERVICE = "golden-replay"
MATCH_SHARE = 0.8
_ALL = "all"
_WORD = re.compile(r"\w+")
STOP_WORDS = frozenset(  # function words left out of a text's key tokens
    _WORD.findall(
        "a an and are as at be but by did do does for from had has have how in is it its of on or that the "
        "their there these this to was were what when where which who whom why will with"
    )
)
_SHOWN_MISMATCHES = 3


def parse_modes(text: str | Sequence[str]) -> tuple[BaselineMode, ...]:
    """`oracle,no-context` (or a list) → the modes, in canonical order; ValueError on others."""
    items = text.split(",") if isinstance(text, str) else list(text)
    wanted = {i.strip().lower().replace("-", "_") for i in items if i.strip()}
    unknown = sorted(wanted - set(BASELINE_MODES))
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}: expected oracle and/or no-context")
    return tuple(m for m in BASELINE_MODES if m in wanted)


def replay_ids(key: str) -> tuple[str, str]:
    """Trace and span ids of a replayed row, stable across runs (`key`: the row id, or mode:id)."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    return digest[:32], digest[32:48]


def _key_tokens(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS}


def match_reference(answer: str, reference: str) -> float | None:
    """1.0 when `answer` holds at least MATCH_SHARE of `reference`'s key tokens, else 0.0; None
    without a reference (unanswerable rows, or one made only of stop words)."""
    want = _key_tokens(reference)
    if not want:
        return None
    return 1.0 if len(want & _key_tokens(answer)) >= MATCH_SHARE * len(want) - 1e-9 else 0.0


@dataclass(slots=True)
class ModeRow:
    """One row as replayed in one mode (normal included), with what the judge said."""

    id: str
    query_type: str
    answerable: bool
    answer: str
    returned: list[str]  # chunk ids that came back
    answer_match: float | None
    faithfulness: float | None = None
    refused: bool | None = None
    judge_error: str | None = None

    def value(self, metric: str) -> float | None:
        if metric == "faithfulness":
            return self.faithfulness
        if metric == "answer_match":
            return self.answer_match if self.answerable else None
        if self.refused is None:
            return None
        if metric == "answered_rate":
            return 0.0 if self.refused else 1.0
        if metric == "refusal_accuracy":
            return None if self.answerable else float(self.refused)
        if metric == "false_refusal_rate":
            return float(self.refused) if self.answerable else None
        raise KeyError(metric)

    def to_json_dict(self, mode: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "query_type": self.query_type,
            "answerable": self.answerable,
            "answer": self.answer,
            "returned": self.returned,
            **{m: self.value(m) for m in MODE_METRICS if m not in _NOT_FOR.get(mode, ())},
            "refused": self.refused,
            "judge_error": self.judge_error,
        }


@dataclass(slots=True)
class ModeResult:
    """One baseline mode: measured, or why not. `left_out`: rows not replayed in this mode (oracle:
    no chunk text in the golden row)."""

    mode: BaselineMode
    measured: bool
    reason: str | None = None
    rows: list[ModeRow] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    records: list[RagRecord | None] = field(default_factory=list)  # per row: what the judge gets


def _context(row: GoldenRow, mode: BaselineMode) -> list[ContextChunk] | None:
    if mode == "no_context":
        return []
    texts = row.oracle_context()
    return None if texts is None else [ContextChunk(c.id, c.content) for c in texts]


async def ask_mode(
    rows: Sequence[GoldenRow], target: Target, k: int, mode: BaselineMode, slots: asyncio.Semaphore
) -> ModeResult:
    """Replay `rows` with the mode's context. A target error or a response with other chunks than
    those given makes the mode `not_measured` (the normal replay is not affected)."""
    if not target.supports_context:
        return ModeResult(
            mode,
            False,
            f"target {target.description} takes no context (HTTP: set target.context.field; "
            "a callable: give it a `context` parameter)",
        )
    plan = [(row, _context(row, mode)) for row in rows]
    result = ModeResult(mode, True, left_out=[row.id for row, ctx in plan if ctx is None])
    errors: list[str] = []

    async def one(row: GoldenRow, ctx: list[ContextChunk]) -> tuple[ModeRow, RagRecord | None] | None:
        async with slots:
            if errors:
                return None
            try:
                resp = await target.ask(
                    row_id=row.id, query=row.query, query_type=row.query_type, k=k, context=ctx
                )
            except TargetError as exc:
                errors.append(str(exc))
                return None
        return _answered(row, ctx, resp, mode)

    done = await asyncio.gather(*(one(row, ctx) for row, ctx in plan if ctx is not None))
    if errors:
        more = f" (+{len(errors) - 1} more rows)" if len(errors) > 1 else ""
        return ModeResult(mode, False, f"the target failed on context requests: {errors[0]}{more}")
    answered = [d for d in done if d is not None]
    ignored = [r for r, _ in answered if r.judge_error and r.judge_error.startswith("ignored:")]
    if ignored:
        examples = "; ".join(f"row {r.id!r}: {r.judge_error}" for r in ignored[:_SHOWN_MISMATCHES])
        return ModeResult(
            mode,
            False,
            f"target ignores context: {len(ignored)} of {len(answered)} rows came back with other "
            f"chunks than given ({examples}): {mode.replace('_', '-')} not measured",
        )
    result.rows = [r for r, _ in answered]
    result.records = [rec for _, rec in answered]
    return result


def _answered(
    row: GoldenRow, ctx: list[ContextChunk], resp: TargetResponse, mode: BaselineMode
) -> tuple[ModeRow, RagRecord | None]:
    """A mode's row as answered, and the record to judge (None: the target answered from other
    chunks than given, or there is nothing to judge; the row says which)."""
    given = {c.id: c.content for c in ctx}
    returned = [c.id for c in resp.chunks]
    mrow = ModeRow(
        row.id,
        row.query_type,
        row.answerable,
        resp.answer,
        returned,
        match_reference(resp.answer, row.reference_answer) if row.answerable else None,
    )
    if set(returned) != set(given):
        mrow.judge_error = f"ignored: gave {sorted(given)}, got {returned[:8]}"
        return mrow, None
    chunks = [Chunk(c.id, c.content if c.content else given[c.id], c.score) for c in resp.chunks]
    trace_id, span_id = replay_ids(f"{mode}:{row.id}")
    record = RagRecord(
        trace_id, span_id, REPLAY_SERVICE, row.query, row.query_type, chunks, resp.answer, replay=True
    )
    skipped = skip_reason(record)
    if skipped is not None:
        mrow.judge_error = f"skipped: {skipped}"
        return mrow, None
    return mrow, record


def _groups(rows: Sequence[ModeRow]) -> dict[str, list[ModeRow]]:
    groups: dict[str, list[ModeRow]] = {_ALL: list(rows)}
    for r in rows:
        groups.setdefault(r.query_type, []).append(r)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0] != _ALL, kv[0])))


def _means(rows: Sequence[ModeRow], metrics: Sequence[str]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for m in metrics:
        values = [v for v in (r.value(m) for r in rows) if v is not None]
        out[m] = sum(values) / len(values) if values else None
    return out


def _values(rows: Sequence[ModeRow], metrics: Sequence[str]) -> dict[str, dict[str, float | None]]:
    return {r.id: {m: r.value(m) for m in metrics} for r in rows}


@dataclass(frozen=True, slots=True)
class Gap:
    """Oracle minus normal on the rows with a value in both, positive when retrieval loses quality
    (for the false refusal rate: normal minus oracle), with its paired interval."""

    value: float | None
    interval: Interval | None

    def to_json(self) -> dict[str, Any]:
        return {"gap": self.value, "interval": self.interval.to_json() if self.interval else None}


@dataclass(slots=True)
class Baselines:
    """The normal replay and each requested baseline, side by side per query type."""

    normal: list[ModeRow]
    modes: dict[BaselineMode, ModeResult]
    # mode ("normal" too) -> group -> metric -> value / interval
    metrics: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    intervals: dict[str, dict[str, dict[str, Interval | None]]] = field(default_factory=dict)
    oracle_gap: dict[str, dict[str, Gap]] = field(default_factory=dict)  # group -> metric

    def metrics_of(self, mode: str) -> Sequence[str]:
        return [m for m in MODE_METRICS if m not in _NOT_FOR.get(mode, ())]

    def to_json_dict(self) -> dict[str, Any]:
        modes: dict[str, Any] = {}
        for mode, res in self.modes.items():
            modes[mode] = {
                "status": "measured" if res.measured else "not_measured",
                "reason": res.reason,
                "rows_replayed": len(res.rows),
                "rows_left_out": res.left_out,
                "metrics": self.metrics.get(mode),
                "intervals": _json_intervals(self.intervals.get(mode, {})),
                "rows": [r.to_json_dict(mode) for r in res.rows],
            }
        return {
            "modes": {"normal": {"status": "measured", "metrics": self.metrics.get("normal")}, **modes},
            "intervals_normal": _json_intervals(self.intervals.get("normal", {})),
            "oracle_gap": {
                group: {m: g.to_json() for m, g in per.items()} for group, per in self.oracle_gap.items()
            }
            or None,
            "answer_match_share": MATCH_SHARE,
        }


def _json_intervals(per: Mapping[str, Mapping[str, Interval | None]]) -> dict[str, Any]:
    return {g: {m: iv.to_json() if iv else None for m, iv in ms.items()} for g, ms in per.items()}


def score_baselines(
    normal: list[ModeRow], modes: Mapping[BaselineMode, ModeResult], cfg: IntervalConfig
) -> Baselines:
    """Per-mode metrics per query type with intervals, and the paired oracle gap (CPU only)."""
    out = Baselines(normal, dict(modes))
    runs: dict[str, list[ModeRow]] = {"normal": normal}
    runs.update({mode: res.rows for mode, res in modes.items() if res.measured})
    for mode, rows in runs.items():
        metrics = out.metrics_of(mode)
        out.metrics[mode] = {g: _means(members, metrics) for g, members in _groups(rows).items()}
        out.intervals[mode] = {
            g: mean_intervals(_values(members, metrics), metrics, cfg, f"{mode}/{g}")
            for g, members in _groups(rows).items()
        }
    oracle = modes.get("oracle")
    if oracle is not None and oracle.measured:
        by_id = {r.id: r for r in normal}
        for group, members in _groups(oracle.rows).items():
            paired = [r for r in members if r.id in by_id]
            before = _values(paired, MODE_METRICS)  # the oracle: "before" retrieval loses anything
            after = _values([by_id[r.id] for r in paired], MODE_METRICS)
            for rid, values in before.items():  # a row counts where both sides have a value
                for m in MODE_METRICS:
                    if values[m] is None or after[rid][m] is None:
                        values[m] = after[rid][m] = None
            ivs = drop_intervals(before, after, MODE_METRICS, cfg, f"oracle-gap/{group}", _LOWER_IS_BETTER)
            gaps: dict[str, Gap] = {}
            for m in MODE_METRICS:
                both = [
                    (o, n)
                    for rid, v in before.items()
                    if (o := v[m]) is not None and (n := after[rid][m]) is not None
                ]
                value = None
                if both:
                    diff = sum(n - o for o, n in both) / len(both)  # normal − oracle
                    value = diff if m in _LOWER_IS_BETTER else -diff
                gaps[m] = Gap(value, ivs[m])
            out.oracle_gap[group] = gaps
    return out
