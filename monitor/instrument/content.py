"""Content controls: what text may leave the process, redacted and bounded, before it is a span attribute.

Queries, retrieved passages and answers are user data. Each is redacted first (so that a secret cut
in half by truncation is still found) and then cut to a per-attribute size, so that one huge passage
can neither leak nor push the Kafka message over the broker's size limit.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "TRUNCATION_MARK",
    "ContentPolicy",
    "Redactor",
    "default_redactor",
    "luhn_valid",
    "truncate",
]

Redactor = Callable[[str], str]

TRUNCATION_MARK = "…[truncated {n} chars]"
_CACHE_MAX_CHARS = 64 * 1024  # longer texts are cleaned every time rather than kept alive

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
# 13-19 digits, optionally grouped by single spaces or dashes; Luhn decides what is a card. No
# look-behind: it makes the engine try every position (3x slower); `_card` checks the edges.
_CARD = re.compile(r"\d(?:[ -]?\d){12,18}")
_EDGE = frozenset("0123456789-")


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a digit string: true for real card numbers, false for most random digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card(m: re.Match[str]) -> str:
    text, start, end = m.string, m.start(), m.end()
    if (start and text[start - 1] in _EDGE) or (end < len(text) and text[end] in _EDGE):
        return m.group()  # part of a longer number
    digits = m.group().replace(" ", "").replace("-", "")
    return "[CARD]" if luhn_valid(digits) else m.group()


def default_redactor(text: str) -> str:
    """Replace e-mail addresses with ``[EMAIL]`` and Luhn-valid card numbers with ``[CARD]``.

    Cheap on text with neither: each pattern is one C-level scan, the e-mail one only when "@" occurs.
    """
    if "@" in text:
        text = _EMAIL.sub("[EMAIL]", text)
    return _CARD.sub(_card, text)


def truncate(text: str, limit: int | None) -> str:
    """`text` cut to at most `limit` characters, the mark included, saying how much was cut."""
    if limit is None or len(text) <= limit:
        return text
    n = len(text) - limit
    while True:  # the mark's own length depends on n: settle in at most a few rounds
        mark = TRUNCATION_MARK.format(n=n)
        keep = max(0, limit - len(mark))
        if len(text) - keep == n:
            return text[:keep] + mark
        n = len(text) - keep


@dataclass(frozen=True, slots=True)
class ContentPolicy:
    """What text spans carry. Ids, scores, models and the query type are always kept.

    A record the sidecar builds needs the query and the answer: switching either off makes the
    monitor reject those traces (`missing_query` / `missing_answer`), which is the point when the
    content must not leave the process at all.
    """

    capture_query: bool = True
    capture_contexts: bool = True  # retrieved passage text (ids and scores are kept regardless)
    capture_answer: bool = True
    max_chars: int | None = 8192  # per attribute, truncation mark included; None = unlimited
    redact: Redactor | None = default_redactor
    max_documents: int = 64  # retrieved documents recorded per span (the SDK caps attributes too)
    # Cleaned texts remembered (LRU): retrieved passages recur across requests and a query or answer
    # is recorded on two spans, so most texts are redacted once. 0 = no cache.
    cache_size: int = 1024
    _cached: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.max_chars is not None and self.max_chars < 32:
            raise ValueError("max_chars must be >= 32 (room for the truncation mark) or None")
        if self.max_documents < 0 or self.cache_size < 0:
            raise ValueError("max_documents and cache_size must be >= 0")
        cached = functools.lru_cache(maxsize=self.cache_size)(self._clean) if self.cache_size else None
        object.__setattr__(self, "_cached", cached)

    def _clean(self, text: str) -> str:
        if self.redact is not None:
            text = self.redact(text)
        return truncate(text, self.max_chars)

    def clean(self, text: str) -> str:
        """Redact, then truncate: what actually goes on the span."""
        if self.redact is None:
            return truncate(text, self.max_chars)
        if self._cached is not None and len(text) <= _CACHE_MAX_CHARS:
            out: str = self._cached(text)
            return out
        return self._clean(text)
