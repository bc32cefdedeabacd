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


def yaml_error(exc: Exception) -> tuple[str, str]:
    """A PyYAML error as (where, what): "line 3, column 9" (empty when the error has no position)
    and "invalid YAML: expected ',' or ']', but got ':' (while parsing a flow sequence started at
    line 2, column 10)". PyYAML's own text names the input `<unicode string>` when it was parsed
    from a string; the caller names the file. Duck-typed on PyYAML's `MarkedYAMLError` fields, so
    this module does not import yaml."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return "", f"invalid YAML: {' '.join(str(exc).split())}"
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    detail = ""
    if context:
        at = f" started at line {start.line + 1}, column {start.column + 1}" if start is not None else ""
        detail = f" ({context}{at})"
    return where, f"invalid YAML: {problem}{detail}"
