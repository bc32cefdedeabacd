"""`rag-monitor baseline pin|show`: make and read the drift baseline file (`monitor.drift.reference`):
the judged metrics' CUSUM references and the label-free retrieval drift references.

Exit codes as elsewhere: 0 done, 2 bad input (nothing written).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from monitor.contracts.results import ResultLine, read_results
from monitor.drift.config import RetrievalDriftPolicy
from monitor.drift.reference import (
    BaselineFileError,
    DriftBaseline,
    RetrievalStats,
    from_golden,
    from_results,
    load_baseline,
    pin,
    retrieval_from_results,
)
from monitor.plumbing.errors import plural
from monitor.plumbing.files import write_atomic

baseline_app = typer.Typer(no_args_is_help=True, help="Pin the references drift detectors compare with.")


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _when(value: str | None, flag: str) -> float | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        _fail(f"{flag}: not an ISO 8601 time: {value!r}")
    if moment.tzinfo is None:
        _fail(f"{flag}: give a time zone (e.g. {value}Z or {value}+00:00): {value!r}")
    return moment.timestamp()


def _lines(path: Path) -> tuple[list[ResultLine], dict[str, int]]:
    """The results file's lines and the unreadable ones by reason; exit 2 when it cannot be read."""
    try:
        return read_results(path)
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror or exc}")


@baseline_app.command("pin")
def pin_command(
    out: Annotated[
        Path, typer.Option("--out", help="the baseline file to write (alerts.drift.baseline_file)")
    ],
    results: Annotated[
        Path | None, typer.Option("--results", help="a results JSONL file: production judgements")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="window start, ISO 8601 with zone (record end time)")
    ] = None,
    until: Annotated[str | None, typer.Option(help="window end (exclusive)")] = None,
    golden_baseline: Annotated[
        Path | None, typer.Option("--golden-baseline", help="a golden-replay baseline (faithfulness only)")
    ] = None,
    min_records: Annotated[
        int,
        typer.Option(
            help="judged records a slice's metric needs to be pinned, and effective records "
            "((Σw)²/Σw² of its results lines) a slice's retrieval reference needs (fewer: left out)"
        ),
    ] = 200,
    version: Annotated[
        str | None, typer.Option(help="name of this baseline (default: hash of its content)")
    ] = None,
    retrieval: Annotated[
        bool,
        typer.Option(
            "--retrieval/--no-retrieval",
            help="with --results: also pin the retrieval drift references (chunk count, top score)",
        ),
    ] = True,
) -> None:
    """Pin drift references from a window of production judgements or from a golden-replay
    baseline. Re-baselining is this, explicitly: detectors never move a reference by themselves."""
    if (results is None) == (golden_baseline is None):
        _fail("give one of --results or --golden-baseline")
    source: dict[str, Any]
    found: dict[str, RetrievalStats] = {}
    left_out: dict[str, int] = {}  # of the retrieval references
    if results is not None:
        start, end = _when(since, "--since"), _when(until, "--until")
        lines, unreadable = _lines(results)
        slices, dropped = from_results(lines, start, end)
        if retrieval:
            found, left_out = retrieval_from_results(lines, start, end)
        dropped.update(unreadable)
        source = {"kind": "results", "path": str(results), "since": since, "until": until}
    else:
        assert golden_baseline is not None
        try:
            slices = from_golden(json.loads(golden_baseline.read_text()))
        except (OSError, ValueError) as exc:
            _fail(f"{golden_baseline}: {exc}")
        dropped = {}
        source = {"kind": "golden", "path": str(golden_baseline)}
    kept: dict[str, Any] = {}
    for qt, metrics in slices.items():
        for metric, stats in metrics.items():
            if stats.records >= min_records:
                kept.setdefault(qt, {})[metric] = stats
            else:
                dropped[f"{qt}/{metric}: {stats.records} < --min-records"] = stats.records
    pinned: dict[str, RetrievalStats] = {}
    for qt, ref in found.items():
        if ref.effective_records >= min_records:
            pinned[qt] = ref
        else:
            n = round(ref.effective_records)
            left_out[f"{qt}: {n} effective records (of {ref.records} lines) < --min-records"] = n
    if not kept and not pinned:
        _fail(f"no slice has {min_records} records in the window: nothing pinned")
    baseline = pin(kept, source, version, pinned)
    write_atomic(out, baseline.to_json())
    typer.echo(f"pinned drift baseline {baseline.version} to {out}")
    _show(baseline)
    for reason, n in sorted(dropped.items()):
        typer.echo(f"  left out: {reason} ({n})")
    for reason, n in sorted(left_out.items()):
        typer.echo(f"  left out of retrieval: {reason} ({n})")
    if golden_baseline is not None:
        typer.echo("  retrieval: not pinned from a golden baseline (no scores; not production's queries)")


@baseline_app.command("show")
def show_command(path: Annotated[Path, typer.Argument(help="a drift baseline file")]) -> None:
    """What a baseline pins: per slice and metric, the reference value and its records."""
    try:
        baseline = load_baseline(path)
    except BaselineFileError as exc:
        _fail(str(exc))
    typer.echo(f"drift baseline {baseline.version}, created {baseline.created_at}, from {baseline.source}")
    _show(baseline)


def _show(baseline: DriftBaseline) -> None:
    for qt, metrics in baseline.slices.items():
        for metric, s in metrics.items():
            typer.echo(f"  {qt:<16} {metric:<14} {s.mean:.4f}  ({plural(s.records, 'judged record')})")
    if not baseline.retrieval:
        typer.echo("  retrieval: none pinned (each slice takes its first records)")
        return
    window = RetrievalDriftPolicy().window_records
    typer.echo("  retrieval (label-free, every record; shares of production records):")
    for qt, r in baseline.retrieval.items():
        counts = r.chunk_count.shares
        by_count = " ".join(f"{c}:{q:.3f}" for c, q in enumerate(counts[:-1]))
        typer.echo(f"  {qt:<16} {'chunk_count':<14} {by_count} more:{counts[-1]:.3f}")
        score = r.top_score
        edges = " ".join(f"{e:.4g}" for e in score.edges) or "-"
        bins = " ".join(f"{q:.3f}" for q in score.shares[1:])
        typer.echo(f"  {qt:<16} {'top_score':<14} none:{score.shares[0]:.3f} edges {edges} bins {bins}")
        noise = r.reference().expected_psi(window)
        typer.echo(
            f"  {'':<16} {'':<14} ({r.records} results lines, {r.effective_records:.0f} effective; "
            f"PSI on unchanged traffic ~{noise:.3f} against a {window}-record window)"
        )
