"""Choosing between a compiled extension (`monitor/ingest/_wire.c`, `_assembly.c`, `_accounting.c`,
`monitor/kafka/_records.c`) and the pure-Python code it is tested against, and describing plain
dataclasses so the extensions can build them without calling them."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any


def choose(what: str, module: str, load: Callable[[], Any]) -> tuple[Any, str]:
    """`load()` (the compiled `what`, set up; None where `module` was not built), unless
    `RAGMON_PURE_PYTHON` is set or loading fails; and a word for the log."""
    if os.environ.get("RAGMON_PURE_PYTHON", "") not in ("", "0"):
        return None, "python (RAGMON_PURE_PYTHON is set)"
    try:
        compiled = load()
    except Exception as exc:  # model classes or a schema it cannot take: the reference still works
        return None, f"python (compiled {what} unusable: {exc})"
    if compiled is None:
        return None, f"python (the compiled {what} {module} was not built)"
    return compiled, "compiled"


def slots_layout(cls: type) -> list[tuple[str, int, Any]] | None:
    """How an extension may build a `cls` without calling it: each field's name and kind (0
    required, 1 with its default, 2 a new list, 3 a new dict), for a slots dataclass whose
    `__init__` only stores them; None (call the class) for anything else."""
    if "__slots__" not in cls.__dict__ or hasattr(cls, "__post_init__"):
        return None
    layout: list[tuple[str, int, Any]] = []
    for f in dataclasses.fields(cls):
        factory: Any = f.default_factory
        if not f.init or factory not in (dataclasses.MISSING, list, dict):
            return None
        if factory is not dataclasses.MISSING:
            layout.append((f.name, 2 if factory is list else 3, None))
        else:
            required = f.default is dataclasses.MISSING
            layout.append((f.name, 0 if required else 1, None if required else f.default))
    return layout
