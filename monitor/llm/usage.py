"""Tokens billed, prices, USD — and the upper bound of what a request can cost before it is sent.

The bound (`input_bound`, `usd_bound`): Claude's and OpenAI's tokenizers are byte-level BPE —
every token stands for at least one byte of the UTF-8 text — so a text never costs more tokens
than its UTF-8 bytes, whatever the script (a CJK character is 3 bytes, an emoji 4 or more, and at
worst as many tokens: any characters-per-token guess undercounts some text). To what is sent the
API adds its own wrapping (`REQUEST_OVERHEAD_TOKENS`, `MESSAGE_OVERHEAD_TOKENS`). USD prices input
at the dearer of plain input and cache write, so the bound holds whatever the prompt cache does.
The judge budget's reservation and the golden cost estimates are both built from these.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from anthropic.types import Usage as AnthropicUsage

__all__ = [
    "DEFAULT_PRICES",
    "MAX_UTF8_BYTES",
    "MESSAGE_OVERHEAD_TOKENS",
    "REQUEST_OVERHEAD_TOKENS",
    "Price",
    "TokenUsage",
    "cost_usd",
    "input_bound",
    "json_bytes",
    "price_for",
    "usd_bound",
]


@dataclass(slots=True)
class TokenUsage:
    """Tokens billed for one judgement (or generation), over all its API calls.

    `input` excludes cached tokens in every backend (Anthropic reports it that way; the OpenAI
    path subtracts `cached_tokens`), so the four add up to what was sent and received.
    """

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @classmethod
    def of_anthropic(cls, usage: AnthropicUsage) -> TokenUsage:
        """A Messages API response's `usage` (cache counts may be null)."""
        return cls(
            input=usage.input_tokens,
            output=usage.output_tokens,
            cache_read=usage.cache_read_input_tokens or 0,
            cache_write=usage.cache_creation_input_tokens or 0,
        )

    def add(self, other: TokenUsage) -> None:
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write

    def as_dict(self) -> dict[str, int]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
        }


class Price(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(default=0.0, ge=0)
    cache_write: float = Field(default=0.0, ge=0)


# List prices (USD / MTok) as published by the vendors in late 2025; cache_write is Anthropic's
# 5-minute cache write. Override per deployment: prices change, and gateways bill differently.
DEFAULT_PRICES: Mapping[str, Price] = {
    "claude-haiku-4-5": Price(input=1.0, output=5.0, cache_read=0.10, cache_write=1.25),
    "claude-sonnet-4-5": Price(input=3.0, output=15.0, cache_read=0.30, cache_write=3.75),
    "claude-sonnet-4": Price(input=3.0, output=15.0, cache_read=0.30, cache_write=3.75),
    "claude-opus-4-5": Price(input=5.0, output=25.0, cache_read=0.50, cache_write=6.25),
    "claude-opus-4-1": Price(input=15.0, output=75.0, cache_read=1.50, cache_write=18.75),
    "claude-3-5-haiku": Price(input=0.80, output=4.0, cache_read=0.08, cache_write=1.0),
    "gpt-4o-mini": Price(input=0.15, output=0.60, cache_read=0.075),
    "gpt-4o": Price(input=2.50, output=10.0, cache_read=1.25),
    "gpt-4.1-nano": Price(input=0.10, output=0.40, cache_read=0.025),
    "gpt-4.1-mini": Price(input=0.40, output=1.60, cache_read=0.10),
    "gpt-4.1": Price(input=2.0, output=8.0, cache_read=0.50),
}


def price_for(model: str, table: Mapping[str, Price]) -> Price | None:
    """Exact match, else the longest table key that prefixes `model` (dated ids such as
    ``claude-haiku-4-5-20251001`` use their family's price). None: unknown model."""
    if model in table:
        return table[model]
    best = max((k for k in table if model.startswith(k)), key=len, default=None)
    return table[best] if best is not None else None


def cost_usd(tokens: TokenUsage, price: Price | None) -> float | None:
    if price is None:
        return None
    return (
        tokens.input * price.input
        + tokens.output * price.output
        + tokens.cache_read * price.cache_read
        + tokens.cache_write * price.cache_write
    ) / 1e6


# -- upper bounds, before anything is sent ----------------------------------------------------------

# Tokens an API adds to a request beyond the text it was sent: Anthropic's hidden tool-use system
# prompt (at most 530 tokens in its published table), the rendering of a tool or response schema,
# special tokens around the turns. Per message: role and block markers, ids such as a tool_use id.
REQUEST_OVERHEAD_TOKENS = 1024
MESSAGE_OVERHEAD_TOKENS = 64
# UTF-8 encodes a character in at most 4 bytes.
MAX_UTF8_BYTES = 4


def json_bytes(value: Any) -> int:
    """UTF-8 bytes of `value` as JSON: the weight of a definition sent with every request."""
    return len(json.dumps(value, ensure_ascii=False).encode())


def input_bound(sent_bytes: int) -> int:
    """The most input tokens a request of two messages (system and user turn; a tool or response
    format counted in `sent_bytes`) can be billed, from the UTF-8 bytes it sends."""
    return sent_bytes + REQUEST_OVERHEAD_TOKENS + 2 * MESSAGE_OVERHEAD_TOKENS


def usd_bound(tokens_in: int, tokens_out: int, price: Price) -> float:
    """The most `tokens_in` input and `tokens_out` output tokens can cost at `price`: input at the
    dearer of plain input and cache write, whatever the prompt cache does."""
    return (tokens_in * max(price.input, price.cache_write) + tokens_out * price.output) / 1e6
