"""What the HTTP judges share beyond the prompt: their configuration, and the base class that
bounds every judgement (concurrency, deadline) and accounts for it (requests, tokens, cost, latency)
whatever the API.

The calls themselves, retries, prices and redaction are `monitor.llm`'s: a judge adds the prompt
(`monitor.judge.prompt`), the output check (`monitor.judge.output`) and the repair conversation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator

from monitor.contracts.model import NOTE_NOT_JUDGED, Claim, Judgement, RagRecord, Verdict
from monitor.judge.budget import Cost
from monitor.judge.evidence import coverage
from monitor.judge.model import JudgeOutput, judgement_from_output
from monitor.judge.prompt import MAX_CHUNK_CHARS, MAX_CHUNKS, MAX_REPAIR_BYTES, Prompt, build_prompt
from monitor.judge.protocol import RecordMeta
from monitor.llm.config import ClientConfig
from monitor.llm.outcome import JudgeOutcome
from monitor.llm.redact import Redactor
from monitor.llm.usage import MESSAGE_OVERHEAD_TOKENS, TokenUsage, cost_usd, input_bound, price_for, usd_bound

log = logging.getLogger(__name__)

__all__ = ["CallState", "LLMJudgeBase", "LLMJudgeConfig", "count_request"]


class LLMJudgeConfig(ClientConfig):
    """Settings of an HTTP judge: the client's (`monitor.llm.config.ClientConfig`), plus how much
    of a record the judge is shown and whether it labels the query."""

    max_chunks: int = Field(default=MAX_CHUNKS, ge=1)
    max_chunk_chars: int = Field(default=MAX_CHUNK_CHARS, ge=100)
    # Also ask the judge which of these types the query is (`Judgement.judged_query_type`), for
    # records whose type the span does not carry; None: not asked, prompt and schema unchanged.
    query_types: list[str] | None = Field(default=None, min_length=1)

    @field_validator("query_types")
    @classmethod
    def _distinct_types(cls, v: list[str] | None) -> list[str] | None:
        """Blank names cannot be labels; duplicates would be a malformed enum to strict modes."""
        if v is None:
            return None
        if any(not t.strip() for t in v):
            raise ValueError("query_types must be non-blank names")
        return list(dict.fromkeys(v))


# -- request counting -------------------------------------------------------------------------------


@dataclass(slots=True)
class CallState:
    """What one judgement has spent so far; kept even when it fails or hits its deadline."""

    tokens: TokenUsage
    requests: int = 0  # HTTP requests sent, counted by `count_request`
    raw: Any = None


# The judgement in progress in this task, for `count_request`.
_CALL: ContextVar[CallState | None] = ContextVar("ragmon_judge_call", default=None)


async def count_request(_request: object) -> None:
    """An HTTP client's request hook (``event_hooks={"request": [count_request]}``): one more
    request for the judgement in progress.

    The client runs it for every request it sends — each retry of the SDK's or ours, a repair, a
    redirect — in the task that awaits the send, which is the one `LLMJudgeBase.judge` runs in; so
    the context variable it set names the right judgement however many share the client.
    """
    state = _CALL.get()
    if state is not None:
        state.requests += 1


class LLMJudgeBase:
    """Concurrency bound, deadline, latency, cost and safe failure for the HTTP judges.

    Subclasses implement `_run`: the API calls (at most two: the judgement and one repair).
    """

    name = "llm"
    # UTF-8 bytes of the output definition every request carries (a tool, a response format):
    # set by each backend, for `cost_bound`.
    _format_bytes = 0

    def __init__(self, config: LLMJudgeConfig, redactor: Redactor) -> None:
        self.config = config
        self._redact = redactor
        self._sem = asyncio.Semaphore(config.max_concurrency)
        self._price = price_for(config.model, config.prices)
        if self._price is None:
            log.warning("no price for judge model %r: cost_usd will be null", config.model)

    @property
    def model(self) -> str:
        return self.config.model

    async def judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        meta = RecordMeta(
            record.trace_id, record.query_type, record.service, self.name, self.model, sampling_weight
        )
        async with self._sem:  # latency below excludes the wait for a slot: that is queueing
            state = CallState(TokenUsage())
            counting = _CALL.set(state)
            t0 = time.perf_counter()
            try:
                async with asyncio.timeout(self.config.deadline_seconds):
                    result = await self._run(record, state, meta)
            except TimeoutError:
                result = self._fail(
                    JudgeOutcome.TIMEOUT,
                    f"no verdict within the {self.config.deadline_seconds:g}s deadline",
                    meta,
                    state,
                )
            except Exception as exc:  # a judge bug must cost one judgement, not the pipeline
                log.error("judge %s crashed on trace %s: %s", self.name, record.trace_id, type(exc).__name__)
                result = self._fail(JudgeOutcome.INTERNAL_ERROR, type(exc).__name__, meta, state)
            finally:
                _CALL.reset(counting)
            result.latency_s = time.perf_counter() - t0
        result.tokens = state.tokens
        result.requests = state.requests
        result.cost_usd = cost_usd(state.tokens, self._price)
        if not result.ok:
            log.warning("judge %s failed on trace %s: %s", self.name, record.trace_id, result.error)
        return result

    async def _run(self, record: RagRecord, state: CallState, meta: RecordMeta) -> Judgement:
        raise NotImplementedError

    def cost_bound(self, record: RagRecord) -> Cost:
        """An upper bound of what judging `record` can cost, for the budget to reserve.

        Tokens, by `monitor.llm.usage`'s rule (a text costs at most its UTF-8 bytes, plus what
        the API wraps around a request): what is sent is counted (`sent_bytes`: the user turn as
        `build_prompt` makes it, escaped and clipped, the system prompt, the output definition).
        A repair request sends all of that again with the rejected output (at most max_tokens as
        the model wrote it, counted twice: the API re-renders it as input, with its own whitespace
        and escapes) and the repair text (at most `MAX_REPAIR_BYTES`). Each request answers with
        at most max_tokens. Each of the two requests may be tried 1 + max_retries times, and a
        failed try may still be billed (a timeout after the model ran), so every try counts, in
        calls too.

        USD prices input at the dearer of plain input and cache write, so the bound holds
        whatever the prompt cache does; with no price the USD bound is 0 (see `try_acquire`).
        """
        c = self.config
        first = input_bound(self.sent_bytes(record))
        repair = first + MAX_REPAIR_BYTES + 2 * c.max_tokens + 2 * MESSAGE_OVERHEAD_TOKENS
        tries = 1 + c.max_retries
        tokens_in = tries * (first + repair)
        tokens_out = tries * 2 * c.max_tokens
        price = self._price
        usd = 0.0
        if price is not None:
            usd = usd_bound(tokens_in, tokens_out, price)
        return Cost(calls=2 * tries, tokens=tokens_in + tokens_out, usd=usd)

    def sent_bytes(self, record: RagRecord) -> int:
        """UTF-8 bytes the judgement's first request sends for `record`: system prompt, user turn
        (as `build_prompt` makes it: escaped and clipped) and the output definition."""
        prompt = self._prompt(record)
        return len(prompt.system.encode()) + len(prompt.user.encode()) + self._format_bytes

    def _prompt(self, record: RagRecord) -> Prompt:
        c = self.config
        return build_prompt(
            record, max_chunks=c.max_chunks, max_chunk_chars=c.max_chunk_chars, query_types=c.query_types
        )

    def _fail(self, outcome: JudgeOutcome, detail: str, meta: RecordMeta, state: CallState) -> Judgement:
        """A failed judgement whose error text is redacted and bounded."""
        error = self._redact(f"{outcome.value}: {detail}")[:500]
        return Judgement.failed(outcome, error, raw=state.raw, **meta.kwargs())

    def _ok(
        self, output: JudgeOutput, meta: RecordMeta, state: CallState, prompt: Prompt, *, coverage_asked: bool
    ) -> Judgement:
        """The judgement of a valid output: evidence checked, coverage noted. Answer sentences the
        claims still leave out become claims `not_judged` (not in context): a verdict that skips
        the hard claim must not score as if it had none."""
        cov = coverage(prompt.answer, [c.text for c in output.claims])
        extra = [Claim(s, Verdict.NOT_IN_CONTEXT, note=NOTE_NOT_JUDGED) for s in cov.gaps]
        repair = "unrepaired" if extra else "repaired" if coverage_asked else None
        return judgement_from_output(
            prompt.to_real_ids(output),
            chunks=prompt.chunks,
            chunk_ids=list(prompt.real_ids.values()),
            raw=state.raw,
            extra_claims=extra,
            claim_coverage=cov.share,
            coverage_repair=repair,
            **meta.kwargs(),
        )
