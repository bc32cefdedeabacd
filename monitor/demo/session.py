"""`rag-monitor demo`: the whole product on one machine, with no external service.

An embedded broker, the instrumented example RAG service (or, outside a checkout, a synthetic
workload written as OTLP protobuf, what the Collector's kafkaexporter writes), the sidecar
consuming it, `/metrics` served, alerts sent to a local webhook, and a live terminal view read
from the same Prometheus registry that a scrape sees. With the example service, the demo stages
an incident that is a release (`monitor.demo.scene`): a second instance of the service, a new
`service.version` whose answers gain invented facts, takes the traffic, then gives it back, so
the view shows drift detected, attributed to that release, alerted and resolved.
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
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.live import Live

from monitor.app.config import Settings, load_settings
from monitor.app.sidecar import Sidecar
from monitor.demo.broker import EmbeddedBroker, die_with_parent, free_port
from monitor.demo.scene import Deploy, Scene, SceneConfig
from monitor.demo.sink import ReceivedAlert, WebhookReceiver
from monitor.demo.view import ViewContext, render, summary
from monitor.demo.workload import (
    QUERY_TYPES,
    CorpusQuestion,
    WorkloadConfig,
    iter_workload,
    load_corpus,
    produce,
)
from monitor.drift import DriftPolicy
from monitor.kafka.client import ensure_topics
from monitor.outputs.http import MetricsServer

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
    # The serving release's share of answers with an invented fact (the new release's is the
    # scene's): healthy, so that what the detectors take as the reference is the service working.
    invent_rate: float = 0.0
    scene: SceneConfig | None = field(default_factory=SceneConfig)  # None: no incident


async def _producer(
    bootstrap: str, topic: str, opts: DemoOptions, counter: list[int], stop: asyncio.Event
) -> None:
    """Traffic at the requested rate through one producer, with an occasional malformed message."""
    rng = random.Random(opts.seed)

    release = (opts.scene or SceneConfig()).stable_release
    config = WorkloadConfig(rps=opts.rate, service_version=release)

    def stream() -> Iterator[tuple[bytes | None, bytes]]:
        for truths, messages in iter_workload(10**9, seed=opts.seed, batch=1, config=config):
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


@contextlib.asynccontextmanager
async def _example_service(
    bootstrap: str, topic: str, opts: DemoOptions, root: Path, release: str, invent_rate: float
) -> AsyncIterator[str]:
    """One release of the instrumented example service (spans → Kafka, resource `service.version`
    = `release`) as a subprocess; its URL once it answers."""
    import httpx

    port = free_port()
    log_path = opts.results_file.parent / f"example-service-{release}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "examples.rag_service", "--port", str(port), "--kafka", bootstrap,
        "--topic", topic, "--invent-rate", str(invent_rate), "--flush-interval-ms", "200",
        "--service-version", release,
    ]  # fmt: skip
    with log_path.open("ab") as log_file:
        # Its own process group: the terminal's Ctrl-C reaches the demo only, which stops the
        # sidecar first, then this service, then the broker (see `run_demo`).
        proc = await asyncio.create_subprocess_exec(
            *cmd, cwd=root, stdout=log_file, stderr=log_file, process_group=0, preexec_fn=die_with_parent()
        )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=2.0) as client:
            for _ in range(600):  # the BM25 index and uvicorn start
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get("/healthz")).status_code == 200:
                        break
                if proc.returncode is not None:
                    raise RuntimeError(f"example service exited; see {log_path}")
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError(f"example service did not answer in 60s; see {log_path}")
        yield url
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)  # flushes its queued spans, then exits
            try:
                async with asyncio.timeout(15):
                    await proc.wait()
            except TimeoutError:
                proc.kill()


def _rounds(seed: int) -> Iterator[CorpusQuestion]:
    """Corpus questions in rounds of one per query type (types in shuffled order), each type's
    questions dealt from its own shuffled deck. Every slice gets the same share of traffic and
    sees its questions evenly, so the 50 records a demo reference takes are the slice's steady
    state rather than a lucky draw (random picks make refusal and relevance references noisy
    enough to raise false alarms on that few records)."""
    rng = random.Random(seed)
    by_type: dict[str, list[CorpusQuestion]] = defaultdict(list)
    for q in load_corpus().questions:
        by_type[q.query_type].append(q)
    decks: dict[str, list[CorpusQuestion]] = {qt: [] for qt in by_type}
    types = sorted(by_type)
    while True:
        rng.shuffle(types)
        for qt in types:
            if not decks[qt]:
                decks[qt] = by_type[qt][:]
                rng.shuffle(decks[qt])
            yield decks[qt].pop()


@dataclass(slots=True)
class Releases:
    """The example service's running releases (name → URL) and the one taking the traffic: the
    demo's load balancer, and the scene's lever (`deploy`)."""

    urls: dict[str, str]
    live: str

    async def deploy(self, release: str) -> None:
        self.live = release


async def _query_service(
    releases: Releases, bootstrap: str, topic: str, opts: DemoOptions, counter: list[int], stop: asyncio.Event
) -> None:
    """Query the live release of the example service at the requested rate, every query type
    included; malformed messages go straight to Kafka."""
    import httpx

    rng = random.Random(opts.seed)
    questions = _rounds(opts.seed)
    async with httpx.AsyncClient(timeout=10.0) as client:
        t0 = time.monotonic()
        while not stop.is_set():
            q = next(questions)
            url = releases.urls[releases.live]
            with contextlib.suppress(httpx.HTTPError):
                await client.post(f"{url}/query", json={"query": q.query, "query_type": q.query_type})
                counter[0] += 1
            if opts.bad_every and rng.random() < 1 / opts.bad_every:
                await produce(bootstrap, topic, [(None, os.urandom(rng.randint(10, 300)))])
            delay = t0 + counter[0] / opts.rate - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop.wait()


def demo_overrides(
    bootstrap: str, opts: DemoOptions, webhook_url: str, scene: bool
) -> tuple[dict[str, Any], str]:
    """The sidecar's configuration for the demo, and the demo-only part of it said in one line.

    Drift, only when the scene runs (without it, the defaults: nothing is watched within a short
    demo, and nothing raises a false alarm on a reference of few records): references of 50 judged
    records (the least `alerts.drift` allows; default 500) and alarms from 10 records after
    (default 50), so a slice is watched within seconds; hallucination watched for shifts of 0.25
    (default 0.05) — the scene's fault is far larger, and the smaller the effect, the more clean
    records an alarm needs to clear (1.75h over ln((1-p1)/(1-p0)): about 300 a slice at the
    default, minutes of demo traffic; about 55 at 0.25)."""
    policy = DriftPolicy()
    min_effect = {**policy.min_effect, "hallucination": 0.25}
    overrides: dict[str, Any] = {
        "kafka": {
            "bootstrap_servers": bootstrap,
            "commit_interval_seconds": 1.0,
            # The embedded broker starts empty: reading from the start misses no request
            # sent while the group joins.
            "auto_offset_reset": "earliest",
        },
        "assembly": {"grace_seconds": 0.5},
        "sampling": {"rate": 1.0},
        "metrics": {"host": "127.0.0.1", "port": opts.metrics_port},
        "results": {"file": str(opts.results_file)},
        "alerts": {"webhook_url": webhook_url},
    }
    if not scene:
        return overrides, "demo settings (not the defaults): every record judged; drift on its defaults"
    overrides["alerts"]["drift"] = {"reference_records": 50, "min_records": 10, "min_effect": min_effect}
    note = (
        "demo settings (not the defaults): every record judged; drift reference = a slice's first 50 "
        f"judged records (default {policy.reference_records}), alarms from 10 more (default "
        f"{policy.min_records}), hallucination min effect 0.25 "
        f"(default {policy.min_effect['hallucination']:g})"
    )
    return overrides, note


def fresh_results_file(path: Path) -> Path | None:
    """Start the run's results file empty: a previous run's is moved aside to
    `<name>.previous<suffix>` (replacing the one before), so that `compare` and `review` on the
    file read this run only, and the last run is still at hand. The moved file's path, if any."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    previous = path.with_name(f"{path.stem}.previous{path.suffix}")
    path.replace(previous)
    return previous


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What the demo showed, for callers that check it (the tests)."""

    settings: Settings
    registry: CollectorRegistry
    produced: int
    alerts: list[ReceivedAlert]
    scene: Scene | None


async def run_demo(opts: DemoOptions, console: Console | None = None) -> DemoResult:
    console = console or Console()
    previous = fresh_results_file(opts.results_file)
    if previous is not None:
        console.print(f"the previous run's results: {previous}")
    receiver = WebhookReceiver()
    webhook_url = await receiver.start()
    try:
        with EmbeddedBroker() as broker:
            return await _run(opts, console, broker, receiver, webhook_url)
    finally:
        await receiver.stop()


async def _run(
    opts: DemoOptions, console: Console, broker: EmbeddedBroker, receiver: WebhookReceiver, webhook_url: str
) -> DemoResult:
    root = _example_service_dir() if opts.source in ("auto", "service") else None
    if opts.source == "service" and root is None:
        raise RuntimeError("--source service needs the checkout's examples/ in the working directory")
    with_scene = root is not None and opts.scene is not None
    overrides, note = demo_overrides(broker.bootstrap_servers, opts, webhook_url, with_scene)
    settings = load_settings(None, overrides)
    topic = settings.kafka.topic
    await ensure_topics(settings.kafka, [topic], partitions=3)
    sidecar = Sidecar(settings)
    registry = sidecar.metrics.registry
    server = MetricsServer(registry, settings.metrics.host, settings.metrics.port, sidecar.readiness)
    try:
        port = server.start()
    except OSError:
        server = MetricsServer(registry, settings.metrics.host, free_port(), sidecar.readiness)
        port = server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    produced = [0]
    sidecar_stop = asyncio.Event()
    side_task = asyncio.create_task(sidecar.run(sidecar_stop))
    scene: Scene | None = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            with console.status("starting: the example service, the sidecar joining its consumer groups…"):
                releases = None
                if root is not None:
                    # The release serving, and (with the scene) the new one waiting to take over.
                    cfg = opts.scene or SceneConfig()
                    wanted = {cfg.stable_release: opts.invent_rate}
                    if with_scene:
                        wanted[cfg.new_release] = cfg.invent_rate
                    bs = broker.bootstrap_servers
                    urls = await asyncio.gather(
                        *(
                            stack.enter_async_context(_example_service(bs, topic, opts, root, name, rate))
                            for name, rate in wanted.items()
                        )
                    )
                    releases = Releases(dict(zip(wanted, urls, strict=True)), cfg.stable_release)
                # Joining the group takes a few seconds; traffic sent before that would show as lag.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(60):
                        await sidecar.wait_assigned()
            started = time.monotonic()
            tasks: list[asyncio.Task[None]] = []
            if releases is not None:
                tasks.append(
                    asyncio.create_task(
                        _query_service(releases, broker.bootstrap_servers, topic, opts, produced, stop)
                    )
                )
                if opts.scene is not None:
                    scene = Scene(opts.scene, registry, receiver)
                    scene.started = started
                    deploy: Deploy = releases.deploy
                    tasks.append(asyncio.create_task(scene.run(deploy, QUERY_TYPES, stop)))
            else:
                tasks.append(
                    asyncio.create_task(_producer(broker.bootstrap_servers, topic, opts, produced, stop))
                )
            ctx = ViewContext(f"http://127.0.0.1:{port}/metrics", opts.results_file, note, scene, receiver)
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                while not stop.is_set():
                    if opts.duration is not None and time.monotonic() - started >= opts.duration:
                        stop.set()
                    if side_task.done() or any(t.done() and t.exception() for t in tasks):
                        stop.set()
                    live.update(render(registry, produced[0], started, ctx))
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.5):
                            await stop.wait()
                for task in tasks:
                    await task
                await asyncio.sleep(settings.assembly.grace_seconds + 0.5)  # let the last traces land
                sidecar_stop.set()
                await side_task
                live.update(render(registry, produced[0], started, ctx))
    finally:
        sidecar_stop.set()
        if not side_task.done():
            side_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await side_task
        server.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    per_type, _, _ = summary(registry)
    records = sum(r["records"] for r in per_type.values())
    console.print()
    console.print(
        f"demo done: {produced[0]} traces produced, {records:.0f} records, results in {opts.results_file}"
    )
    return DemoResult(settings, registry, produced[0], list(receiver.received), scene)
