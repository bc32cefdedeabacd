"""`rag-monitor replay`, `rag-monitor golden validate`, `golden add`, `golden trigger` and `golden
synthesize`: flag parsing and file I/O only.

Exit codes (docs/contract.md, CLI): 0 pass, 1 regression against the baseline or a floor, 2 bad input (golden
file, baseline, config, or a target that cannot be replayed) or an LLM judge whose estimated cost
was not accepted (`--max-usd`, `--yes`); on those nothing is written: a CI job must never pick up
a half-made baseline. 2 also when the judge failed on the rows of a gated metric (`unmeasured`, see
`GateConfig.max_judge_failure_share`): the report is written, to say which, the baseline is not.
A Pushgateway that cannot be reached changes none of these: the report and baseline are already
written, exit 2 promises nothing was written, and a monitoring outage must not fail a deploy gate
nor page as a regression; it is one `warning:` line, and a group that stops being pushed shows in
Prometheus as a stale `push_time_seconds`, which is where an SRE alerts on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console

from monitor.contracts.model import RagRecord
from monitor.golden.baselines import parse_modes
from monitor.golden.change import Change, parse_change
from monitor.golden.comparison import BaselineError, load_baseline
from monitor.golden.config import ReplayConfig
from monitor.golden.cost import (
    CostEstimate,
    CostRefused,
    estimate_cost,
    is_billed,
    metered,
    read_actual,
)
from monitor.golden.cost import approve as approve_cost
from monitor.golden.gauges import push_groups
from monitor.golden.replay import ReplayFailed, run_replay
from monitor.golden.report import ReplayReport
from monitor.golden.schema import GoldenCheck, load_golden
from monitor.golden.targets import Target, make_target
from monitor.judge import Judge
from monitor.outputs.config import DEFAULT_PUSH_JOB
from monitor.outputs.pushgateway import Pushgateway
from monitor.plumbing.errors import plural, yaml_error
from monitor.plumbing.files import write_atomic
from monitor.plumbing.safe_text import terminal_line

if TYPE_CHECKING:
    from monitor.golden.synthesize import CorpusRead, Generator, SourceChunk, SynthesisReport

__all__ = ["register"]


def _err(message: str) -> None:
    typer.echo(f"error: {terminal_line(message)}", err=True)


def _print_check(check: GoldenCheck) -> None:
    for e in check.errors:
        typer.echo(f"error: {check.path}: {terminal_line(str(e))}", err=True)
    for w in check.warnings:
        typer.echo(f"warning: {check.path}: {terminal_line(str(w))}", err=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """`data` as indented JSON, written atomically: a reader never sees half a baseline."""
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def _load_config(path: Path | None) -> ReplayConfig:
    if path is None:
        return ReplayConfig()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return ReplayConfig.model_validate(data)
    except yaml.YAMLError as exc:
        where, what = yaml_error(exc)
        _err(f"config {path}{', ' + where if where else ''}: {what}")
        raise typer.Exit(2) from None
    except (OSError, ValidationError, ValueError) as exc:
        _err(f"config {path}: {exc}")
        raise typer.Exit(2) from None


def _with_flags(cfg: ReplayConfig, flags: dict[str, Any]) -> ReplayConfig:
    """`cfg` with each flag given (not None) set at its dotted path, validated as the file is: a
    flag and its config key cannot disagree on what is valid."""
    data = cfg.model_dump()
    for path, value in flags.items():
        if value is None:
            continue
        *parents, leaf = path.split(".")
        node = data
        for key in parents:
            node = node[key]
        node[leaf] = value
    try:
        return ReplayConfig.model_validate(data)
    except ValidationError as exc:
        _err(f"options: {exc}")
        raise typer.Exit(2) from None


def replay(
    golden: Annotated[Path, typer.Option("--golden", help="golden file (JSON, JSONL or YAML)")],
    target: Annotated[
        str, typer.Option("--target", help="http(s) URL of the RAG endpoint, or module:function")
    ],
    k: Annotated[
        int | None, typer.Option("--k", min=1, help="chunks asked for and scored (recall@k…; default 5)")
    ] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="baseline JSON to compare with")] = None,
    write_baseline: Annotated[
        Path | None, typer.Option("--write-baseline", help="store this run as the new baseline")
    ] = None,
    report: Annotated[Path | None, typer.Option("--report", help="write the full report as JSON")] = None,
    judge: Annotated[str, typer.Option("--judge", help="lexical, anthropic or openai")] = "lexical",
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="YAML: k, concurrency, baselines, gate, intervals (as the sidecar's golden section), "
            "target (template, mapping, auth_env), judge_options, pushgateway",
        ),
    ] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="requests in flight (default 8)")] = None,
    timeout: Annotated[float | None, typer.Option(help="seconds per request (default 10)")] = None,
    retries: Annotated[int | None, typer.Option(min=0, help="retries per request (default 2)")] = None,
    auth_env: Annotated[
        str | None,
        typer.Option(help="env var holding the auth header value (header: config target.auth_header)"),
    ] = None,
    gate: Annotated[
        Literal["threshold", "interval"] | None,
        typer.Option(
            help="threshold (default): a drop over its threshold fails; interval: only when its "
            "95% interval also excludes no change"
        ),
    ] = None,
    resamples: Annotated[
        int | None, typer.Option(min=0, help="bootstrap resamples for intervals (default 2000; 0: off)")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="bootstrap seed (default 0): same rows, same intervals")
    ] = None,
    max_usd: Annotated[
        float | None,
        typer.Option(min=0, help="LLM judge: go ahead only if the estimated cost is at most this (USD)"),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="LLM judge: go ahead whatever the estimate")] = False,
    baselines: Annotated[
        str | None,
        typer.Option(
            help="also replay with the labelled chunks as context and/or none: oracle,no-context "
            "(reported beside the normal run, never gated)"
        ),
    ] = None,
    change: Annotated[
        str | None,
        typer.Option(
            help="the change this run checks, KIND:REF (kind: deploy, reindex, prompt, model, other), "
            "e.g. deploy:v1.2.3: recorded in the report"
        ),
    ] = None,
    generator_model: Annotated[
        str | None,
        typer.Option(
            help="the model that writes the target's answers (the replay's answers name none): "
            "warns in the report when it is the judge's model, which would grade itself"
        ),
    ] = None,
    pushgateway: Annotated[
        str | None,
        typer.Option(
            "--pushgateway",
            help="after a complete run, push the ragmon_golden_* gauges to this Pushgateway "
            "(http://host:9091; config pushgateway.url)",
        ),
    ] = None,
    push_job: Annotated[
        str | None, typer.Option("--push-job", help=f"job label of the push (default {DEFAULT_PUSH_JOB})")
    ] = None,
    push_instance: Annotated[
        str | None,
        typer.Option("--push-instance", help="instance label of the push (default: the golden file's name)"),
    ] = None,
    push_auth_env: Annotated[
        str | None,
        typer.Option("--push-auth-env", help="env var holding the Pushgateway's basic auth, user:password"),
    ] = None,
) -> None:
    """Replay the golden set, score retrieval and generation, gate on the baseline.

    With an LLM judge, the cost is estimated once the target has answered and before any judge
    request: the run stops there (exit 2) unless the estimate is within --max-usd or --yes is given.
    Exit 0 pass, 1 regression (baseline drop or floor), 2 bad input or cost refused (nothing written),
    or a gated metric the judge failed on (the report says which; no baseline written).
    With --pushgateway the results are pushed after the report is written; a failed push is a
    warning and leaves the exit code as the gate decided."""
    from monitor.golden.render import render_report
    from monitor.judge import create_judge

    try:
        chosen = list(parse_modes(baselines)) if baselines else None
        event: Change | None = parse_change(change) if change is not None else None
    except ValueError as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    flags = {
        "k": k,
        "concurrency": concurrency,
        "baselines": chosen,
        "gate.mode": gate,
        "intervals.resamples": resamples,
        "intervals.seed": seed,
        "target.timeout_seconds": timeout,
        "target.retries": retries,
        "target.auth_env": auth_env,
        "pushgateway.url": pushgateway,
        "pushgateway.job": push_job,
        "pushgateway.instance": push_instance,
        "pushgateway.auth_env": push_auth_env,
    }
    cfg = _with_flags(_load_config(config), flags)
    modes = parse_modes(cfg.baselines)
    try:
        push = Pushgateway(cfg.pushgateway, golden.name) if cfg.pushgateway.url else None
    except ValueError as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    check = load_golden(golden)
    _print_check(check)
    if not check.ok:
        raise typer.Exit(2)
    target_cfg = cfg.target
    try:
        base = load_baseline(baseline) if baseline is not None else None
        tgt = make_target(target, concurrency=cfg.concurrency, config=target_cfg)
        jdg = create_judge(judge, cfg.judge_options)
    except (BaselineError, ValueError) as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    public = target_cfg.model_dump(mode="json", exclude={"url", "headers"})  # header values may be secrets
    estimates: list[CostEstimate] = []

    def approve(records: Sequence[RagRecord]) -> None:
        """Price what the judge is about to be sent; stop here unless it is accepted."""
        est = estimate_cost(records, jdg)
        if est is None:  # the lexical judge: free
            return
        estimates.append(est)
        typer.echo(est.describe())
        approve_cost(est, max_usd=max_usd, yes=yes)

    judging: Judge = jdg
    registry = None
    if is_billed(jdg):  # count what it is billed, to compare with the estimate
        judging, registry = metered(jdg)

    async def go() -> ReplayReport:
        try:
            return await run_replay(
                check.rows,
                tgt,
                k=cfg.k,
                judge=judging,
                concurrency=cfg.concurrency,
                baseline=base,
                gate=cfg.gate,
                intervals=cfg.intervals,
                golden_sha256=check.sha256,
                golden_path=str(golden),
                config={"http": public} if target.startswith(("http://", "https://")) else None,
                approve_judging=approve,
                baselines=modes,
                change=event,
                generator_model=generator_model,
            )
        finally:
            await tgt.aclose()
            await jdg.aclose()

    try:
        result = asyncio.run(go())
    except CostRefused as exc:
        _err(str(exc))
        _err("nothing sent to the judge, nothing written (no report, no baseline)")
        raise typer.Exit(2) from None
    except (ReplayFailed, BaselineError) as exc:
        for line in getattr(exc, "errors", None) or [str(exc)]:
            _err(line)
        _err("bad input: nothing written (no report, no baseline)")
        raise typer.Exit(2) from None
    console = Console(width=None if sys.stdout.isatty() else 160)
    render_report(result, console)
    if estimates and registry is not None:
        est, actual = estimates[0], read_actual(registry)
        result.judge_cost = {"estimate": est.to_json_dict(), "actual": actual.to_json_dict()}
        console.print(est.versus(actual))
        if est.usd is not None and actual.usd > est.usd:
            console.print(
                "[yellow]warning[/] the judge cost more than estimated: retries or repairs "
                "(see rows[].judge_error and ragmon_judge_requests_total)"
            )
    if report is not None:
        _write_json(report, result.to_json_dict())
    if write_baseline is not None and result.unmeasured:
        # A baseline with a metric missing would make every later run's drop on it invisible.
        typer.echo(f"warning: baseline not written to {write_baseline}: the run could not measure "
                   f"{', '.join(u.metric for u in result.unmeasured)}", err=True)  # fmt: skip
    elif write_baseline is not None:
        _write_json(write_baseline, result.baseline())
        console.print(f"baseline written to {write_baseline}")
    if push is not None:
        failure = push.push(push_groups(result))
        if failure is None:
            console.print(f"results pushed to the {push.describe()}")
        else:
            typer.echo(
                f"warning: results not pushed to the {push.describe()}: {failure} "
                f"(report kept, exit code {result.exit_code} is the gate's)",
                err=True,
            )
    raise typer.Exit(result.exit_code)


def validate_cmd(
    file: Annotated[Path, typer.Argument(help="golden file (JSON, JSONL or YAML)")],
) -> None:
    """Schema and coverage checks: exit 2 on errors (with line numbers), 0 otherwise (warnings shown)."""
    check = load_golden(file)
    _print_check(check)
    if not check.ok:
        raise typer.Exit(2)
    types: dict[str, int] = {}
    for r in check.rows:
        types[r.query_type] = types.get(r.query_type, 0) + 1
    unanswerable = sum(not r.answerable for r in check.rows)
    summary = ", ".join(f"{terminal_line(t)} {n}" for t, n in sorted(types.items()))
    typer.echo(f"{file}: {plural(len(check.rows), 'row')} OK ({unanswerable} unanswerable; {summary})")


def add_cmd(
    results: Annotated[Path, typer.Option("--results", help="results file (JSONL) holding the record")],
    trace_id: Annotated[str, typer.Option("--trace-id", help="trace id of the record")],
    golden: Annotated[
        Path, typer.Option("--golden", "--out", help="golden file the row is added to (created if missing)")
    ],
    relevant_chunk: Annotated[
        list[str] | None, typer.Option("--relevant-chunk", help="id of a relevant chunk (repeatable)")
    ] = None,
    reference_answer: Annotated[
        str, typer.Option("--reference-answer", help="the answer the service should have given")
    ] = "",
    unanswerable: Annotated[
        bool, typer.Option("--unanswerable", help="the corpus cannot answer it: a refusal is expected")
    ] = False,
    row_id: Annotated[str | None, typer.Option("--id", help="row id (default prod-<trace id>)")] = None,
    query_type: Annotated[
        str | None, typer.Option("--query-type", help="row query type (default the record's)")
    ] = None,
) -> None:
    """A production record as a golden row (`source: production`, the trace id and the day as
    provenance, what content controls did to its text), appended when the file with it validates.
    Exit 0 added, 2 bad input, a duplicate (same trace or query; the row is named) or a file that
    would not validate: nothing is written then."""
    from monitor.golden.production import ProductionRowError, add_production_row, find_record, production_row

    try:
        line = find_record(results, trace_id)
        row, notes = production_row(
            line,
            relevant_chunk_ids=relevant_chunk or [],
            reference_answer=reference_answer,
            answerable=not unanswerable,
            row_id=row_id,
            query_type=query_type,
        )
        check = add_production_row(golden, row)
    except ProductionRowError as exc:
        for issue in exc.errors:
            _err(str(issue))
        _err(str(exc))
        raise typer.Exit(2) from None
    # Chunk ids, row ids and the golden file's own text are from traffic: shown escaped.
    for note in notes:
        typer.echo(f"note: {terminal_line(note)}", err=True)
    for control in row.content_controls or ():
        typer.echo(f"content controls: {terminal_line(control)}", err=True)
    for warning in check.warnings:
        typer.echo(f"warning: {terminal_line(str(warning))}", err=True)
    typer.echo(
        f"row {terminal_line(repr(row.id))} (trace {row.trace_id}, source: production) added to {golden}: "
        f"{plural(len(check.rows), 'row')} OK"
    )


def trigger_cmd(
    sidecar: Annotated[
        list[str],
        typer.Option(
            "--sidecar",
            help="metrics URL of the sidecar, e.g. http://rag-monitor-judge:9612 (repeatable; every "
            "address a name resolves to is tried until the member that runs replays accepts)",
        ),
    ],
    change: Annotated[str, typer.Option("--change", help="KIND:REF, e.g. deploy:v1.2.3")],
    token_file: Annotated[
        Path | None, typer.Option("--token-file", help="file holding the bearer token")
    ] = None,
    token_env: Annotated[
        str, typer.Option("--token-env", help="else the environment variable holding it")
    ] = "RAGMON_GOLDEN_TRIGGER_TOKEN",
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds per request")] = 10.0,
) -> None:
    """Ask the sidecar for a golden replay now, for a change event (deploy, reindex, prompt, model,
    other). Exit 0 accepted, 1 not accepted (a replay is running, or no member runs replays), 2 bad
    input or refused (bad change, no token, 401/403)."""
    from monitor.golden.trigger import trigger_replay

    try:
        event = parse_change(change)
        if token_file is not None:
            token = token_file.read_text(encoding="utf-8").strip()
        else:
            token = os.environ.get(token_env, "").strip()
    except (OSError, ValueError) as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    if not token:
        _err(f"no token: pass --token-file or set {token_env}")
        raise typer.Exit(2)
    result = trigger_replay(sidecar, event, token, timeout=timeout)
    if result.exit_code:
        _err(result.message)
    else:
        typer.echo(result.message)
    raise typer.Exit(result.exit_code)


def synthesize_cmd(
    corpus: Annotated[
        Path, typer.Option("--corpus", help="corpus JSONL (rows of kind chunk: id, text, title)")
    ],
    target: Annotated[
        str, typer.Option("--target", help="http(s) URL of the RAG endpoint, or module:function")
    ],
    out: Annotated[Path, typer.Option("--out", help="where the kept rows go (JSONL)")],
    generator: Annotated[
        str, typer.Option("--generator", help="template (offline), anthropic or openai")
    ] = "template",
    config: Annotated[
        Path | None,
        typer.Option("--config", help="YAML as for replay: target, judge_options (the LLM's settings)"),
    ] = None,
    per_type: Annotated[
        int | None, typer.Option(min=1, help="rows wanted per query type (default 5)")
    ] = None,
    rows: Annotated[
        int | None, typer.Option(min=1, help="rows wanted in all, shared round-robin by the types")
    ] = None,
    types: Annotated[
        str | None,
        typer.Option(help="query types to write, comma-separated (default: all the generator can)"),
    ] = None,
    attempts: Annotated[
        int, typer.Option(min=1, help="generations per wanted row at most (bounds an LLM run's cost)")
    ] = 3,
    k: Annotated[int, typer.Option("--k", min=1, help="a source chunk must be in the target's top k")] = 5,
    existing: Annotated[
        Path | None, typer.Option(help="golden file whose questions count as duplicates")
    ] = None,
    seed: Annotated[int, typer.Option(help="the chunks' order and the templates' choices")] = 0,
    report: Annotated[Path | None, typer.Option(help="write the counts and every drop as JSON")] = None,
    max_usd: Annotated[
        float | None,
        typer.Option(min=0, help="LLM generator: go ahead only if the estimated cost is at most this (USD)"),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="LLM generator: go ahead whatever the estimate")] = False,
    concurrency: Annotated[int, typer.Option(min=1, help="target requests in flight")] = 8,
    overwrite: Annotated[bool, typer.Option(help="replace --out if it exists")] = False,
) -> None:
    """Golden rows generated from corpus chunks, kept only when the target retrieves their source
    chunks in its top k, deduplicated, spread over query types (with unanswerable ones), marked
    `source: synthetic` for human review.

    With an LLM generator the cost is estimated before any request: the run stops there (exit 2)
    unless the estimate is within --max-usd or --yes is given. Exit 0 rows written, 1 none kept
    (the drops say why), 2 bad input or cost refused (nothing written)."""
    from monitor.golden.synthesize import plan, quotas_for, synthesize

    if rows is not None and per_type is not None:
        _err("--rows and --per-type exclude each other")
        raise typer.Exit(2)
    if out.exists() and not overwrite:
        _err(f"{out} exists: pass --overwrite to replace it (reviewed rows would be lost)")
        raise typer.Exit(2)
    cfg = _load_config(config)
    read = _read_corpus(corpus)
    known = _known_rows(existing)
    gen = _make_generator(generator, read.chunks, cfg)
    quotas = quotas_for(_query_types(types, gen), per_type=per_type, rows=rows)
    tasks = plan(read.chunks, gen, quotas, attempts=attempts, seed=seed)
    est = gen.estimate([t for ts in tasks.values() for t in ts])
    tgt = _approved_target(est, gen, target, cfg, max_usd=max_usd, yes=yes, concurrency=concurrency)

    async def go() -> Any:
        try:
            return await synthesize(read.chunks, gen, tgt, tasks, quotas, k=k, existing=known)
        finally:
            await tgt.aclose()
            await gen.aclose()

    _finish_synthesis(asyncio.run(go()), read, gen, est, report=report, out=out)


def _read_corpus(corpus: Path) -> CorpusRead:
    """The corpus's chunks, its problems warned about; exit 2 when it cannot be read or holds none."""
    from monitor.golden.synthesize import read_corpus

    try:
        read = read_corpus(corpus)
    except OSError as exc:
        _err(f"cannot read corpus {corpus}: {exc.strerror or exc}")
        raise typer.Exit(2) from None
    for issue in read.issues[:10]:
        typer.echo(f"warning: {corpus}: {issue}", err=True)
    if read.skipped:
        skipped = ", ".join(f"{reason} {n}" for reason, n in sorted(read.skipped.items()))
        typer.echo(
            f"warning: {corpus}: {plural(sum(read.skipped.values()), 'line')} skipped ({skipped})", err=True
        )
    if not read.chunks:
        _err(f"{corpus}: no chunk rows")
        raise typer.Exit(2)
    return read


def _known_rows(existing: Path | None) -> list[Any]:
    """The rows of the `--existing` golden file (their questions count as duplicates); exit 2 when
    the file is not a valid golden set."""
    if existing is None:
        return []
    check = load_golden(existing)
    _print_check(check)
    if not check.ok:
        raise typer.Exit(2)
    return list(check.rows)


def _make_generator(kind: str, chunks: Sequence[SourceChunk], cfg: ReplayConfig) -> Generator:
    """The `--generator`, an LLM one set up from the config's judge_options; exit 2 when it cannot
    be made."""
    from monitor.golden.synthesize import LLM_GENERATORS, make_generator
    from monitor.judge import llm_judge_config

    try:
        llm = llm_judge_config(kind, cfg.judge_options) if kind in LLM_GENERATORS else None
        return make_generator(kind, chunks, llm)
    except (ValueError, ValidationError) as exc:
        _err(str(exc))
        raise typer.Exit(2) from None


def _query_types(types: str | None, gen: Generator) -> list[str]:
    """The `--types` asked for (default: all `gen` can write); exit 2, `gen` closed, for a type it
    cannot."""
    chosen = [t.strip() for t in types.split(",") if t.strip()] if types else list(gen.query_types)
    unknown = [t for t in chosen if t not in gen.query_types]
    if unknown or not chosen:
        _err(f"query types {unknown or chosen} not among {list(gen.query_types)} ({gen.name} generator)")
        asyncio.run(gen.aclose())
        raise typer.Exit(2)
    return chosen


def _approved_target(
    est: CostEstimate | None,
    gen: Generator,
    target: str,
    cfg: ReplayConfig,
    *,
    max_usd: float | None,
    yes: bool,
    concurrency: int,
) -> Target:
    """The target, once an LLM generator's estimated cost is accepted: before any request, so a
    refused run costs nothing; exit 2 (`gen` closed) when it is not, or the target is not one."""
    try:
        if est is not None:
            typer.echo(est.describe())
            approve_cost(est, max_usd=max_usd, yes=yes)
        return make_target(target, concurrency=concurrency, config=cfg.target)
    except (CostRefused, ValueError) as exc:
        _err(str(exc))
        _err("nothing sent, nothing written")
        asyncio.run(gen.aclose())
        raise typer.Exit(2) from None


def _finish_synthesis(
    result: SynthesisReport,
    read: CorpusRead,
    gen: Generator,
    est: CostEstimate | None,
    *,
    report: Path | None,
    out: Path,
) -> None:
    """Show what was kept and dropped (and the cost against its estimate), write the `--report`,
    then the rows; exit 1 when none was kept (nothing written to `out`)."""
    from monitor.golden.render import render_synthesis
    from monitor.golden.synthesize import write_rows

    console = Console(width=None if sys.stdout.isatty() else 160)
    render_synthesis(result, console)
    actual = gen.actual()
    if est is not None and actual is not None:
        result.cost = {"estimate": est.to_json_dict(), "actual": actual.to_json_dict()}
        console.print(est.versus(actual))
    if report is not None:
        _write_json(report, result.to_json_dict(read))
    if not result.rows:
        _err("no row kept: nothing written (see the drop reasons)")
        raise typer.Exit(1)
    write_rows(out, result.rows)
    console.print(
        f"{plural(len(result.rows), 'row')} written to {out} (source: synthetic): review them before use"
    )


def register(app: typer.Typer) -> None:
    """Add `replay` and the `golden` sub-app (`golden validate`, `golden add`, `golden trigger`,
    `golden synthesize`) to the `rag-monitor` app."""
    app.command("replay")(replay)
    golden_app = typer.Typer(no_args_is_help=True, help="Golden-set tools.")
    golden_app.command("validate")(validate_cmd)
    golden_app.command("add")(add_cmd)
    golden_app.command("trigger")(trigger_cmd)
    golden_app.command("synthesize")(synthesize_cmd)
    app.add_typer(golden_app, name="golden")
