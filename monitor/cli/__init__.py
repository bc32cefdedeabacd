"""The `rag-monitor` command line: parses flags, loads settings and wires the stages; no logic."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from monitor.app.config import Role, Settings
from monitor.cli.settings import load_or_exit
from monitor.kafka.config import Encoding
from monitor.plumbing.errors import plural
from monitor.plumbing.safe_text import log_text

JudgeBackend = Literal["lexical", "anthropic", "openai", "none"]
DemoSource = Literal["auto", "service", "synthetic"]

# Seconds past `pipeline.shutdown_seconds` after which a process that has not exited is ended.
_EXIT_MARGIN = 2.0

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Online quality monitor for RAG services.")


# Their request lines and debug dumps carry whole URLs (a webhook's secret path, user:password@),
# query strings and headers: at WARNING whatever the level asked for.
_QUIET = ("httpx", "httpcore", "anthropic", "openai")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_OneLineFilter())


class _OneLineFilter(logging.Filter):
    """Every message one line, its controls escaped (`monitor.plumbing.safe_text.log_text`): text from
    traffic in a message (a release, a chunk id, an exception's text) can neither forge log lines
    nor drive the terminal that tails them. Tracebacks stay as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        clean = log_text(text)
        if clean != text:
            record.msg, record.args = clean, None
        return True


class _SecretFilter(logging.Filter):
    """Blanks the configured secrets (`Settings.secrets`) in every record a handler writes,
    whatever logger made it and at whatever level: the last line of defence, after `_QUIET`."""

    def __init__(self, secrets: set[str]) -> None:
        super().__init__()
        self._secrets = sorted(secrets, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        clean = text
        for s in self._secrets:
            clean = clean.replace(s, "***")
        if record.exc_text:
            for s in self._secrets:
                record.exc_text = record.exc_text.replace(s, "***")
        if clean != text:
            record.msg, record.args = clean, None
        return True


def _redact_logs(settings: Settings) -> None:
    secrets = settings.secrets()
    if secrets:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_SecretFilter(secrets))


def _install_stop(stop: asyncio.Event, deadline_seconds: float | None = None) -> None:
    """SIGTERM and SIGINT set `stop`. With `deadline_seconds`, the process is also ended that
    long after the first signal, whatever it is doing: a thread's timer, which a loop blocked
    or a clean-up hung on a silent broker cannot hold up (unacknowledged input is re-read, as
    after a kill)."""
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if deadline_seconds is not None and not stop.is_set():
            timer = threading.Timer(deadline_seconds, _hard_exit, (deadline_seconds,))
            timer.daemon = True
            timer.start()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)


def _hard_exit(seconds: float) -> None:
    logging.getLogger("monitor").error(
        "shutdown overran its deadline (%.0fs): exiting now; unacknowledged input is re-read", seconds
    )
    logging.shutdown()
    os._exit(1)


@app.command()
def run(
    config: Annotated[Path | None, typer.Option("--config", help="YAML config file")] = None,
    role: Annotated[
        Role | None, typer.Option(help="all: every stage here; ingest, judge or drift: one, scaled alone")
    ] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka bootstrap servers")] = None,
    topic: Annotated[str | None, typer.Option(help="input topic of OTLP spans")] = None,
    group_id: Annotated[str | None, typer.Option(help="consumer group of the ingest stage")] = None,
    encoding: Annotated[Encoding | None, typer.Option(help="wire format of the input topic")] = None,
    sample_rate: Annotated[
        float | None, typer.Option(help="share of records judged and written, 0..1")
    ] = None,
    metrics_port: Annotated[int | None, typer.Option(help="Prometheus /metrics port (0 = any free)")] = None,
    results_topic: Annotated[str | None, typer.Option(help="Kafka topic for results")] = None,
    results_file: Annotated[Path | None, typer.Option(help="JSONL file for results")] = None,
    dead_letter_topic: Annotated[str | None, typer.Option(help="topic for raw rejected messages")] = None,
    judge: Annotated[JudgeBackend | None, typer.Option(help="judge backend (default lexical)")] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING")] = "INFO",
) -> None:
    """The sidecar: ingest spans and sample them (ingest stage), judge the samples and write
    results (judge stage), detect drift on the results and alert (drift stage); metrics on
    /metrics. SIGTERM drains and exits 0."""
    _setup_logging(log_level)
    settings = load_or_exit(
        config,
        {
            "kafka": {
                "bootstrap_servers": bootstrap_servers,
                "topic": topic,
                "group_id": group_id,
                "encoding": encoding,
                "dead_letter_topic": dead_letter_topic,
            },
            "sampling": {"rate": sample_rate},
            "judge": {"backend": judge},
            "metrics": {"port": metrics_port},
            "results": {"topic": results_topic, "file": results_file},
            "pipeline": {"role": role},
        },
    )
    _redact_logs(settings)
    try:
        asyncio.run(_run(settings))
    except (OSError, ValueError) as exc:
        # A judge or an output that cannot start: no API key, an unreadable key or results file...
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


async def _run(settings: Settings) -> None:
    from monitor.app.sidecar import Sidecar
    from monitor.outputs.http import MetricsServer

    stop = asyncio.Event()
    _install_stop(stop, settings.pipeline.shutdown_seconds + _EXIT_MARGIN)
    sidecar = Sidecar(settings)
    server = MetricsServer(
        sidecar.metrics.registry,
        settings.metrics.host,
        settings.metrics.port,
        sidecar.readiness,
        routes=sidecar.http_routes(),
        liveness=sidecar.liveness,
        timeout_seconds=settings.metrics.timeout_seconds,
        workers=settings.metrics.workers,
        max_connections=settings.metrics.max_connections,
    )
    try:
        server.start()
    except OSError as exc:
        typer.echo(f"error: cannot serve metrics on port {settings.metrics.port}: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        await sidecar.run(stop)
    finally:
        server.stop()


@app.command()
def calibrate(
    labels: Annotated[Path, typer.Option("--labels", help="JSONL of human-labelled records")],
    config: Annotated[Path | None, typer.Option("--config", help="YAML config (judge section)")] = None,
    judge: Annotated[JudgeBackend | None, typer.Option(help="judge backend (default lexical)")] = None,
    report: Annotated[Path | None, typer.Option(help="write the report as JSON")] = None,
    metrics_file: Annotated[
        Path | None,
        typer.Option(
            help="write ragmon_judge_agreement_kappa, ragmon_judge_labels and "
            "ragmon_judge_last_review_timestamp_seconds for node_exporter's textfile collector"
        ),
    ] = None,
    resamples: Annotated[
        int, typer.Option(min=0, help="bootstrap resamples of the kappa intervals (0: none)")
    ] = 2000,
    seed: Annotated[int, typer.Option(help="bootstrap seed: the same labels give the same intervals")] = 0,
    all_labels: Annotated[
        bool,
        typer.Option(
            "--all-labels",
            help="labels from the review queue: use every one, unweighted (biased towards hard cases), "
            "not only the uniform share, weighted",
        ),
    ] = False,
) -> None:
    """Judge against human labels: agreement, Cohen's kappa with its 95% bootstrap interval (over
    records) and the confusion matrix per check, overall and per query type. Labels from the review
    queue (lines with its `review` object): kappa on its uniform share, weighted, by default.
    Exit 0 when every kappa with enough labels is >= 0.6, 1 when the judge is not reliable, 2 on
    bad input, 3 when no check has enough labels for a verdict (50, as the alert)."""
    from prometheus_client import write_to_textfile

    from monitor.ingest.decode import flat_record
    from monitor.judge import create_judge
    from monitor.judge.calibrate import (
        CalibrationGauges,
        format_report,
        last_review,
        load_labels,
        run_calibration,
        select_labels,
    )

    _setup_logging("WARNING")
    settings = load_or_exit(config, {"judge": {"backend": judge}})
    backend = settings.judge.backend
    if backend == "none":
        typer.echo("error: calibrate needs a judge backend", err=True)
        raise typer.Exit(2)
    try:
        items = load_labels(labels, flat_record)
        reviewed_at = last_review(labels, items)
        items, selection = select_labels(items, include_all=all_labels)
        if not items and selection is not None:
            raise ValueError(
                f"{labels}: no label of the review queue's uniform share ({selection.hard} hard-case labels,"
                f" {selection.unmarked} without a review object); --all-labels calibrates on them, biased"
            )
        j = create_judge(backend, settings.judge.options)
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None

    async def go() -> Any:
        try:
            result, _ = await run_calibration(
                j, items, concurrency=settings.judge.workers, resamples=resamples, seed=seed
            )
            result.selection = selection
            return result
        finally:
            await j.aclose()

    result = asyncio.run(go())
    typer.echo(format_report(result))
    if report is not None:
        report.write_text(json.dumps(result.to_json_dict(), indent=2))
    if metrics_file is not None:
        gauges = CalibrationGauges()
        gauges.set(result, backend, reviewed_at)
        write_to_textfile(str(metrics_file), gauges.registry)
    if result.warning:
        typer.echo("WARNING: the judge is not reliable on at least one check (kappa < 0.6)", err=True)
        raise typer.Exit(1)
    if result.no_verdict:
        most = max((r.records for r in result.checks.values()), default=0)
        typer.echo(
            f"too few labels: no check has the {result.min_labels} labelled records of both classes a"
            f" verdict needs (at most {plural(most, 'record')} on a check); label more",
            err=True,
        )
        raise typer.Exit(3)


@app.command()
def demo(
    duration: Annotated[float | None, typer.Option(help="seconds to run; default until Ctrl-C")] = None,
    rate: Annotated[float, typer.Option(help="synthetic RAG requests per second")] = 40.0,
    metrics_port: Annotated[int, typer.Option(help="Prometheus /metrics port")] = 9612,
    results_file: Annotated[
        Path, typer.Option(help="JSONL results of this run (a previous run's moved to NAME.previous.jsonl)")
    ] = Path(".demo/results.jsonl"),
    bad_every: Annotated[int, typer.Option(help="one malformed message per N requests (0 = none)")] = 200,
    seed: Annotated[int, typer.Option(help="workload seed")] = 7,
    source: Annotated[
        DemoSource, typer.Option(help="traffic: the example RAG service over HTTP, or spans written directly")
    ] = "auto",
    degrade_at: Annotated[
        float,
        typer.Option(help="seconds until the demo rolls out the example service's faulty release (0: never)"),
    ] = 20.0,
    degrade_for: Annotated[float, typer.Option(help="seconds until it is rolled back")] = 12.0,
    degrade_invent_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="share of the new release's answers with an invented fact")
    ] = 0.8,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING")] = "WARNING",
) -> None:
    """Everything on one machine: embedded broker, the example RAG service (a faulty release rolled
    out part-way through, then rolled back), the sidecar, alerts to a local webhook, a live view."""
    from monitor.demo.scene import SceneConfig
    from monitor.demo.session import DemoOptions, run_demo

    _setup_logging(log_level)
    scene = SceneConfig(degrade_at, degrade_for, degrade_invent_rate) if degrade_at > 0 else None
    opts = DemoOptions(duration, rate, metrics_port, results_file, bad_every, seed, source, scene=scene)
    asyncio.run(run_demo(opts))


@app.command()
def broker(
    port: Annotated[int, typer.Option(help="port to listen on (loopback)")] = 9092,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
) -> None:
    """Run the embedded Kafka-compatible broker (tansu, memory storage) in the foreground."""
    from monitor.demo.broker import EmbeddedBroker

    b = EmbeddedBroker(port=port, host=host).start()
    typer.echo(f"broker ready on {b.bootstrap_servers} (memory storage; Ctrl-C stops it)")
    try:
        b.wait()
    except KeyboardInterrupt:
        pass
    finally:
        b.stop()


config_app = typer.Typer(no_args_is_help=True, help="The configuration the sidecar would run with.")
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(
    config: Annotated[Path | None, typer.Option("--config", help="YAML config file")] = None,
    requests_per_second: Annotated[
        float | None,
        typer.Option(
            min=0.0, help="requests a second of a query type: also how long its drift slices take to arm"
        ),
    ] = None,
) -> None:
    """The effective configuration (the file, then RAGMON_ environment variables) as YAML, secrets
    redacted, then (as YAML comments) how many requests a drift slice takes to arm. An invalid one
    exits 2 with the errors `run` would give."""
    import textwrap

    import yaml

    from monitor.drift.arming import expected_arming

    settings = load_or_exit(config, {})
    typer.echo(yaml.safe_dump(settings.redacted(), sort_keys=False), nl=False)
    if not settings.results.topic:
        return  # no results topic: no drift stage
    s, drift = settings.sampling, settings.alerts.drift
    note = expected_arming(
        drift.reference_records,
        s.rate,
        s.rates,
        s.min_per_window,
        s.window_seconds,
        requests_per_second,
        pinned=drift.baseline_file is not None,
    )
    for line in note:
        typer.echo("\n".join(textwrap.wrap(line, 100, initial_indent="# ", subsequent_indent="#   ")))


def _register_subcommands() -> None:
    from monitor.cli import compare, review
    from monitor.cli.drift import baseline_app
    from monitor.cli.golden import register

    register(app)
    compare.register(app)
    review.register(app)
    app.add_typer(baseline_app, name="baseline")


_register_subcommands()
