"""`monitor.llm`'s small rules, which every LLM caller (the judges, the golden-row synthesizer, the
cost estimate) builds on: prices and what a call costs, how an HTTP status or error message maps to
an outcome, Retry-After parsing, and the redaction of secrets from anything a caller logs or keeps."""

from __future__ import annotations

import math
import time

import httpx
import pytest

from monitor.llm.outcome import JudgeOutcome, outcome_for_error, outcome_for_status
from monitor.llm.redact import Redactor
from monitor.llm.retry import retry_after
from monitor.llm.usage import DEFAULT_PRICES, Price, TokenUsage, cost_usd, price_for


def test_prices() -> None:
    assert price_for("claude-haiku-4-5-20251001", DEFAULT_PRICES) is DEFAULT_PRICES["claude-haiku-4-5"]
    assert price_for("gpt-4o-mini-2024-07-18", DEFAULT_PRICES) is DEFAULT_PRICES["gpt-4o-mini"]
    assert price_for("llama-3-8b", DEFAULT_PRICES) is None
    p = Price(input=1, output=5, cache_read=0.1, cache_write=1.25)
    assert cost_usd(TokenUsage(1_000_000, 100_000, 0, 0), p) == pytest.approx(1.5)
    assert cost_usd(TokenUsage(0, 0, 1_000_000, 1_000_000), p) == pytest.approx(1.35)
    assert cost_usd(TokenUsage(10, 10), None) is None
    assert all(not math.isnan(v) for pr in DEFAULT_PRICES.values() for v in pr.model_dump().values())


def test_outcomes_for_status() -> None:
    assert outcome_for_status(429) is JudgeOutcome.RATE_LIMITED
    assert outcome_for_status(529) is JudgeOutcome.OVERLOADED
    assert outcome_for_status(502) is JudgeOutcome.SERVER_ERROR
    assert outcome_for_status(408) is JudgeOutcome.TIMEOUT
    assert outcome_for_status(401) is JudgeOutcome.CLIENT_ERROR


def test_credentials_and_billing_are_named() -> None:
    """A rejected key and an empty account are the account's trouble (an outage the judge stage
    waits out), not the record's; another 4xx stays a client error."""
    assert outcome_for_error(401, "authentication_error invalid x-api-key") is JudgeOutcome.AUTH_ERROR
    assert outcome_for_error(403, "permission_error") is JudgeOutcome.AUTH_ERROR
    assert outcome_for_error(402, "") is JudgeOutcome.BILLING_ERROR
    credit = "invalid_request_error Your credit balance is too low to access the Anthropic API."
    assert outcome_for_error(400, credit) is JudgeOutcome.BILLING_ERROR
    quota = "HTTP 429: You exceeded your current quota, please check your plan and billing details."
    assert outcome_for_error(429, quota) is JudgeOutcome.BILLING_ERROR
    assert outcome_for_error(429, "slow down") is JudgeOutcome.RATE_LIMITED
    assert outcome_for_error(400, "invalid_request_error max_tokens: too large") is JudgeOutcome.CLIENT_ERROR
    assert outcome_for_error(529, "overloaded_error") is JudgeOutcome.OVERLOADED


def test_redactor() -> None:
    r = Redactor(["s3cr3t-value", None])
    assert r("key s3cr3t-value!") == "key [REDACTED]!"
    assert "abc" not in r("Authorization: Bearer abcdefgh123")
    assert "zzz" not in r('{"x-api-key": "zzzzzzzz"}')
    assert r("sk-ant-api03-AAAABBBBCCCC") == "[REDACTED]"


def test_retry_after_parsing() -> None:
    assert retry_after(httpx.Headers({"retry-after-ms": "250"})) == 0.25
    assert retry_after(httpx.Headers({"retry-after": "3"})) == 3.0
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < (retry_after(httpx.Headers({"retry-after": future})) or 0) <= 31
    assert retry_after(httpx.Headers({"retry-after": "soon"})) is None
    assert retry_after(httpx.Headers({})) is None
