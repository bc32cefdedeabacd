"""LLM judge on the Anthropic Messages API, through the official `anthropic` SDK.

Structured output by a *forced tool*: the request offers one tool whose input schema is the
judgement schema and sets ``tool_choice`` to it, so the reply is a ``tool_use`` block with JSON
input rather than prose to parse. The judge instructions are a system block marked
``cache_control: ephemeral``: they (and the tool definition before them) are the same on every
request, so the API can bill them as cache reads. Note that the API caches nothing below a model's
minimum cacheable prompt length (several thousand tokens for Haiku models); with this short prompt
expect ``cache_read`` to stay 0 unless the instructions grow — the marker then costs nothing.

Retries of 408/409/429/5xx and timeouts are the SDK's (``max_retries``; it honours ``retry-after``
and ``retry-after-ms``); a per-judgement deadline bounds the total, including those waits. Each try
is an API request the provider counts against its rate limits, so a request hook on the SDK's HTTP
client counts every one in `Judgement.requests` (`base.count_request`). A tool input that fails
validation gets one repair request (the model's own tool call answered with an ``is_error`` tool
result naming the problem) before the judgement is ``invalid_output``; so does a valid one whose
claims leave part of the answer out (`base.LLMJudgeBase._coverage_problem`; one repair in all).
"""

from __future__ import annotations

from typing import Any, Self

import anthropic
from anthropic.types import Message, MessageParam, ToolParam, ToolUseBlock
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from pydantic import Field, model_validator

from monitor.judge.base import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    CallState,
    LLMJudgeBase,
    LLMJudgeConfig,
    RecordMeta,
    Redactor,
    count_request,
    json_bytes,
    outcome_for_error,
    output_schema,
    parse_output,
    repair_message,
    system_prompt,
)
from monitor.judge.batches import (
    BATCH_DEADLINE_SECONDS,
    RETRYABLE,
    Batcher,
    BatchOptions,
    BatchStats,
    MissingResult,
    batch_price,
    error_detail,
)
from monitor.judge.model import JudgeOutcome, JudgeOutput, TokenUsage
from monitor.model import Judgement, RagRecord

__all__ = ["DEFAULT_ANTHROPIC_MODEL", "AnthropicJudge", "AnthropicJudgeConfig"]

DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5"


class AnthropicJudgeConfig(LLMJudgeConfig):
    """`base_url` None: the SDK's choice (``ANTHROPIC_BASE_URL``, else the public API).
    Key: `api_key`, else `api_key_file`, else ``ANTHROPIC_API_KEY``."""

    model: str = DEFAULT_ANTHROPIC_MODEL
    batch: BatchOptions = Field(default_factory=BatchOptions)

    @model_validator(mode="after")
    def _batch_defaults(self) -> Self:
        """Batch mode's own defaults for what was not set: a deadline the API's 24 hours fit in,
        and room in flight for a full batch."""
        if self.batch.enabled:
            if "deadline_seconds" not in self.model_fields_set:
                self.deadline_seconds = BATCH_DEADLINE_SECONDS
            if "max_concurrency" not in self.model_fields_set:
                self.max_concurrency = self.batch.max_requests
        return self


def messages_client(config: LLMJudgeConfig, **kwargs: Any) -> tuple[str, anthropic.AsyncAnthropic]:
    """The configured key (ValueError without one) and an SDK client using it."""
    key = config.resolve_api_key("ANTHROPIC_API_KEY")
    if key is None:
        raise ValueError("no Anthropic API key: set ANTHROPIC_API_KEY, or api_key / api_key_file")
    # An explicit key: the SDK then consults no other credential source (profiles, federation).
    client = anthropic.AsyncAnthropic(
        api_key=key,
        base_url=config.base_url,
        timeout=config.timeout_seconds,
        max_retries=config.max_retries,
        # No SDK spans of our own calls: a monitor whose process exports traces to the topic it
        # reads would otherwise ingest its judge (or generator) as gen_ai traffic.
        open_telemetry=False,
        **kwargs,
    )
    return key, client


class AnthropicJudge(LLMJudgeBase):
    name = "anthropic"

    def __init__(self, config: AnthropicJudgeConfig | None = None) -> None:
        config = config or AnthropicJudgeConfig()
        key, self._client = messages_client(
            config,
            # The SDK's defaults, plus the hook that counts every request it sends, retries included.
            http_client=anthropic.DefaultAsyncHttpxClient(event_hooks={"request": [count_request]}),
        )
        super().__init__(config, Redactor([key]))
        self._tool: ToolParam = {
            "name": TOOL_NAME,
            "description": TOOL_DESCRIPTION,
            "input_schema": output_schema(config.query_types),
        }
        system = system_prompt(config.query_types)
        self._system: list[Any] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        self._format_bytes = json_bytes(self._tool)
        self._batcher: Batcher | None = None
        if config.batch.enabled:
            self._batcher = Batcher(self._client.messages.batches, config.batch)
            self._price = batch_price(self._price)  # what `cost_usd` and `cost_bound` use

    @property
    def preferred_concurrency(self) -> int | None:
        """Judgements worth keeping in flight (batch mode: enough to fill batches), or None."""
        return self.config.max_concurrency if self._batcher is not None else None

    @property
    def batch_stats(self) -> BatchStats | None:
        return None if self._batcher is None else self._batcher.stats

    def __repr__(self) -> str:
        return f"AnthropicJudge(model={self.model!r})"

    async def aclose(self) -> None:
        if self._batcher is not None:
            await self._batcher.aclose()
        await self._client.close()

    async def _run(self, record: RagRecord, state: CallState, meta: RecordMeta) -> Judgement:
        cfg = self.config
        prompt = self._prompt(record)
        messages: list[MessageParam] = [{"role": "user", "content": prompt.user}]
        problem = ""
        pending: tuple[JudgeOutput, Any] | None = None  # valid, but its claims skip part of the answer
        for attempt in range(2):  # the judgement, then at most one repair
            params: MessageCreateParamsNonStreaming = {
                "model": cfg.model,
                "max_tokens": cfg.max_tokens,
                "system": self._system,
                "messages": messages,
                "tools": [self._tool],
                "tool_choice": {"type": "tool", "name": TOOL_NAME},
            }
            if self._batcher is None:
                sent = await self._send(params, meta, state)
            else:
                sent = await self._send_batched(params, meta, state)
            if isinstance(sent, Judgement):
                return sent
            msg = sent
            state.tokens.add(TokenUsage.of_anthropic(msg.usage))
            tool = next((b for b in msg.content if isinstance(b, ToolUseBlock) and b.name == TOOL_NAME), None)
            if tool is None:
                state.raw = [b.model_dump(mode="json") for b in msg.content]
                problem = f"no call of the tool {TOOL_NAME} (stop_reason {msg.stop_reason})"
            else:
                state.raw = tool.input
                if msg.stop_reason == "max_tokens":
                    problem = f"the output was cut at max_tokens={cfg.max_tokens}; use fewer, shorter claims"
                else:
                    output, problem = parse_output(tool.input, prompt.chunk_ids, cfg.query_types)
                    if output is not None:
                        problem = "" if attempt else self._coverage_problem(output, prompt)
                        if not problem:
                            return self._ok(output, meta, state, prompt, coverage_asked=pending is not None)
                        pending = (output, state.raw)
            if attempt == 0:
                messages = self._repair(prompt.user, tool, problem)
        if pending is not None:  # the coverage repair failed: the first verdict, its gaps noted
            state.raw = pending[1]
            return self._ok(pending[0], meta, state, prompt, coverage_asked=True)
        return self._fail(JudgeOutcome.INVALID_OUTPUT, problem, meta, state)

    async def _send(
        self, params: MessageCreateParamsNonStreaming, meta: RecordMeta, state: CallState
    ) -> Message | Judgement:
        """One Messages API call (the SDK retrying): the message, or the failed judgement."""
        try:
            return await self._client.messages.create(**params)
        except anthropic.AnthropicError as exc:
            return self._failure(exc, meta, state)

    async def _send_batched(
        self, params: MessageCreateParamsNonStreaming, meta: RecordMeta, state: CallState
    ) -> Message | Judgement:
        """The same request as an entry of a Message Batch: the message, or the failed judgement.
        Each entry submitted counts as one request; an entry that errored with an outage-type
        error goes into a later batch, up to `max_retries` times."""
        assert self._batcher is not None
        for retry in range(self.config.max_retries + 1):
            state.requests += 1
            try:
                result = await self._batcher.send(params)
            except MissingResult as exc:
                return self._fail(JudgeOutcome.SERVER_ERROR, str(exc), meta, state)
            except anthropic.AnthropicError as exc:
                return self._failure(exc, meta, state)
            if result.type == "succeeded":
                return result.message
            if result.type == "expired":
                return self._fail(
                    JudgeOutcome.TIMEOUT, "batch request expired before it was processed", meta, state
                )
            if result.type == "canceled":
                return self._fail(JudgeOutcome.CONNECTION_ERROR, "batch request canceled", meta, state)
            outcome, detail = error_detail(result.error)
            if outcome not in RETRYABLE or retry == self.config.max_retries:
                return self._fail(outcome, detail, meta, state)
        raise AssertionError("unreachable")

    def _failure(self, exc: anthropic.AnthropicError, meta: RecordMeta, state: CallState) -> Judgement:
        """The failed judgement of an SDK error (never its text beyond the API's own message)."""
        cfg = self.config
        if isinstance(exc, anthropic.APITimeoutError):
            return self._fail(
                JudgeOutcome.TIMEOUT,
                f"request timed out after {cfg.timeout_seconds:g}s ({cfg.max_retries} retries)",
                meta,
                state,
            )
        if isinstance(exc, anthropic.APIStatusError):
            outcome = outcome_for_error(exc.status_code, f"{exc.type} {exc.api_message}")
            detail = f"HTTP {exc.status_code}"
            if exc.type:
                detail += f" {exc.type}"
            if exc.api_message:
                detail += f": {exc.api_message[:200]}"
            return self._fail(outcome, detail, meta, state)
        if isinstance(exc, anthropic.APIConnectionError):
            return self._fail(JudgeOutcome.CONNECTION_ERROR, type(exc).__name__, meta, state)
        # credentials, response validation: never the text
        return self._fail(JudgeOutcome.CLIENT_ERROR, type(exc).__name__, meta, state)

    @staticmethod
    def _repair(user: str, tool: ToolUseBlock | None, problem: str) -> list[MessageParam]:
        """The repair conversation: the model's own tool call, answered by an error result."""
        if tool is None:
            return [{"role": "user", "content": f"{user}\n\n{repair_message(problem)}"}]
        return [
            {"role": "user", "content": user},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": tool.id, "name": tool.name, "input": tool.input}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tool.id,
                        "is_error": True,
                        "content": repair_message(problem),
                    }
                ],
            },
        ]
