"""What a replay's LLM judge will cost, before it is asked: calls, tokens and USD, and afterwards
what it did cost.

The estimate is an **upper bound of a run in which every judged row takes one request** (no
retry, no repair), from what each request sends — the judge's own prompt for that row, built as
it will be sent (escaped, clipped), the fixed instructions and the output definition — by the
judge budget's rule (`monitor.llm.usage`, as `LLMJudgeBase.cost_bound` uses it): Claude's and
OpenAI's tokenizers are byte-level BPE, so a text never costs more tokens than its UTF-8 bytes,
plus the same allowance for what the API wraps around a request. Output is bounded by
`max_tokens`, where the API stops. USD prices input at the dearer of plain input and cache write,
so the bound holds whatever the prompt cache does. Retries (429/5xx/timeouts) and the repair of an
invalid output are not in it: the worst case with every one of them (what the budget reserves) is
shown beside it, and the actual, measured afterwards, includes whatever happened.

How tight: on English prompts a token is 3–4 bytes, so input is over-estimated ≈ 3–4×; output
is `max_tokens` per row against the few hundred tokens a claim list takes, and dominates the USD
ratio (≈ 5–10× at the default 2,048) — lower `judge_options.max_tokens` to tighten it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from monitor.contracts.metrics import JudgeMetrics
from monitor.contracts.model import RagRecord
from monitor.judge import Judge
from monitor.judge.llm_judge import LLMJudgeBase
from monitor.judge.metered import MeteredJudge
from monitor.llm.config import ClientConfig
from monitor.llm.usage import Price, input_bound, price_for, usd_bound

__all__ = [
    "CostActual",
    "CostEstimate",
    "CostRefused",
    "approve",
    "estimate_cost",
    "estimate_requests",
    "is_billed",
    "metered",
    "read_actual",
]


class CostRefused(Exception):
    """The estimate is over what the caller allows: nothing was sent to the judge (exit 2)."""


@dataclass(frozen=True, slots=True)
class CostEstimate:
    backend: str
    model: str
    judgements: int  # rows the judge will be given (rows with nothing to judge are skipped)
    calls: int  # API requests, one a judgement
    input_tokens: int
    output_tokens: int
    usd: float | None  # None: the model has no price
    worst_usd: float | None  # every retry and the repair of every row: what the budget reserves
    price: Price | None
    # What the calls are for and what one call handles: the words of `describe` and `versus`, so
    # that the judge of a replay and the generator of `golden synthesize` are priced alike.
    purpose: str = "judge"
    unit: str = "row"

    def describe(self) -> str:
        price = (
            f"${self.price.input:g}/${self.price.output:g} per MTok in/out"
            if self.price is not None
            else "no price for this model (set judge_options.prices)"
        )
        usd = f"${self.usd:.4f}" if self.usd is not None else "$?"
        worst = f"${self.worst_usd:.4f}" if self.worst_usd is not None else "$?"
        return (
            f"{self.purpose} cost estimate ({self.backend} {self.model}, {price}): {self.calls} calls for "
            f"{self.judgements} {self.unit}s, ≤ {self.input_tokens:,} input + ≤ {self.output_tokens:,} "
            f"output tokens, ≤ {usd} (upper bound with one request a {self.unit}: UTF-8 bytes of what is "
            f"sent, max_tokens out; with every retry and repair ≤ {worst})"
        )

    def versus(self, actual: CostActual) -> str:
        """One line: this estimate against what was billed, and their ratio."""
        ratio = f"{self.usd / actual.usd:.1f}×" if self.usd is not None and actual.usd > 0 else "–"
        bound = f"${self.usd:.4f}" if self.usd is not None else "$? (no price)"
        return (
            f"{self.purpose} cost: estimate ≤ {bound} ({self.input_tokens:,} in / {self.output_tokens:,} "
            f"out, {self.calls} calls), actual ${actual.usd:.4f} ({actual.input_tokens:,} in / "
            f"{actual.output_tokens:,} out, {actual.judgements} {self.unit}s): estimate/actual {ratio}"
        )

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "basis": "upper bound, one request a row: UTF-8 bytes of what is sent + API overhead; "
            "output max_tokens; input priced at max(input, cache_write)",
            "calls": self.calls,
            "judgements": self.judgements,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "usd": self.usd,
            "worst_case_usd": self.worst_usd,
        }


def _llm(judge: Judge) -> LLMJudgeBase | None:
    inner = judge.inner if isinstance(judge, MeteredJudge) else judge
    return inner if isinstance(inner, LLMJudgeBase) else None


def is_billed(judge: Judge) -> bool:
    """Whether `judge` sends requests someone pays for (the LLM judges; not the lexical one)."""
    return _llm(judge) is not None


def estimate_cost(records: Sequence[RagRecord], judge: Judge) -> CostEstimate | None:
    """The bound for judging `records` with `judge`; None for a judge that sends nothing (lexical)."""
    llm = _llm(judge)
    if llm is None:
        return None
    sent = []
    worst = 0.0
    for record in records:
        sent.append(llm.sent_bytes(record))
        worst += llm.cost_bound(record).usd or 0.0  # None only without a price: no worst then
    return estimate_requests(llm.name, llm.config, sent, worst_usd=worst)


def estimate_requests(
    backend: str,
    config: ClientConfig,
    sent_bytes: Sequence[int],
    *,
    worst_usd: float | None = None,
    purpose: str = "judge",
    unit: str = "row",
) -> CostEstimate:
    """The bound of one request per item of `sent_bytes` (the UTF-8 bytes each sends: system,
    user turn, output definition), at `config`'s model, prices and `max_tokens`.

    `worst_usd`: the caller's bound with every retry and repair; None: every request tried
    1 + max_retries times, no repair."""
    tokens_in = sum(input_bound(s) for s in sent_bytes)
    tokens_out = len(sent_bytes) * config.max_tokens
    price = price_for(config.model, config.prices)
    usd = worst = None
    if price is not None:
        usd = usd_bound(tokens_in, tokens_out, price)
        worst = worst_usd if worst_usd is not None else usd * (1 + config.max_retries)
    n = len(sent_bytes)
    return CostEstimate(
        backend, config.model, n, n, tokens_in, tokens_out, usd, worst, price, purpose=purpose, unit=unit
    )


def approve(estimate: CostEstimate, *, max_usd: float | None, yes: bool) -> None:
    """Go ahead only when `yes`, or when the estimate is priced and within `max_usd`; else
    `CostRefused` saying what to pass."""
    if yes:
        return
    what = estimate.purpose
    if max_usd is None:
        raise CostRefused(f"an LLM {what} costs money: pass --max-usd USD (a limit) or --yes to go ahead")
    if estimate.usd is None:
        raise CostRefused(
            f"no price for {what} model {estimate.model!r}: cannot check --max-usd "
            "(set judge_options.prices) — or pass --yes"
        )
    if estimate.usd > max_usd:
        raise CostRefused(f"estimated cost ${estimate.usd:.4f} is over --max-usd {max_usd:g}")


@dataclass(frozen=True, slots=True)
class CostActual:
    """What the judge was billed, from the MeteredJudge's accounting (`ragmon_judge_*`)."""

    judgements: int
    input_tokens: int  # plain input, cache reads and cache writes: every input-side token
    output_tokens: int
    usd: float

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "judgements": self.judgements,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "usd": round(self.usd, 8),
        }


def metered(judge: Judge) -> tuple[MeteredJudge, CollectorRegistry]:
    """`judge` behind a MeteredJudge (no budget) whose cost metrics live on a registry of its own."""
    registry = CollectorRegistry()
    return MeteredJudge(judge, None, JudgeMetrics(registry)), registry


def read_actual(registry: CollectorRegistry) -> CostActual:
    """Sum the judge cost counters a `metered` judge wrote."""
    totals: dict[str, float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "ragmon_judge_tokens_total":
                kind = sample.labels["type"]
                totals[kind] = totals.get(kind, 0.0) + sample.value
            elif sample.name in ("ragmon_judge_cost_usd_total", "ragmon_judge_requests_total"):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    inputs = sum(totals.get(k, 0.0) for k in ("input", "cache_read", "cache_write"))
    return CostActual(
        judgements=int(totals.get("ragmon_judge_requests_total", 0.0)),
        input_tokens=int(inputs),
        output_tokens=int(totals.get("output", 0.0)),
        usd=totals.get("ragmon_judge_cost_usd_total", 0.0),
    )
