"""Bad input accounting: every rejected message or dropped field is counted by reason, logged at a
bounded rate with a reason a person can act on, and (for whole messages) sent to the dead-letter
topic when one is configured. Nothing here raises: bad input must never stop the pipeline.
"""

from __future__ import annotations

import logging
import time

from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Reject

log = logging.getLogger("monitor.ingest.rejects")


class Rejections:
    def __init__(self, metrics: Metrics, log_interval_seconds: float = 10.0) -> None:
        self._metrics = metrics
        self._interval = log_interval_seconds
        self._last_log: dict[Reject, float] = {}
        self._suppressed: dict[Reject, int] = {}

    def count(self, reason: Reject, detail: str = "", where: str = "") -> None:
        self._metrics.rejected.labels(reason=reason.value).inc()
        if reason is Reject.NOT_RAG:
            return  # expected traffic, counted for visibility but not worth a warning
        now = time.monotonic()
        last = self._last_log.get(reason)
        if last is not None and now - last < self._interval:
            self._suppressed[reason] = self._suppressed.get(reason, 0) + 1
            return
        self._last_log[reason] = now
        more = self._suppressed.pop(reason, 0)
        log.warning(
            "rejected (%s)%s%s%s",
            reason.value,
            f" at {where}" if where else "",
            f": {detail}" if detail else "",
            f" [+{more} more since last report]" if more else "",
        )
