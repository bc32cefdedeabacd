"""How messages to a user read. One line per pydantic validation error, the way every configuration
error reads: the start-up errors of `rag-monitor run` and the judge options checked inside the
`judge` section alike; and counts in words ("1 record", "2 records"), not "1 records"."""

from __future__ import annotations

from pydantic_core import ErrorDetails


def error_line(err: ErrorDetails) -> str:
    """`where: message` (our own validators name their fields, so their prefix goes)."""
    where = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def plural(count: float, noun: str, many: str | None = None) -> str:
    """`count noun` with the noun agreeing: "1 record", "0 records", "2 entries" (`many` when the
    plural is not the noun + s); counts of 1,000 and more with thousands separators."""
    number = f"{count:,}" if isinstance(count, int) else f"{count:,g}"
    return f"{number} {noun if count == 1 else (many or noun + 's')}"
