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
client counts every one in `Judgement.requests` (`llm_judge.count_request`). A tool input that fails
validation gets one repair request (the model's own tool call answered with an ``is_error`` tool
result naming the problem) before the judgement is ``invalid_output``; so does a valid one whose
claims leave part of the answer out (`prompt.coverage_problem`; one repair in all). The client, its
error outcomes and the Message Batches client are `monitor.llm`'s.
"""

from __future__ import annotations

from typing import Any

import anthropic
from anthropic.types import Message, MessageParam, ToolParam, ToolUseBlock
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

from monitor.contracts.model import Judgement, RagRecord
from monitor.judge.llm_judge import CallState, LLMJudgeBase, LLMJudgeConfig, count_request
from monitor.judge.model import JudgeOutput
from monitor.judge.output import output_schema, parse_output
from monitor.judge.prompt import TOOL_DESCRIPTION, TOOL_NAME, coverage_problem, repair_message, system_prompt
from monitor.judge.protocol import RecordMeta
from monitor.llm.batches import (
    RETRYABLE,
    Batcher,
    BatchStats,
    MissingResult,
    batch_price,
    error_detail,
)
from monitor.llm.messages import AnthropicClientConfig, error_outcome, messages_client
from monitor.llm.outcome import JudgeOutcome
from monitor.llm.redact import Redactor
from monitor.llm.usage import TokenUsage, json_bytes

__all__ = ["AnthropicJudge", "AnthropicJudgeConfig"]


class AnthropicJudgeConfig(AnthropicClientConfig, LLMJudgeConfig):
    """The Anthropic client's settings (`monitor.llm.messages.AnthropicClientConfig`: model, base
    URL, key from `api_key`, `api_key_file` or ``ANTHROPIC_API_KEY``, Message Batches) and the
    judge's (`LLMJudgeConfig`). The client comes first in the bases: its defaults (the model) win
    over the judge's inherited required fields."""


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
                        problem = "" if attempt else coverage_problem(output, prompt)
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
        outcome, detail = error_outcome(exc, self.config)
        return self._fail(outcome, detail, meta, state)

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
