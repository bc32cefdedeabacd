"""The terminal view of a replay report: one table of metrics per slice (each with its bootstrap
interval), the paired comparison with the baseline (baseline, now, drop, the drop's interval and a
verdict), the regressions with the rows that moved, and the diagnosis hints — retrieval and
generation side by side, never blended (citation precision, "–" when no answer cites its chunks, is
generation's); answer relevance, context relevance and correctness against the reference answer
per query type in a table of their own (correctness said to be the lexical stand-in); with
`--baselines`, the normal, oracle and no-context replays side by side per query type with the
oracle gap; per difficulty tag when rows carry one. The JSON report (`ReplayReport.to_json_dict`)
has all of it, per query type too.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console, JustifyMethod
from rich.table import Table

from monitor.golden.baselines import Baselines
from monitor.golden.comparison import MetricChange, Regression
from monitor.golden.intervals import Interval
from monitor.golden.report import CORRECTNESS_METHOD, ReplayReport
from monitor.golden.scores import ALL
from monitor.plumbing.errors import plural

if TYPE_CHECKING:
    from monitor.golden.synthesize import SynthesisReport

__all__ = ["render_report", "render_synthesis"]

_COLUMNS = (
    ("recall_at_k", "recall@k"),
    ("precision_at_k", "precision@k"),
    ("hit_at_k", "hit@k"),
    ("mrr", "MRR"),
    ("ndcg_at_k", "nDCG@k"),
    ("faithfulness", "faithful"),
    ("refusal_accuracy", "refusal acc"),
    ("false_refusal_rate", "false refusal"),
    ("citation_precision", "citation prec"),
)
_RELEVANCE_COLUMNS = (
    ("answer_relevance", "answer relevance"),
    ("context_relevance", "context relevance"),
    ("correctness", "correctness (lexical)"),
)
_DIFFICULTY_COLUMNS = (
    ("recall_at_k", "recall@k"),
    ("mrr", "MRR"),
    ("faithfulness", "faithful"),
    ("refusal_accuracy", "refusal acc"),
    ("answer_relevance", "answer rel"),
    ("context_relevance", "context rel"),
    ("correctness", "correct"),
)
_MAX_ROWS_SHOWN = 8


def _fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "–"


def _iv(iv: Interval | None, signed: bool = False) -> str:
    if iv is None:
        return "–"
    return f"[{iv.low:+.3f}, {iv.high:+.3f}]" if signed else f"[{iv.low:.2f}, {iv.high:.2f}]"


def _label(metric: str, k: int) -> str:
    return dict(_COLUMNS + _DIFFICULTY_COLUMNS).get(metric, metric).replace("@k", f"@{k}")


def _metric_table(
    title: str,
    head: str,
    groups: Mapping[str, Mapping[str, Any]],
    intervals: Mapping[str, Mapping[str, Interval | None]],
    columns: Sequence[tuple[str, str]],
    k: int,
    regressed: Collection[tuple[str, str]] = (),
    count: str = "rows",
) -> Table:
    """One row per group (`overall` first), each metric with its interval under it; `count`: the
    stat the second column shows (`rows`, or `answerable` for metrics of answerable rows)."""
    table = Table(title=title, title_justify="left")
    table.add_column(head)
    table.add_column(count, justify="right")
    for _, label in columns:
        table.add_column(label.replace("@k", f"@{k}"), justify="right")
    for group, stats in groups.items():
        cells = []
        for metric, _ in columns:
            text = _fmt(stats.get(metric))
            text = f"[bold red]{text}[/]" if (group, metric) in regressed else text
            iv = intervals.get(group, {}).get(metric)
            if iv is not None:
                text += f"\n[dim]{_iv(iv)}[/]"
            cells.append(text)
        name = "[bold]overall[/]" if group == ALL else group
        table.add_row(name, str(stats[count]), *cells, end_section=True)
    return table


_CHANGE_TEXT = {
    "regression": "[bold red]REGRESSION[/]: over the threshold, interval excludes 0 (real)",
    "possible_noise": "[bold yellow]over the threshold[/], interval includes 0: could be row noise "
    "(rerun or add rows)",
    "worse": "worse (interval excludes 0)",
    "better": "better (interval excludes 0)",
    "no_clear_change": "no clear change (interval includes 0)",
}


def _comparison(report: ReplayReport, console: Console, pct: str) -> None:
    comp = report.comparison
    if comp is None:
        return
    table = Table(
        title=f"against the baseline, paired on the {comp.rows_compared} rows in both",
        title_justify="left",
    )
    columns: list[tuple[str, JustifyMethod]] = [
        ("metric", "left"),
        ("scope", "left"),
        ("baseline", "right"),
        ("now", "right"),
        ("drop", "right"),
        (f"{pct} interval of the drop", "right"),
        ("allowed", "right"),
        ("verdict", "left"),
    ]
    for name, justify in columns:
        table.add_column(name, justify=justify)

    def shown(c: MetricChange) -> bool:
        return c.query_type == ALL or c.verdict in ("regression", "possible_noise", "worse")

    for c in (c for c in comp.changes if shown(c)):
        table.add_row(
            _label(c.metric, report.k),
            "overall" if c.query_type == ALL else c.query_type,
            _fmt(c.before),
            _fmt(c.after),
            f"{c.drop:+.3f}" if c.drop is not None else "–",
            _iv(c.interval, signed=True),
            _fmt(c.allowed),
            _CHANGE_TEXT[c.verdict],
        )
    console.print(table)
    console.print(
        "drop > 0 is worse; query types appear when their drop is real — all of them in the JSON report"
    )
    for what, ids in (
        ("added (not in the baseline)", comp.added),
        ("removed (only in the baseline)", comp.removed),
    ):
        if ids:
            more = f" … {len(ids) - _MAX_ROWS_SHOWN} more" if len(ids) > _MAX_ROWS_SHOWN else ""
            console.print(
                f"[yellow]rows {what}[/], not in any drop: {', '.join(ids[:_MAX_ROWS_SHOWN])}{more}"
            )


_MODE_COLUMNS = (
    ("faithfulness", "faithful"),
    ("answer_match", "answer match"),
    ("refusal_accuracy", "refusal acc"),
    ("false_refusal_rate", "false refusal"),
    ("answered_rate", "answered"),
)
_MODE_NAMES = {"normal": "normal", "oracle": "oracle", "no_context": "no-context"}


def _baselines(side: Baselines, console: Console, pct: str) -> None:
    """Normal, oracle and no-context per query type; the oracle gap (oracle − normal, paired) is what
    retrieval costs generation; no-context answers that match the reference came from memory."""
    table = Table(
        title=f"baselines: the same rows with the labelled chunks as context (oracle) and with none "
        f"(no-context); gap = oracle − normal, paired, [{pct} interval]",
        title_justify="left",
    )
    table.add_column("query type")
    table.add_column("replay")
    table.add_column("rows", justify="right")
    for _, label in _MODE_COLUMNS:
        table.add_column(label, justify="right")
    groups = list(side.metrics.get("normal", {}))
    measured = [m for m in ("normal", "oracle", "no_context") if m in side.metrics]
    for group in groups:
        first = True
        for mode in measured:
            stats = side.metrics[mode].get(group)
            if stats is None:
                continue
            pool = side.normal if mode == "normal" else side.modes[mode].rows
            rows = sum(group in (ALL, r.query_type) for r in pool)
            cells = [_fmt(stats.get(m)) if m in stats else "n/a" for m, _ in _MODE_COLUMNS]
            name = ("[bold]overall[/]" if group == ALL else group) if first else ""
            table.add_row(name, _MODE_NAMES[mode], str(rows), *cells)
            first = False
        gaps = side.oracle_gap.get(group)
        if gaps:
            cells = []
            for m, _ in _MODE_COLUMNS:
                g = gaps.get(m)
                if g is None or g.value is None:
                    cells.append("–")
                else:
                    cells.append(
                        f"{g.value:+.3f}"
                        + (f"\n[dim]{_iv(g.interval, signed=True)}[/]" if g.interval else "")
                    )
            table.add_row("", "[italic]oracle gap[/]", "", *cells)
        table.add_section()
    console.print(table)
    for mode, res in side.modes.items():
        if not res.measured:
            console.print(f"[bold yellow]{_MODE_NAMES[mode]} not measured[/]: {res.reason}")
    console.print(
        "answer match: the answer holds the reference answer's key tokens; no-context answers that match "
        "were answered without looking (a grounding risk). Faithfulness is n/a without context."
    )


def _findings(title: str, findings: list[Regression], console: Console) -> None:
    reg = Table(title=title, title_justify="left", show_lines=True)
    reg.add_column("metric")
    reg.add_column("scope")
    reg.add_column("what")
    reg.add_column("rows that moved (before → after)")
    for r in findings:
        moves = [
            f"{m.id} [{m.query_type}] {_fmt(m.before)} → {_fmt(m.after)}" for m in r.rows[:_MAX_ROWS_SHOWN]
        ]
        if len(r.rows) > _MAX_ROWS_SHOWN:
            moves.append(f"… {len(r.rows) - _MAX_ROWS_SHOWN} more in the JSON report")
        scope = "overall" if r.query_type == ALL else r.query_type
        reg.add_row(r.metric, scope, r.description, "\n".join(moves) or "–")
    console.print(reg)


def render_report(report: ReplayReport, console: Console) -> None:
    """The replay as a person reads it: the tables, then what changed, then the verdict."""
    pct = f"{report.interval_config.confidence * 100:g}%"
    _tables(report, console)
    _comparison(report, console, pct)
    if report.baselines is not None:
        _baselines(report.baselines, console, pct)
    if report.change is not None:
        console.print(f"change: {report.change.kind} {report.change.ref!r} (triggered this replay)")
    if report.regressions:
        _findings("regressions", report.regressions, console)
    if report.waived:
        _findings(
            "over a threshold but within row noise: not failing (--gate interval)", report.waived, console
        )
    for h in report.hints:
        console.print(f"[yellow]hint[/] ({h.area}) {h.message}")
    for w in report.warnings:
        console.print(f"[yellow]warning[/] {w}")
    _verdict(report, console)


def _tables(report: ReplayReport, console: Console) -> None:
    """The metrics per query type, relevance and correctness, per difficulty tag."""
    cfg = report.interval_config
    target = report.config.get("target", "?")
    title = f"golden replay: {plural(len(report.rows), 'row')}, k={report.k}, target {target}"
    if cfg.enabled:
        title += (
            f"; [{cfg.confidence * 100:g}% interval] {cfg.method} bootstrap over rows, {cfg.resamples} "
            f"resamples, seed {cfg.seed}"
        )
    regressed = {(r.query_type, r.metric) for r in report.regressions}
    console.print(
        _metric_table(title, "query type", report.metrics, report.intervals, _COLUMNS, report.k, regressed)
    )
    for group, stats in report.metrics.items():
        if stats.get("undecided"):
            share = stats.get("decided_share") or 0.0
            name = "overall" if group == ALL else group
            console.print(
                f"{name}: faithfulness on {share:.0%} of the answers to judge ({stats['judged_claims']}), "
                f"{1 - share:.0%} undecided ({stats['undecided']}): left out of the score and its interval"
            )
    console.print(
        _metric_table(
            "relevance and correctness against the reference answer (answerable rows)",
            "query type",
            report.metrics,
            report.intervals,
            _RELEVANCE_COLUMNS,
            report.k,
            regressed,
            count="answerable",
        )
    )
    console.print(
        "answer / context relevance: the judge's 1-3 rating on [0, 1], (rating − 1) / 2 (– when the "
        f"judge rates none); correctness: {CORRECTNESS_METHOD['note']}"
    )
    if report.by_difficulty:
        console.print(
            _metric_table(
                "per difficulty tag (tagged rows; reported, not gated)",
                "difficulty",
                report.by_difficulty,
                report.difficulty_intervals,
                _DIFFICULTY_COLUMNS,
                report.k,
            )
        )


def _verdict(report: ReplayReport, console: Console) -> None:
    """Unmeasured (exit 2), PASS (0) or REGRESSION (1), with what it rests on."""
    mode = report.config.get("gate", {}).get("mode", "threshold")
    for u in report.unmeasured:
        console.print(f"[bold red]unmeasured[/] {u.description}")
    if report.unmeasured:
        also = f"; {plural(len(report.regressions), 'regression finding')} too" if report.regressions else ""
        names = ", ".join(u.metric for u in report.unmeasured)
        console.print(f"[bold red]COULD NOT MEASURE[/]: {names} — the judge failed{also} (exit 2)")
    elif report.passed:
        waived = (
            f", {plural(len(report.waived), 'threshold')} crossed within row noise (--gate interval)"
            if report.waived
            else ""
        )
        console.print(f"[bold green]PASS[/] in {report.duration_s:.2f} s{waived}")
    else:
        real = sum(r.verdict == "regression" for r in report.regressions)
        noise = sum(r.verdict == "possible_noise" for r in report.regressions)
        why = "the threshold alone fails" if mode == "threshold" else "confirmed by the interval"
        console.print(
            f"[bold red]REGRESSION[/]: {plural(len(report.regressions), 'finding')} — {real} real "
            f"(the interval excludes no change), {noise} could be row noise (gate {mode}: {why}) (exit 1)"
        )


def render_synthesis(report: SynthesisReport, console: Console) -> None:
    """`golden synthesize`: per type, wanted, generated, kept and the drops by reason; then the
    totals."""
    dropped = report.dropped_by_reason()
    table = Table(title=f"golden synthesize ({report.generator} → {report.target}, top {report.k})")
    for name in ("query type", "wanted", "generated", "kept", *dropped):
        table.add_column(name, justify="left" if name == "query type" else "right")
    for qtype, c in report.by_type.items():
        short = "[yellow]" if c.kept < c.wanted else ""
        table.add_row(
            qtype, str(c.wanted), str(c.generated), f"{short}{c.kept}", *(str(c.dropped[r]) for r in dropped)
        )
    table.add_row(
        "all",
        str(sum(c.wanted for c in report.by_type.values())),
        str(report.generated),
        str(report.kept),
        *(str(n) for n in dropped.values()),
        style="bold",
    )
    console.print(table)
    said = ", ".join(f"{r} {n}" for r, n in dropped.items()) or "none"
    console.print(f"kept {report.kept} of {report.generated} generated; dropped: {said}")
