"""`rag-monitor compare`: quality per release (or another slice) from a results file, with a
verdict against the previous release. Wiring only: the statistics are `monitor.compare`'s."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Literal

import typer

from monitor.compare import TEST, compare, format_table, group
from monitor.results import read_results

By = Literal["release", "query_type", "service"]


def register(app: typer.Typer) -> None:
    app.command(name="compare")(compare_command)


def compare_command(
    results: Annotated[Path, typer.Option("--results", help="results file (JSON lines) to read")],
    by: Annotated[By, typer.Option("--by", help="the slice to compare")] = "release",
    baseline: Annotated[
        str | None,
        typer.Option(help="compare every release with this one (default: each with the one seen before it)"),
    ] = None,
    confidence: Annotated[
        float, typer.Option(min=0.5, max=0.999, help="of the intervals and the test")
    ] = 0.95,
    min_samples: Annotated[
        int, typer.Option(min=2, help="judged records each side needs before a verdict is given")
    ] = 10,
    as_json: Annotated[
        bool, typer.Option("--json", help="one JSON object per row instead of a table")
    ] = False,
) -> None:
    """Each metric per release (weighted estimate, interval, judged records) and a verdict against
    the previous release: better, worse or no detectable change (unpaired test of the difference of
    two weighted estimates, stated in the output)."""
    try:
        lines, unreadable = read_results(results)
    except OSError as exc:
        typer.echo(f"error: cannot read {results}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    groups, left_out = group(lines, by)
    rows = compare(groups, baseline=baseline, confidence=confidence, min_samples=min_samples)
    if baseline is not None and baseline not in groups:
        typer.echo(f"error: no judged records of {by} {baseline!r} in {results}", err=True)
        raise typer.Exit(2)
    if as_json:
        for row in rows:
            typer.echo(json.dumps({**asdict(row), "test": TEST}))
    else:
        typer.echo(format_table(rows, confidence))
    skipped = left_out + sum(unreadable.values())
    if skipped:
        typer.echo(f"{skipped} line(s) left out (not judged, golden replay, or unreadable)", err=True)
