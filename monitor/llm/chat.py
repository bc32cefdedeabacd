"""The OpenAI-compatible chat-completions call (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM, gateways),
over plain `httpx` so that no vendor SDK is needed.

Retries are ours: 408/409/429/5xx, timeouts and connection errors, with exponential backoff and
jitter, honouring ``Retry-After`` (seconds or HTTP date) and ``retry-after-ms``. A server that
asks for a longer wait than `max_retry_after_seconds` is not waited for: the call fails with the
status's outcome and the caller's slot is freed. A failure comes back as `ChatFailed`, already
classified (`outcome.JudgeOutcome`), its detail bounded; the caller redacts it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import httpx
from pydantic import Field

from monitor.llm.config import ClientConfig
from monitor.llm.outcome import JudgeOutcome, outcome_for_error
from monitor.llm.retry import backoff, is_retryable, retry_after
from monitor.llm.usage import TokenUsage

__all__ = [
    "DEFAULT_OPENAI_MODEL",
    "ChatFailed",
    "OpenAIClientConfig",
    "chat_client",
    "chat_payload",
    "chat_usage",
    "post_chat",
]

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"


class OpenAIClientConfig(ClientConfig):
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


def chat_client(cfg: OpenAIClientConfig, key: str | None, **kwargs: Any) -> httpx.AsyncClient:
    """An httpx client for the configured OpenAI-compatible server (key as a bearer token)."""
    return httpx.AsyncClient(
        base_url=(cfg.base_url or "https://api.openai.com/v1").rstrip("/") + "/",
        headers={"Authorization": f"Bearer {key}"} if key else {},
        timeout=httpx.Timeout(cfg.timeout_seconds),
        **kwargs,
    )


def chat_payload(
    cfg: OpenAIClientConfig, messages: list[dict[str, Any]], response_format: Any
) -> dict[str, Any]:
    """A chat-completions request body: the messages, the response format, the configured model,
    output limit (under the configured field name) and temperature (left out when None)."""
    payload: dict[str, Any] = {
        "model": cfg.model,
        "messages": messages,
        "response_format": response_format,
        cfg.max_tokens_field: cfg.max_tokens,
    }
    if cfg.temperature is not None:
        payload["temperature"] = cfg.temperature
    return payload


async def post_chat(
    client: httpx.AsyncClient, cfg: OpenAIClientConfig, payload: dict[str, Any]
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
        if not is_retryable(status):
            raise ChatFailed(outcome_for_error(status, detail), detail)
        wait = retry_after(resp.headers)
        if last or (wait is not None and wait > cfg.max_retry_after_seconds):
            if not last:
                detail += f" (asked to retry after {wait:g}s > {cfg.max_retry_after_seconds:g}s)"
            raise ChatFailed(outcome_for_error(status, detail), detail)
        await asyncio.sleep(wait if wait is not None else _backoff(cfg, retry))
    raise AssertionError("unreachable")  # the loop always returns or raises on its last pass


def _backoff(cfg: OpenAIClientConfig, retry: int) -> float:
    return backoff(cfg.initial_backoff_seconds, cfg.max_backoff_seconds, retry)


def chat_usage(body: dict[str, Any]) -> TokenUsage:
    """A chat completion's `usage`, cached prompt tokens apart (raises on a malformed one)."""
    usage = body.get("usage") or {}
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return TokenUsage(
        input=max(0, int(usage.get("prompt_tokens") or 0) - cached),
        output=int(usage.get("completion_tokens") or 0),
        cache_read=cached,
    )


def _error_message(resp: httpx.Response) -> str:
    """`: <error.message>` from an OpenAI-style error body, bounded; '' when there is none."""
    try:
        err = resp.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        return ""
    return f": {str(msg)[:200]}" if msg else ""
