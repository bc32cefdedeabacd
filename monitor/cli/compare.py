"""`rag-monitor compare`: quality per release (or another slice) from a results file or from
Prometheus, with a verdict against the previous release. Wiring only: the statistics are
`monitor.compare`'s."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Literal

import typer

from monitor.compare import (
    TEST,
    PrometheusError,
    PrometheusWindow,
    ReleaseStats,
    compare,
    format_table,
    group,
    prometheus_groups,
)
from monitor.contracts.results import read_results
from monitor.plumbing.errors import plural
from monitor.plumbing.safe_text import terminal_line

By = Literal["release", "query_type", "service"]


def register(app: typer.Typer) -> None:
    app.command(name="compare")(compare_command)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _duration(text: str) -> float:
    """A Prometheus-style duration (`90m`, `24h`, `7d`) or plain seconds."""
    unit = _UNITS.get(text[-1:], 1) if text else 1
    number = text[:-1] if text[-1:] in _UNITS else text
    try:
        value = float(number) * unit
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a duration like 90m, 24h or 7d") from None
    if not value > 0:
        raise typer.BadParameter("the range must be positive")
    return value


def _read(
    results: Path | None,
    prometheus: str | None,
    window: float,
    at: float | None,
    match: str,
    by: str,
    only: dict[str, str],
    timeout: float = 30.0,
) -> tuple[dict[str, ReleaseStats], str]:
    """The groups, and a note for stderr (what was left out or is unsure), or Exit(2). `only`:
    results-line fields a line must have these values of (session_id, user_id)."""
    if (results is None) == (prometheus is None):
        typer.echo("error: give one of --results FILE or --prometheus URL", err=True)
        raise typer.Exit(2)
    if prometheus is not None and only:
        typer.echo("error: --session and --user need --results (they are never metric labels)", err=True)
        raise typer.Exit(2)
    if prometheus is not None:
        try:
            got = prometheus_groups(PrometheusWindow(prometheus, window, at, match, timeout), by)
        except PrometheusError as exc:
            typer.echo(f"error: {terminal_line(str(exc))}", err=True)
            raise typer.Exit(2) from None
        note = ""
        if got.reset:
            note = (
                f"the counters of {', '.join(map(terminal_line, got.reset))} restarted in the window"
                " (a sidecar restart): their figures undercount it"
            )
        return got.groups, note
    assert results is not None
    try:
        lines, unreadable = read_results(results)
    except OSError as exc:
        typer.echo(f"error: cannot read {results}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    if only:
        lines = [ln for ln in lines if all(getattr(ln, k) == v for k, v in only.items())]
    groups, left_out = group(lines, by)
    skipped = left_out + sum(unreadable.values())
    note = f"{plural(skipped, 'line')} left out (not judged, golden replay, or unreadable)" if skipped else ""
    return groups, note


def compare_command(
    results: Annotated[
        Path | None, typer.Option("--results", help="results file (JSON lines) to read")
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(help="read the estimate counters from this Prometheus (base URL) instead"),
    ] = None,
    window: Annotated[
        str, typer.Option("--range", help="with --prometheus: the window read, e.g. 24h, 7d")
    ] = "24h",
    at: Annotated[
        float | None, typer.Option(help="with --prometheus: the window's end, Unix seconds (default now)")
    ] = None,
    match: Annotated[
        str, typer.Option(help='with --prometheus: PromQL label matchers, e.g. service="rag"')
    ] = "",
    timeout: Annotated[
        float,
        typer.Option(
            min=0.1, help="with --prometheus: seconds the whole read may take (every query together)"
        ),
    ] = 30.0,
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
    session: Annotated[
        str | None, typer.Option(help="with --results: only the records of this session (session_id)")
    ] = None,
    user: Annotated[
        str | None, typer.Option(help="with --results: only this user's records (user_id)")
    ] = None,
) -> None:
    """Each metric per release (weighted estimate, interval, judged records), from a results file or
    from Prometheus's estimate counters over a window, and a verdict against the previous release:
    better, worse or no detectable change by the metric's good direction (the refusal rate's read
    with hallucination and false refusals); unpaired test of the difference of two weighted
    estimates, stated in the output."""
    only = {k: v for k, v in (("session_id", session), ("user_id", user)) if v is not None}
    groups, note = _read(results, prometheus, _duration(window), at, match, by, only, timeout)
    rows = compare(groups, baseline=baseline, confidence=confidence, min_samples=min_samples)
    if baseline is not None and baseline not in groups:
        typer.echo(f"error: no judged records of {by} {baseline!r} in {results or prometheus}", err=True)
        raise typer.Exit(2)
    if as_json:
        for row in rows:
            typer.echo(json.dumps({**asdict(row), "test": TEST}))
    else:
        typer.echo(format_table(rows, confidence))
    if note:
        typer.echo(note, err=True)
