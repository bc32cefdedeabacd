"""Which failed requests are worth another try, how long to wait, and what a server asked for.

The SDK-less path (`chat.post_chat`) retries with these; the Anthropic SDK retries the same
statuses on its own (and honours the same headers), and the batch poller keeps polling on them.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping

__all__ = ["RETRYABLE_STATUSES", "backoff", "is_retryable", "retry_after"]

# Besides every 5xx: request timeout, conflict (a lock on the provider's side), rate limit.
RETRYABLE_STATUSES = frozenset((408, 409, 429))


def is_retryable(status: int) -> bool:
    """A failure of the moment (408, 409, 429, 5xx), not of the request."""
    return status in RETRYABLE_STATUSES or status >= 500


def backoff(initial: float, maximum: float, retry: int) -> float:
    """Seconds before try `retry` + 1: exponential from `initial`, capped at `maximum`, minus up to
    a quarter of jitter so that callers failed together do not retry together."""
    base = min(initial * 2.0**retry, maximum)
    return base * (1 - 0.25 * random.random())


def retry_after(headers: Mapping[str, str]) -> float | None:
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
