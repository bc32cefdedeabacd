"""`rag-monitor demo`: the whole product on one machine, with no external service.

An embedded broker, a synthetic RAG workload written as OTLP protobuf (what the Collector's
kafkaexporter writes), the sidecar consuming it, `/metrics` served, and a live terminal view read
from the same Prometheus registry that a scrape sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from monitor.config import Settings, load_settings
from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.demo.workload import WorkloadConfig, iter_workload, produce
from monitor.kafka.client import ensure_topics
from monitor.outputs.http import MetricsServer
from monitor.run import Sidecar

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DemoOptions:
    duration: float | None  # seconds; None = until Ctrl-C
    rate: float  # traces per second
    metrics_port: int
    results_file: Path
    bad_every: int  # one malformed message per this many traces (0 = none)
    seed: int
    source: str = "auto"  # "service": the example RAG service over HTTP; "synthetic": spans written directly
    invent_rate: float = 0.15  # the example service's share of answers with an invented fact


_JUDGED = {
    "ragmon_claims_total": "claims",
    "ragmon_claims_supported_total": "supported",
    "ragmon_unanswerable_total": "unanswerable",
    "ragmon_unanswerable_hallucinated_total": "hallucinated",
    "ragmon_refusals_total": "refusals",
}


def _summary(
    registry: CollectorRegistry,
) -> tuple[dict[str, dict[str, float]], dict[str, float], dict[str, float]]:
    """Per query type, rejected reasons, and process gauges, straight from the registry."""
    per_type: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    rejected: dict[str, float] = {}
    gauges: dict[str, float] = defaultdict(float)
    for family in registry.collect():
        for s in family.samples:
            qt = s.labels.get("query_type")
            if s.name == "ragmon_records_total" and qt:
                per_type[qt]["records"] += s.value
            elif s.name == "ragmon_retrieved_chunks_sum" and qt:
                per_type[qt]["chunks_sum"] += s.value
            elif s.name == "ragmon_retrieval_top_score_sum" and qt:
                per_type[qt]["top_sum"] += s.value
            elif s.name == "ragmon_retrieval_top_score_count" and qt:
                per_type[qt]["top_n"] += s.value
            elif qt and s.name == "ragmon_judged_total" and s.labels.get("check") == "unanswerable":
                per_type[qt]["judged"] += s.value  # every successful judgement has this check
            elif qt and s.name in _JUDGED:
                per_type[qt][_JUDGED[s.name]] += s.value
            elif s.name == "ragmon_rejected_total" and s.value:
                rejected[s.labels["reason"]] = s.value
            elif s.name in (
                "ragmon_open_traces",
                "ragmon_consumer_lag_messages",
                "ragmon_inflight_judgements",
            ):
                gauges[s.name] += s.value
            elif s.name == "ragmon_record_lag_seconds_sum":
                gauges["lag_sum"] = s.value
            elif s.name == "ragmon_record_lag_seconds_count":
                gauges["lag_n"] = s.value
    return per_type, rejected, gauges


def _render(registry: CollectorRegistry, produced: int, started: float, opts: DemoOptions, url: str) -> Group:
    per_type, rejected, gauges = _summary(registry)
    table = Table(
        title="RAG records by query type — retrieval (left) and generation, judged offline (right)",
        expand=False,
    )
    columns = (
        "type",
        "records",
        "chunks",
        "top score",
        "judged",
        "faithful",
        "unansw.",
        "halluc.",
        "refusals",
    )
    for col in columns:
        table.add_column(col, justify="right" if col != "type" else "left", no_wrap=True)
    total = 0.0
    for qt in sorted(per_type):
        row = per_type[qt]
        n = row["records"]
        total += n
        table.add_row(
            qt,
            f"{n:.0f}",
            f"{row['chunks_sum'] / n:.1f}" if n else "-",
            f"{row['top_sum'] / row['top_n']:.2f}" if row["top_n"] else "-",
            f"{row['judged']:.0f}",
            f"{row['supported'] / row['claims']:.1%}" if row["claims"] else "-",
            f"{row['unanswerable']:.0f}",
            f"{row['hallucinated']:.0f}",
            f"{row['refusals']:.0f}",
        )
    elapsed = time.monotonic() - started
    lag = gauges["lag_sum"] / gauges["lag_n"] if gauges.get("lag_n") else 0.0
    status = Text.assemble(
        ("traces produced ", "dim"),
        f"{produced}",
        ("   records ", "dim"),
        f"{total:.0f}",
        ("   open traces ", "dim"),
        f"{gauges['ragmon_open_traces']:.0f}",
        ("   consumer lag ", "dim"),
        f"{gauges['ragmon_consumer_lag_messages']:.0f}",
        ("   mean record lag ", "dim"),
        f"{lag:.2f}s",
        ("   elapsed ", "dim"),
        f"{elapsed:.0f}s",
    )
    rej = Text(
        "rejected: " + (", ".join(f"{k}={v:.0f}" for k, v in sorted(rejected.items())) or "none"), "yellow"
    )
    foot = Text(f"metrics: {url}    results: {opts.results_file}    Ctrl-C stops", "dim")
    return Group(table, status, rej, foot)


async def _producer(
    bootstrap: str, topic: str, opts: DemoOptions, counter: list[int], stop: asyncio.Event
) -> None:
    """Traffic at the requested rate through one producer, with an occasional malformed message."""
    rng = random.Random(opts.seed)

    def stream() -> Iterator[tuple[bytes | None, bytes]]:
        for truths, messages in iter_workload(
            10**9, seed=opts.seed, batch=1, config=WorkloadConfig(rps=opts.rate)
        ):
            if stop.is_set():
                return
            counter[0] += len(truths)
            for m in messages:
                yield m.key, m.value
            if opts.bad_every and rng.random() < 1 / opts.bad_every:
                yield None, os.urandom(rng.randint(10, 300))

    await produce(bootstrap, topic, stream(), rate=opts.rate)


def _example_service_dir() -> Path | None:
    """The checkout's `examples/` (not installed with the package): `make demo` runs from it."""
    here = Path.cwd()
    return here if (here / "examples" / "rag_service" / "app.py").exists() else None


async def _service_traffic(
    bootstrap: str, topic: str, opts: DemoOptions, counter: list[int], stop: asyncio.Event, root: Path
) -> None:
    """Start the instrumented example service (spans → Kafka) and query it at the requested rate
    with the corpus questions, every query type included; malformed messages go straight to Kafka."""
    import httpx

    from monitor.demo.workload import load_corpus

    port = free_port()
    log_path = opts.results_file.parent / "example-service.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "examples.rag_service", "--port", str(port), "--kafka", bootstrap,
        "--topic", topic, "--invent-rate", str(opts.invent_rate), "--flush-interval-ms", "200",
    ]  # fmt: skip
    with log_path.open("ab") as log_file:
        proc = await asyncio.create_subprocess_exec(*cmd, cwd=root, stdout=log_file, stderr=log_file)
    url = f"http://127.0.0.1:{port}"
    questions = list(load_corpus().questions)
    rng = random.Random(opts.seed)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
            for _ in range(300):  # wait for the service: BM25 index and uvicorn start
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.returncode is not None:
                    raise RuntimeError(f"example service exited; see {log_path}")
                await asyncio.sleep(0.1)
            junk: list[tuple[bytes | None, bytes]] = []
            t0 = time.monotonic()
            while not stop.is_set():
                q = rng.choice(questions)
                body = {"query": q.query, "query_type": q.query_type}
                with contextlib.suppress(httpx.HTTPError):
                    await client.post("/query", json=body)
                    counter[0] += 1
                if opts.bad_every and rng.random() < 1 / opts.bad_every:
                    junk.append((None, os.urandom(rng.randint(10, 300))))
                    await produce(bootstrap, topic, junk)
                    junk.clear()
                delay = t0 + counter[0] / opts.rate - time.monotonic()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await stop.wait()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)  # flushes its queued spans, then exits
            try:
                async with asyncio.timeout(15):
                    await proc.wait()
            except TimeoutError:
                proc.kill()


async def run_demo(opts: DemoOptions, console: Console | None = None) -> Settings:
    console = console or Console()
    with EmbeddedBroker() as broker:
        settings = load_settings(
            None,
            {
                "kafka": {
                    "bootstrap_servers": broker.bootstrap_servers,
                    "commit_interval_seconds": 1.0,
                    # The embedded broker starts empty: reading from the start misses no request
                    # sent while the group joins.
                    "auto_offset_reset": "earliest",
                },
                "assembly": {"grace_seconds": 0.5},
                "sampling": {"rate": 1.0},
                "metrics": {"host": "127.0.0.1", "port": opts.metrics_port},
                "results": {"file": str(opts.results_file)},
            },
        )
        await ensure_topics(settings.kafka, [settings.kafka.topic], partitions=3)
        sidecar = Sidecar(settings)
        server = MetricsServer(
            sidecar.metrics.registry, settings.metrics.host, settings.metrics.port, sidecar.readiness
        )
        try:
            port = server.start()
        except OSError:
            port = MetricsServer(sidecar.metrics.registry, settings.metrics.host, free_port()).start()
        url = f"http://127.0.0.1:{port}/metrics"
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        produced = [0]
        sidecar_stop = asyncio.Event()
        side_task = asyncio.create_task(sidecar.run(sidecar_stop))
        # Joining the group takes a few seconds; traffic sent before that would show as lag.
        with (
            console.status("starting: sidecar joining the consumer group…"),
            contextlib.suppress(TimeoutError),
        ):
            async with asyncio.timeout(60):
                await sidecar.wait_assigned()
        started = time.monotonic()
        root = _example_service_dir() if opts.source in ("auto", "service") else None
        if opts.source == "service" and root is None:
            raise RuntimeError("--source service needs the checkout's examples/ in the working directory")
        traffic = (
            _service_traffic(broker.bootstrap_servers, settings.kafka.topic, opts, produced, stop, root)
            if root is not None
            else _producer(broker.bootstrap_servers, settings.kafka.topic, opts, produced, stop)
        )
        prod_task = asyncio.create_task(traffic)
        try:
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                while not stop.is_set():
                    if opts.duration is not None and time.monotonic() - started >= opts.duration:
                        stop.set()
                    if prod_task.done() or side_task.done():
                        stop.set()
                    live.update(_render(sidecar.metrics.registry, produced[0], started, opts, url))
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.5):
                            await stop.wait()
                await prod_task
                await asyncio.sleep(settings.assembly.grace_seconds + 0.5)  # let the last traces land
                sidecar_stop.set()
                await side_task
                live.update(_render(sidecar.metrics.registry, produced[0], started, opts, url))
        finally:
            server.stop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        per_type, _, _ = _summary(sidecar.metrics.registry)
        records = sum(r["records"] for r in per_type.values())
        console.print()
        console.print(
            f"demo done: {produced[0]} traces produced, {records:.0f} records, results in {opts.results_file}"
        )
        return settings
