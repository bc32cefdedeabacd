"""LLM judge on any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp, Ollama,
LiteLLM, gateways), over plain `httpx` so that no vendor SDK is needed.

Structured output through ``response_format: {"type": "json_schema", "strict": true}`` with the
shared judgement schema; the reply's ``message.content`` is that JSON. The instructions are the
system message: identical on every request, so servers that cache prompt prefixes (OpenAI does
automatically above 1024 tokens) can reuse them; ``cached_tokens`` is reported as cache reads.

The call and its retries are `monitor.llm.chat`'s (408/409/429/5xx, timeouts and connection
errors, ``Retry-After`` honoured up to `max_retry_after_seconds`). Every try counts in
`Judgement.requests`, as in the provider's rate limits: the client's request hook counts them
(`llm_judge.count_request`). Invalid output, or valid output whose claims leave part of the answer
out, gets one repair request (a user turn naming the problem).
"""

from __future__ import annotations

from typing import Any

from monitor.contracts.model import Judgement, RagRecord
from monitor.judge.llm_judge import CallState, LLMJudgeBase, LLMJudgeConfig, count_request
from monitor.judge.model import JudgeOutput
from monitor.judge.output import output_schema, parse_output
from monitor.judge.prompt import TOOL_NAME, coverage_problem, repair_message
from monitor.judge.protocol import RecordMeta
from monitor.llm.chat import (
    ChatFailed,
    OpenAIClientConfig,
    chat_client,
    chat_payload,
    chat_usage,
    post_chat,
)
from monitor.llm.outcome import JudgeOutcome
from monitor.llm.redact import Redactor
from monitor.llm.usage import json_bytes

__all__ = ["OpenAIJudge", "OpenAIJudgeConfig"]


class OpenAIJudgeConfig(OpenAIClientConfig, LLMJudgeConfig):
    """The OpenAI-compatible client's settings (`monitor.llm.chat.OpenAIClientConfig`: model,
    base URL with its ``/v1``, key optional from `api_key`, `api_key_file` or ``OPENAI_API_KEY``,
    temperature, backoff) and the judge's (`LLMJudgeConfig`). The client comes first in the bases:
    its defaults (the model) win over the judge's inherited required fields."""


class OpenAIJudge(LLMJudgeBase):
    name = "openai"
    config: OpenAIJudgeConfig

    def __init__(self, config: OpenAIJudgeConfig | None = None) -> None:
        config = config or OpenAIJudgeConfig()
        key = config.resolve_api_key("OPENAI_API_KEY")
        super().__init__(config, Redactor([key]))
        self._client = chat_client(config, key, event_hooks={"request": [count_request]})
        self._response_format = {
            "type": "json_schema",
            "json_schema": {
                "name": TOOL_NAME,
                "strict": config.strict_schema,
                "schema": output_schema(config.query_types),
            },
        }
        self._format_bytes = json_bytes(self._response_format)

    def __repr__(self) -> str:
        return f"OpenAIJudge(model={self.model!r})"

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _run(self, record: RagRecord, state: CallState, meta: RecordMeta) -> Judgement:
        cfg = self.config
        prompt = self._prompt(record)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": prompt.system},
            {"role": "user", "content": prompt.user},
        ]
        problem = ""
        pending: tuple[JudgeOutput, Any] | None = None  # valid, but its claims skip part of the answer
        for attempt in range(2):  # the judgement, then at most one repair
            try:
                body = await self._post(messages, state)
            except ChatFailed as f:
                return self._fail(f.outcome, f.detail, meta, state)
            try:
                choice = body["choices"][0]
                message = choice["message"]
                content = message.get("content")
                finish = choice.get("finish_reason")
                state.tokens.add(chat_usage(body))
            except (KeyError, IndexError, TypeError, ValueError, AttributeError):
                return self._fail(JudgeOutcome.SERVER_ERROR, "response is not a chat completion", meta, state)
            state.raw = content
            if message.get("refusal"):
                state.raw = {"refusal": str(message["refusal"])[:1000]}
                return self._fail(JudgeOutcome.INVALID_OUTPUT, "the model refused to judge", meta, state)
            if not isinstance(content, str) or not content.strip():
                problem = "the reply has no content"
            elif finish == "length":
                problem = f"the output was cut at {cfg.max_tokens} tokens; use fewer, shorter claims"
            else:
                output, problem = parse_output(content, prompt.chunk_ids, cfg.query_types)
                if output is not None:
                    state.raw = output.model_dump(mode="json")
                    problem = "" if attempt else coverage_problem(output, prompt)
                    if not problem:
                        return self._ok(output, meta, state, prompt, coverage_asked=pending is not None)
                    pending = (output, state.raw)
            if attempt == 0:
                messages = [
                    *messages,
                    {"role": "assistant", "content": content if isinstance(content, str) else ""},
                    {"role": "user", "content": repair_message(problem)},
                ]
        if pending is not None:  # the coverage repair failed: the first verdict, its gaps noted
            state.raw = pending[1]
            return self._ok(pending[0], meta, state, prompt, coverage_asked=True)
        return self._fail(JudgeOutcome.INVALID_OUTPUT, problem, meta, state)

    async def _post(self, messages: list[dict[str, Any]], state: CallState) -> dict[str, Any]:
        """One chat completion with retries; the parsed body, or `ChatFailed`."""
        payload = chat_payload(self.config, messages, self._response_format)
        return await post_chat(self._client, self.config, payload)
