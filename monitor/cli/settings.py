"""Settings as every command loads them: a bad file or flag is one `error:` line and exit 2."""

from __future__ import annotations

from pathlib import Path

import typer

from monitor.app.config import ConfigError, Settings, load_settings

__all__ = ["load_or_exit"]


def load_or_exit(config: Path | None, overrides: dict[str, object]) -> Settings:
    try:
        return load_settings(config, overrides)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
