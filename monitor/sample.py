"""Which records get judged: a deterministic decision per trace id.

Hashing the trace id (rather than drawing a random number) gives every replica and every
redelivery of a trace the same decision, and makes a 5% sample a subset of a 10% one.
"""

from __future__ import annotations

from hashlib import blake2b

_SCALE = float(1 << 64)


def trace_fraction(trace_id: str) -> float:
    """A uniform number in [0, 1) fixed by the trace id."""
    return int.from_bytes(blake2b(trace_id.encode(), digest_size=8).digest(), "big") / _SCALE


class RateSampler:
    def __init__(self, rate: float) -> None:
        self.rate = rate

    def inclusion_probability(self, trace_id: str) -> float | None:
        """The record's inclusion probability when sampled, None when not."""
        if self.rate >= 1.0:
            return 1.0
        if self.rate <= 0.0:
            return None
        return self.rate if trace_fraction(trace_id) < self.rate else None
