"""The terminal view of a replay report: one table of metrics per slice, one of regressions with
the rows that moved, and the diagnosis hints — retrieval and generation side by side, never blended."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from monitor.golden.run import ALL, ReplayReport

__all__ = ["render_report"]

_COLUMNS = (
    ("recall_at_k", "recall@k"),
    ("precision_at_k", "precision@k"),
    ("hit_at_k", "hit@k"),
    ("mrr", "MRR"),
    ("ndcg_at_k", "nDCG@k"),
    ("faithfulness", "faithful"),
    ("refusal_accuracy", "refusal acc"),
    ("false_refusal_rate", "false refusal"),
)
_MAX_ROWS_SHOWN = 8


def _fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "–"


def render_report(report: ReplayReport, console: Console) -> None:
    title = f"golden replay: {len(report.rows)} rows, k={report.k}, target {report.config.get('target', '?')}"
    table = Table(title=title, title_justify="left")
    table.add_column("query type")
    table.add_column("rows", justify="right")
    for _, label in _COLUMNS:
        table.add_column(label.replace("@k", f"@{report.k}"), justify="right")
    regressed = {(r.query_type, r.metric) for r in report.regressions}
    for group, stats in report.metrics.items():
        cells = []
        for metric, _ in _COLUMNS:
            text = _fmt(stats.get(metric))
            cells.append(f"[bold red]{text}[/]" if (group, metric) in regressed else text)
        name = "[bold]overall[/]" if group == ALL else group
        table.add_row(name, str(stats["rows"]), *cells, end_section=group == ALL)
    console.print(table)

    if report.regressions:
        reg = Table(title="regressions", title_justify="left", show_lines=True)
        reg.add_column("metric")
        reg.add_column("scope")
        reg.add_column("what")
        reg.add_column("rows that moved (before → after)")
        for r in report.regressions:
            moves = [
                f"{m.id} [{m.query_type}] {_fmt(m.before)} → {_fmt(m.after)}"
                for m in r.rows[:_MAX_ROWS_SHOWN]
            ]
            if len(r.rows) > _MAX_ROWS_SHOWN:
                moves.append(f"… {len(r.rows) - _MAX_ROWS_SHOWN} more in the JSON report")
            scope = "overall" if r.query_type == ALL else r.query_type
            reg.add_row(r.metric, scope, r.description, "\n".join(moves) or "–")
        console.print(reg)
    for h in report.hints:
        console.print(f"[yellow]hint[/] ({h.area}) {h.message}")
    for w in report.warnings:
        console.print(f"[yellow]warning[/] {w}")
    if report.passed:
        console.print(f"[bold green]PASS[/] in {report.duration_s:.2f} s")
    else:
        console.print(f"[bold red]REGRESSION[/]: {len(report.regressions)} finding(s) (exit 1)")
