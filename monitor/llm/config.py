"""What every LLM call is configured with: model, endpoint, key, timeouts, retries, prices.

Backend settings extend it (`chat.OpenAIClientConfig`, `messages.AnthropicClientConfig`), and the
judges extend those with what only a judge has (what of a record it shows). The settings are flat,
as an operator writes them under ``judge.options`` (or ``judge_options``).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from monitor.llm.usage import DEFAULT_PRICES, Price

__all__ = ["ClientConfig"]


class ClientConfig(BaseModel):
    """Settings of an HTTP LLM caller. Timeouts and retries are per call and bounded: a slow model
    must delay results, never stall the pipeline."""

    model_config = ConfigDict(extra="forbid")

    model: str
    base_url: str | None = None
    api_key: SecretStr | None = None
    api_key_file: Path | None = None  # e.g. a mounted Kubernetes secret; read once at start
    max_concurrency: int = Field(default=4, ge=1)
    timeout_seconds: float = Field(default=30.0, gt=0)  # one HTTP request
    deadline_seconds: float = Field(default=120.0, gt=0)  # a whole judgement, retries included
    max_retries: int = Field(default=2, ge=0)
    max_tokens: int = Field(default=2048, ge=64)
    prices: dict[str, Price] = Field(default_factory=lambda: dict(DEFAULT_PRICES))

    def resolve_api_key(self, env_var: str) -> str | None:
        """Explicit key, else the key file, else the environment variable."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_file is not None:
            key = self.api_key_file.read_text(encoding="utf-8").strip()
            if not key:
                raise ValueError(f"api_key_file {self.api_key_file} is empty")
            return key
        return os.environ.get(env_var) or None
