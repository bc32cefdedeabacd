"""The Anthropic Messages API through the official SDK: the client every caller builds, and what
an SDK error means (`error_outcome`).

Retries of 408/409/429/5xx and timeouts are the SDK's (``max_retries``; it honours
``retry-after`` and ``retry-after-ms``); the caller's deadline bounds the total, those waits
included.
"""

from __future__ import annotations

from typing import Any, Self

import anthropic
from pydantic import Field, model_validator

from monitor.llm.batches import BATCH_DEADLINE_SECONDS, BatchOptions
from monitor.llm.config import ClientConfig
from monitor.llm.outcome import JudgeOutcome, outcome_for_error

__all__ = ["DEFAULT_ANTHROPIC_MODEL", "AnthropicClientConfig", "error_outcome", "messages_client"]

DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5"


class AnthropicClientConfig(ClientConfig):
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


def messages_client(config: ClientConfig, **kwargs: Any) -> tuple[str, anthropic.AsyncAnthropic]:
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


def error_outcome(exc: anthropic.AnthropicError, config: ClientConfig) -> tuple[JudgeOutcome, str]:
    """The outcome and detail of an SDK error, the SDK's retries spent. The detail carries the
    API's own message at most, never the exception's text (credentials, response validation);
    the caller redacts it still."""
    if isinstance(exc, anthropic.APITimeoutError):
        return (
            JudgeOutcome.TIMEOUT,
            f"request timed out after {config.timeout_seconds:g}s ({config.max_retries} retries)",
        )
    if isinstance(exc, anthropic.APIStatusError):
        outcome = outcome_for_error(exc.status_code, f"{exc.type} {exc.api_message}")
        detail = f"HTTP {exc.status_code}"
        if exc.type:
            detail += f" {exc.type}"
        if exc.api_message:
            detail += f": {exc.api_message[:200]}"
        return outcome, detail
    if isinstance(exc, anthropic.APIConnectionError):
        return JudgeOutcome.CONNECTION_ERROR, type(exc).__name__
    return JudgeOutcome.CLIENT_ERROR, type(exc).__name__
