"""LLM judge on any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp, Ollama,
LiteLLM, gateways), over plain `httpx` so that no vendor SDK is needed.

Structured output through ``response_format: {"type": "json_schema", "strict": true}`` with the
shared judgement schema; the reply's ``message.content`` is that JSON. The instructions are the
system message: identical on every request, so servers that cache prompt prefixes (OpenAI does
automatically above 1024 tokens) can reuse them; ``cached_tokens`` is reported as cache reads.

Retries are ours (the SDK-less path): 408/409/429/5xx, timeouts and connection errors, with
exponential backoff and jitter, honouring ``Retry-After`` (seconds or HTTP date) and
``retry-after-ms``. A server that asks for a longer wait than `max_retry_after_seconds` is not
waited for: the judgement fails with the status's outcome and the slot is freed. Every try counts
in `Judgement.requests`, as in the provider's rate limits: the client's request hook counts them
(`base.count_request`). Invalid output, or valid output whose claims leave part of the answer out,
gets one repair request (a user turn naming the problem).
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from typing import Any, Literal

import httpx
from pydantic import Field

from monitor.judge.base import (
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
)
from monitor.judge.model import JudgeOutcome, JudgeOutput, TokenUsage
from monitor.model import Judgement, RagRecord

__all__ = [
    "DEFAULT_OPENAI_MODEL",
    "ChatFailed",
    "OpenAIJudge",
    "OpenAIJudgeConfig",
    "chat_client",
    "chat_usage",
    "post_chat",
]

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
_RETRYABLE = frozenset((408, 409, 429))


class OpenAIJudgeConfig(LLMJudgeConfig):
    """`base_url` includes the version prefix (``.../v1``). Key optional (local servers need none):
    `api_key`, else `api_key_file`, else ``OPENAI_API_KEY``."""

    model: str = DEFAULT_OPENAI_MODEL
    base_url: str | None = "https://api.openai.com/v1"
    temperature: float | None = 0.0
    # OpenAI's newer models want max_completion_tokens; many compatible servers only know max_tokens.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    strict_schema: bool = True
    initial_backoff_seconds: float = Field(default=0.5, ge=0)
    max_backoff_seconds: float = Field(default=8.0, ge=0)
    max_retry_after_seconds: float = Field(default=60.0, ge=0)


class ChatFailed(Exception):
    """One chat completion's final failure, retries spent, already classified."""

    def __init__(self, outcome: JudgeOutcome, detail: str) -> None:
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail


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
                    problem = "" if attempt else self._coverage_problem(output, prompt)
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
        cfg = self.config
        payload: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "response_format": self._response_format,
            cfg.max_tokens_field: cfg.max_tokens,
        }
        if cfg.temperature is not None:
            payload["temperature"] = cfg.temperature
        return await post_chat(self._client, cfg, payload)


def chat_client(cfg: OpenAIJudgeConfig, key: str | None, **kwargs: Any) -> httpx.AsyncClient:
    """An httpx client for the configured OpenAI-compatible server (key as a bearer token)."""
    return httpx.AsyncClient(
        base_url=(cfg.base_url or "https://api.openai.com/v1").rstrip("/") + "/",
        headers={"Authorization": f"Bearer {key}"} if key else {},
        timeout=httpx.Timeout(cfg.timeout_seconds),
        **kwargs,
    )


async def post_chat(
    client: httpx.AsyncClient, cfg: OpenAIJudgeConfig, payload: dict[str, Any]
) -> dict[str, Any]:
    """POST chat/completions with the config's retries (backoff with jitter, `Retry-After`
    honoured up to `max_retry_after_seconds`); the parsed body, or `ChatFailed`."""
    for retry in range(cfg.max_retries + 1):
        last = retry == cfg.max_retries
        try:
            resp = await client.post("chat/completions", json=payload)
        except httpx.TimeoutException as exc:
            if last:
                raise ChatFailed(
                    JudgeOutcome.TIMEOUT,
                    f"request timed out after {cfg.timeout_seconds:g}s ({cfg.max_retries} retries)",
                ) from exc
            await asyncio.sleep(_backoff(cfg, retry))
            continue
        except httpx.TransportError as exc:
            if last:
                raise ChatFailed(JudgeOutcome.CONNECTION_ERROR, type(exc).__name__) from exc
            await asyncio.sleep(_backoff(cfg, retry))
            continue
        status = resp.status_code
        if status < 300:
            try:
                body = resp.json()
            except ValueError as exc:
                raise ChatFailed(JudgeOutcome.SERVER_ERROR, f"HTTP {status} with a non-JSON body") from exc
            if not isinstance(body, dict):
                raise ChatFailed(JudgeOutcome.SERVER_ERROR, f"HTTP {status} with a non-object body")
            return body
        detail = f"HTTP {status}{_error_message(resp)}"
        if status not in _RETRYABLE and status < 500:
            raise ChatFailed(outcome_for_error(status, detail), detail)
        wait = _retry_after(resp.headers)
        if last or (wait is not None and wait > cfg.max_retry_after_seconds):
            if not last:
                detail += f" (asked to retry after {wait:g}s > {cfg.max_retry_after_seconds:g}s)"
            raise ChatFailed(outcome_for_error(status, detail), detail)
        await asyncio.sleep(wait if wait is not None else _backoff(cfg, retry))
    raise AssertionError("unreachable")  # the loop always returns or raises on its last pass


def _backoff(cfg: OpenAIJudgeConfig, retry: int) -> float:
    base = min(cfg.initial_backoff_seconds * 2.0**retry, cfg.max_backoff_seconds)
    return base * (1 - 0.25 * random.random())


def chat_usage(body: dict[str, Any]) -> TokenUsage:
    """A chat completion's `usage`, cached prompt tokens apart (raises on a malformed one)."""
    usage = body.get("usage") or {}
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return TokenUsage(
        input=max(0, int(usage.get("prompt_tokens") or 0) - cached),
        output=int(usage.get("completion_tokens") or 0),
        cache_read=cached,
    )


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, else ``Retry-After`` (seconds or an
    HTTP date). None when absent or unparseable; never negative."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(0.0, float(email.utils.mktime_tz(parsed)) - time.time())


def _error_message(resp: httpx.Response) -> str:
    """`: <error.message>` from an OpenAI-style error body, bounded; '' when there is none."""
    try:
        err = resp.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        return ""
    return f": {str(msg)[:200]}" if msg else ""
