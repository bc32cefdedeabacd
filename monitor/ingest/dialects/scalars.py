"""Plain values out of attributes: text, a model name, token counts, booleans, JSON that never
raises, and the key rows indexed attribute families are probed through."""

from __future__ import annotations

import json
from typing import Any

from monitor.contracts.model import Reject
from monitor.ingest.dialects.keys import MAX_TOKENS

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})

_KEY_ROWS: dict[str, list[tuple[str, ...]]] = {}
_MAX_INDEX = 4096


def key_rows(prefix: str, suffixes: tuple[str, ...], n: int) -> list[tuple[str, ...]]:
    """Rows ``(prefix + i + suffix for suffix)`` for i = 0..n at least, built once per prefix.

    Probing then costs dict lookups only. `n` is the span's attribute count: contiguous indices
    cannot go past it, so the caller's loop always meets an empty row and stops.
    """
    rows = _KEY_ROWS.get(prefix)
    if rows is None:
        rows = _KEY_ROWS[prefix] = []
    if len(rows) <= n and len(rows) < _MAX_INDEX:
        rows.extend(
            tuple(f"{prefix}{i}{sfx}" for sfx in suffixes)
            for i in range(len(rows), min(max(n + 1, 2 * len(rows), 16), _MAX_INDEX))
        )
    return rows


def str_attr(attrs: dict[str, Any], key: str, problems: list[Reject]) -> str | None:
    value = attrs.get(key)
    if value is None:
        return None
    return scalar_text(value, problems)


def scalar_text(value: Any, problems: list[Reject]) -> str | None:
    """Text fields accept numbers (converted); containers, bools and bytes are unusable."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    problems.append(Reject.BAD_ATTRIBUTE)
    return None


def model_attr(attrs: dict[str, Any], problems: list[Reject]) -> str | None:
    for key in (
        "llm.model_name",
        "gen_ai.response.model",
        "gen_ai.request.model",
        "llm.response.model",
        "llm.request.model",
    ):
        if key in attrs:
            m = scalar_text(attrs[key], problems)
            if m:
                return m
    return None


def token_count(attrs: dict[str, Any], keys: tuple[str, ...], problems: list[Reject]) -> int | None:
    """The first of `keys` present: an int within [0, MAX_TOKENS] (an integral float too, as JSON
    writers may give); anything else (negative, huge, text, bool) is dropped as bad_attribute."""
    for key in keys:
        if key in attrs:
            v = attrs[key]
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_TOKENS:
                return v
            problems.append(Reject.BAD_ATTRIBUTE)
            return None
    return None


def parse_bool(value: Any, problems: list[Reject]) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value == 1
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    problems.append(Reject.BAD_ATTRIBUTE)
    return False


def first_of(d: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        v = d.get(k)
        if v is not None:
            return v
    return None


NOT_JSON: Any = object()


def loads(text: Any) -> Any:
    """json.loads that never raises (RecursionError included); `NOT_JSON` when unparsable. A
    value that is not a string (an OTLP kvlist or array, an event's structured attribute) is
    taken as already parsed."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return NOT_JSON
