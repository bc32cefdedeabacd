"""Questions and chunk texts compared word for word: what the planner, the template generator and
the filters share."""

from __future__ import annotations

import re

from pydantic import ValidationError

from monitor.golden.baselines import STOP_WORDS

_WORD = re.compile(r"\w+")
_STOP = STOP_WORDS | {"about", "fills", "blank", "name", "number"}


def words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def phrase(text: str) -> str:
    """`text` as a space-padded word sequence: `phrase(a) in phrase(b)` is "b says a, word for
    word", whatever the case, punctuation or spacing of either."""
    return f" {' '.join(words(text))} "


def contains(haystack: str, needle: str) -> bool:
    """Whether `needle` occurs word for word in `haystack` (both `phrase`d)."""
    return needle.strip() != "" and needle in haystack


def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in words(text) if w not in _STOP)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def problems(exc: ValidationError) -> str:
    """A validation error's problems on one line ("loc: message; ...")."""
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or '(row)'}: {e['msg']}"
        for e in exc.errors(include_url=False, include_input=False)
    )
