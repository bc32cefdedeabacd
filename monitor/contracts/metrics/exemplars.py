"""Which judged record a verdict series' OpenMetrics exemplar names: the link from a dashboard
panel to a trace, failing records first."""

from __future__ import annotations

from collections.abc import Hashable

from monitor.contracts.model import Judgement

# A passing record's trace id replaces a series' exemplar only once it is this old: a failing one
# stays the example a dashboard links to for a while, however much good traffic follows it.
EXEMPLAR_MAX_AGE_SECONDS = 300.0
# OpenMetrics caps an exemplar's label set at 128 UTF-8 characters: `trace_id` and a W3C id (32
# hex) fit; an id longer than this is not one, and gets no exemplar rather than a refused scrape.
MAX_EXEMPLAR_TRACE_ID = 64


def failing(j: Judgement) -> bool:
    """A verdict worth showing first: the answer asserts something its context does not support
    (faithfulness below 1) or answers an unanswerable query (hallucinated)."""
    return (j.faithfulness is not None and j.faithfulness < 1.0) or j.hallucinated is True


class Exemplars:
    """Which observation sets its series' OpenMetrics exemplar (`{trace_id}`): a failing record's
    always, a passing one's only where the series has none yet or its exemplar is older than
    `max_age` seconds, so a scrape shows a recent bad trace where there is one. A series is a
    counter child, or a histogram child's bucket (each bucket keeps its own exemplar). Per judged
    record, on the event loop: a dict look-up per series."""

    __slots__ = ("_max_age", "_set_at")

    def __init__(self, max_age: float = EXEMPLAR_MAX_AGE_SECONDS) -> None:
        self._max_age = max_age
        self._set_at: dict[Hashable, float] = {}  # series → when its exemplar was set (monotonic)

    def take(self, series: Hashable, failing: bool, now: float) -> bool:
        """Whether this observation's exemplar replaces the series' one (and note it if so)."""
        if not failing:
            last = self._set_at.get(series)
            if last is not None and now - last < self._max_age:
                return False
        self._set_at[series] = now
        return True
