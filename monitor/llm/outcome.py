"""How an LLM call ended: one closed set, from an HTTP status or an API error's words.

The values are the `outcome` label of ``ragmon_judge_requests_total`` (a metric label: the set is
closed) and what the judge stage's breaker and retry read, so every caller classifies the same
failure the same way.
"""

from __future__ import annotations

import re
from enum import StrEnum

__all__ = ["JudgeOutcome", "outcome_for_error", "outcome_for_status"]


class JudgeOutcome(StrEnum):
    """How a judgement ended: the `outcome` label of ragmon_judge_requests_total (closed set)."""

    OK = "ok"
    RATE_LIMITED = "rate_limited"  # HTTP 429 after the client's retries
    OVERLOADED = "overloaded"  # HTTP 529 (Anthropic's "overloaded_error")
    SERVER_ERROR = "server_error"  # other 5xx
    TIMEOUT = "timeout"  # request timeout or the per-judgement deadline
    INVALID_OUTPUT = "invalid_output"  # schema-invalid / truncated output, also after one repair
    CLIENT_ERROR = "client_error"  # other 4xx: bad model, bad request
    AUTH_ERROR = "auth_error"  # HTTP 401/403: the key is wrong, revoked or lacks permission
    BILLING_ERROR = "billing_error"  # 402, or a refusal for credit or quota: the account, not the record
    CONNECTION_ERROR = "connection_error"  # refused, reset, DNS
    INTERNAL_ERROR = "internal_error"  # a bug on our side, caught so the pipeline goes on
    BUDGET_EXHAUSTED = "budget_exhausted"  # the judge budget had no room: nothing sent or counted


def outcome_for_status(status: int) -> JudgeOutcome:
    if status == 429:
        return JudgeOutcome.RATE_LIMITED
    if status == 529:
        return JudgeOutcome.OVERLOADED
    if status >= 500:
        return JudgeOutcome.SERVER_ERROR
    if status == 408:
        return JudgeOutcome.TIMEOUT
    return JudgeOutcome.CLIENT_ERROR


# What providers say when the account, not the request, is the trouble: Anthropic's 400 "Your
# credit balance is too low", OpenAI's 429 insufficient_quota ("check your plan and billing").
_BILLING = re.compile(r"credit balance|billing|insufficient_quota|payment required", re.IGNORECASE)


def outcome_for_error(status: int, message: str) -> JudgeOutcome:
    """`outcome_for_status`, except that a rejected key (401, 403) or a refusal for billing (402,
    or a 4xx whose message says credit, billing or quota) is named: those hold for every record,
    so the judge stage waits them out like an outage instead of writing each sample failed."""
    if status in (401, 403):
        return JudgeOutcome.AUTH_ERROR
    if status == 402 or (400 <= status < 500 and _BILLING.search(message)):
        return JudgeOutcome.BILLING_ERROR
    return outcome_for_status(status)
