"""Traces that were requests but could not be read: counted by reason and instrumentation scope,
and named in the log (span names, roles, unread attribute keys; never a value) at most once a
minute per reason and scope. A monitor that drops what it cannot read without a word is wrong and
quiet: this is the word.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence

from prometheus_client import Counter as PromCounter

from monitor.contracts.model import Reject, SpanFacts
from monitor.contracts.slices import BoundedLabel

log = logging.getLogger("monitor.ingest.unreadable")

# The reasons a trace that was a request makes no record (assemble.build_record).
REASONS = (Reject.UNREADABLE, Reject.MISSING_QUERY, Reject.MISSING_ANSWER)
# Distinct scope names labelled before the rest count as `other` (a scope name is the
# instrumentation's own, few per service, but a producer could send any).
MAX_SCOPES = 20
LOG_INTERVAL_SECONDS = 60.0
_MAX_NAMES = 8


class UnreadableTraces:
    """`ragmon_unreadable_traces_total{reason, scope}` and its log line."""

    def __init__(self, counter: PromCounter, log_interval_seconds: float = LOG_INTERVAL_SECONDS) -> None:
        self._counter = counter
        self._scopes = BoundedLabel(None, missing="unknown", capacity=MAX_SCOPES, normalize=False)
        self._interval = log_interval_seconds
        self._last: dict[tuple[str, str], float] = {}
        self._since: Counter[tuple[str, str]] = Counter()

    def count(self, reason: Reject, spans: Sequence[SpanFacts] | None) -> None:
        spans = spans or ()
        scope, _ = self._scopes.bound(_scope(spans))
        self._counter.labels(reason=reason.value, scope=scope).inc()
        key = (reason.value, scope)
        self._since[key] += 1
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            return
        self._last[key] = now
        n = self._since.pop(key)
        roles = Counter(f"{s.role.value}" for s in spans)
        names = sorted({s.name for s in spans})
        keys = sorted({k for s in spans for k in s.unread or ()})
        log.warning(
            "%d trace(s) that look like requests could not be read (%s) from instrumentation scope %r%s: "
            "span roles %s, span names %s%s; see docs/instrument.md",
            n,
            reason.value,
            scope,
            "" if last is None else f" in the last {now - last:.0f} s",
            dict(roles),
            names[:_MAX_NAMES] + (["…"] if len(names) > _MAX_NAMES else []),
            f", attribute keys not read {keys}" if keys else "",
        )


def _scope(spans: Sequence[SpanFacts]) -> str:
    """The scope that wrote the evidence: a span with unread keys first, else the first named."""
    for s in spans:
        if s.unread and s.scope:
            return s.scope
    return next((s.scope for s in spans if s.scope), "")
