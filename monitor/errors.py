"""One line per pydantic validation error, the way every configuration error reads: the start-up
errors of `rag-monitor run` and the judge options checked inside the `judge` section alike."""

from __future__ import annotations

from pydantic_core import ErrorDetails


def error_line(err: ErrorDetails) -> str:
    """`where: message` (our own validators name their fields, so their prefix goes)."""
    where = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg
