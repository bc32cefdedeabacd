"""Helpers for tests that run the sidecar against the real embedded broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from monitor.app.config import Settings, load_settings
from monitor.app.sidecar import Sidecar, build_judge
from monitor.contracts.model import Judgement, RagRecord
from monitor.contracts.results import ResultLine
from monitor.demo.broker import free_port
from monitor.judge import Judge

REPO = Path(__file__).resolve().parent.parent

# The sufficient statistics of a weighted estimate, as exported (`ragmon_estimate_{name}_total`),
# each as a function of one answer's weight w and value y.
ESTIMATE_STATS: tuple[tuple[str, Callable[[float, float], float]], ...] = (
    ("samples", lambda w, y: 1.0),
    ("weight", lambda w, y: w),
    ("weighted_value", lambda w, y: w * y),
    ("weight_squared", lambda w, y: w * w),
    ("weight_squared_value", lambda w, y: w * w * y),
    ("weight_squared_value_squared", lambda w, y: w * w * y * y),
)


def settings_for(
    bootstrap: str, topic: str, results_file: Path | None, /, **sections: dict[str, Any]
) -> Settings:
    base: dict[str, Any] = {
        "kafka": {
            "bootstrap_servers": bootstrap,
            "topic": topic,
            # Per test, like the input topic (a session's tests share one broker); the samples and
            # results topics and the other stages' groups derive from it (g-<topic>-samples...).
            "group_id": f"g-{topic}",
            "commit_interval_seconds": 0.3,
            "auto_offset_reset": "earliest",
        },
        "assembly": {"grace_seconds": 0.2, "timeout_seconds": 3.0},
        "sampling": {"rate": 1.0},
        "results": {"file": str(results_file) if results_file else None},
    }
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    return load_settings(None, base)


@asynccontextmanager
async def running(settings: Settings, judge: Judge | None = None) -> AsyncIterator[Sidecar]:
    """The sidecar (the stages of `settings.pipeline.role`) in this event loop; stopped (drained)
    on exit, and its errors re-raised. `judge` replaces the configured one."""
    sidecar = Sidecar(settings, judge=judge)
    stop = asyncio.Event()
    task = asyncio.create_task(sidecar.run(stop))
    try:
        await asyncio.wait_for(sidecar.wait_assigned(), timeout=30)
        yield sidecar
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)


class HookedJudge:
    """A real judge with `before` awaited ahead of each call: a delay, a block, a failure."""

    def __init__(self, real: Judge, before: Callable[[RagRecord], Awaitable[None]]) -> None:
        self.real, self.name, self.model = real, real.name, real.model
        self._before = before

    async def judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        await self._before(record)
        return await self.real.judge(record, sampling_weight=sampling_weight)

    async def aclose(self) -> None:
        await self.real.aclose()


def slowed(settings: Settings, seconds: float) -> HookedJudge:
    """The configured judge, each call `seconds` slower (a judge that holds what it reads)."""
    real = build_judge(settings)
    assert real is not None

    async def wait(_: RagRecord) -> None:
        await asyncio.sleep(seconds)

    return HookedJudge(real, wait)


async def eventually(check: Callable[[], bool], within: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.1)


def result_lines(path: Path, model: type[ResultLine] = ResultLine) -> list[dict[str, Any]]:
    """The complete lines of a results file: the sidecar may be appending, and a line without its
    newline yet is not written. Each is read through the results-line contract too (`model`: the
    review queue's lines are `ReviewLine`s), which must give back every field as written (a field
    of the wrong type would read as absent)."""
    if not path.exists():
        return []
    *complete, _partial = path.read_text().split("\n")
    lines = []
    for text in complete:
        if text.strip():
            line = json.loads(text)
            assert model.model_validate_json(text).model_dump(exclude_unset=True) == line, text
            lines.append(line)
    return lines


def result_ids(path: Path) -> set[str]:
    return {r["trace_id"] for r in result_lines(path)}


def sample(sidecar: Sidecar, name: str, **labels: str) -> float:
    value = sidecar.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def read_topic(
    bootstrap: str, topic: str, *, count: int | None = None, within: float = 20.0, **consumer: Any
) -> list[ConsumerRecord[bytes, bytes]]:
    """`topic` from its beginning, every partition, no group: until `count` messages are in, or
    (no count) until a fetch comes back empty after some arrived; at most `within` seconds."""
    reader = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None, **consumer
    )
    await reader.start()
    out: list[ConsumerRecord[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + within
        while (count is None or len(out) < count) and time.monotonic() < deadline:
            batch = await reader.getmany(timeout_ms=500)
            if not batch and count is None and out:
                break
            out.extend(m for msgs in batch.values() for m in msgs)
        return out
    finally:
        await reader.stop()


async def committed_total(bootstrap: str, topic: str, group: str, partitions: int = 3) -> int:
    """Sum of the group's committed offsets: the number of messages it has finished."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        total = 0
        for p in range(partitions):
            off = await consumer.committed(TopicPartition(topic, p))
            total += off or 0
        return total
    finally:
        await consumer.stop()


async def eventually_committed(
    bootstrap: str, topic: str, group: str, total: int, within: float = 30.0
) -> None:
    """Until the group's commits on `topic` add up to `total` (the commit loop runs every few
    tenths of a second)."""
    deadline = time.monotonic() + within
    committed = 0
    while time.monotonic() < deadline:
        committed = await committed_total(bootstrap, topic, group)
        if committed == total:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{group} committed {committed} of {total} messages of {topic} within {within}s")


async def log_end_total(bootstrap: str, topic: str, partitions: int = 3) -> int:
    """Messages in `topic`, from its records (tansu's ListOffsets counts batches, not records)."""
    ends = dict.fromkeys(range(partitions), 0)
    for m in await read_topic(bootstrap, topic):
        ends[m.partition] = max(ends[m.partition], m.offset + 1)
    return sum(ends.values())


def sdk_trace(
    spans: list[tuple[str, dict[str, Any]]], service: str = "svc", **times: int
) -> tuple[str, bytes]:
    """One trace made by the real OpenTelemetry SDK: the first span is the root, the others its
    children; returns (trace id hex, OTLP protobuf bytes as the kafkaexporter writes them)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    (root_name, root_attrs), children = spans[0], spans[1:]
    start = times.get("start_ns")
    with tracer.start_as_current_span(
        root_name, attributes=root_attrs, start_time=start, end_on_exit="end_ns" not in times
    ) as root:
        for name, attrs in children:
            with tracer.start_as_current_span(name, attributes=attrs, start_time=start):
                pass
        trace_id = f"{root.get_span_context().trace_id:032x}"
        if "end_ns" in times:
            root.end(end_time=times["end_ns"])
    provider.shutdown()
    return trace_id, bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())


def to_otlp_json(value: bytes) -> bytes:
    """OTLP protobuf → OTLP/JSON as the Collector writes it (hex ids, int64 as strings)."""
    import base64

    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    doc = MessageToDict(TracesData.FromString(value))
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        sp[key] = base64.b64decode(sp[key]).hex()
    return json.dumps(doc).encode()


def oracle_target(query: str, k: int) -> dict[str, Any]:
    """A perfect RAG service for golden replays: the golden row's relevant chunks and reference
    answer (a refusal when the row is unanswerable). Used as the `module:function` target."""
    from monitor.demo.workload import REFUSAL, load_corpus

    corpus = load_corpus()
    question = next(q for q in corpus.questions if q.query == query)
    if not question.answerable:
        return {"answer": REFUSAL, "chunks": []}
    ids = list(question.relevant_chunk_ids)[:k]
    return {
        "answer": question.reference_answer,
        "chunks": [{"id": i, "content": corpus.chunks[i].text, "score": 1.0} for i in ids],
    }


def python_child(code: str, payload: Any, **env: str) -> Any:
    """`code` run by a fresh interpreter of the repo's (its own hash seed, `env` added), `payload`
    as JSON on its stdin; what it printed, as JSON: for what must not depend on the process."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        cwd=REPO,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


@contextmanager
def example_service(*args: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The example RAG service as a real process on a free loopback port, up once /healthz
    answers; killed on exit unless the test already stopped it."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "examples.rag_service", "--port", str(port), *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, "service", 30, lambda: proc.stdout.read().decode() if proc.stdout else "")
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_healthy(
    url: str, proc: subprocess.Popen[bytes], what: str, seconds: float, output: Callable[[], str]
) -> None:
    """Until `url`/healthz answers 200; RuntimeError (with the tail of `output()`) when `proc`
    exits first or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {output()[-3000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up in {seconds:g} s")
        time.sleep(0.1)


@contextmanager
def _prometheus_daemon(
    name: str,
    binaries: tuple[str, ...],
    package: str,
    args: list[str],
    storage: Path,
    auth: tuple[str, str] | None = None,
) -> Iterator[str]:
    """A Prometheus-project binary on a free loopback port, up once /-/ready answers (with basic
    `auth` if given); its base URL. Its log goes to `<name>.log` beside `storage` (a file: a full
    pipe would block it). Stopped on exit."""
    import shutil

    import pytest

    binary = next(filter(None, map(shutil.which, binaries)), None)
    if binary is None:
        pytest.fail(f"no {name} binary: `make debs` installs {package}")
    port = free_port()
    log = storage.parent / f"{name.lower()}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, *args, f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1, auth=auth).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited: is the config valid? {log.read_text()[-2000:]}")
            assert time.monotonic() < deadline, f"{name} did not come up"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def alertmanager_process(config: Path, storage: Path) -> contextlib.AbstractContextManager[str]:
    """A real Alertmanager (Debian `prometheus-alertmanager`) with `config`."""
    args = [f"--config.file={config}", "--cluster.listen-address=", f"--storage.path={storage}"]
    binaries = ("prometheus-alertmanager", "alertmanager")
    return _prometheus_daemon("Alertmanager", binaries, "prometheus-alertmanager", args, storage)


def prometheus_process(config: Path, storage: Path, *extra: str) -> contextlib.AbstractContextManager[str]:
    """A real Prometheus (Debian `prometheus`) with `config`, and `extra` flags (a feature)."""
    args = [f"--config.file={config}", "--storage.tsdb.retention.time=1h", f"--storage.tsdb.path={storage}"]
    args += extra
    return _prometheus_daemon("Prometheus", ("prometheus",), "prometheus", args, storage)


def pushgateway_process(
    workdir: Path, basic_auth: tuple[str, str, str] | None = None
) -> contextlib.AbstractContextManager[str]:
    """A real Pushgateway (Debian `prometheus-pushgateway`), in memory only (no persistence file);
    its log is `pushgateway.log` in `workdir`. `basic_auth` (user, password, its bcrypt hash):
    every request needs it (a web config file in `workdir`)."""
    args = ["--persistence.file="]
    auth = None
    if basic_auth is not None:
        user, password, hashed = basic_auth
        web = workdir / "pushgateway-web.yml"
        web.write_text(json.dumps({"basic_auth_users": {user: hashed}}))  # JSON is YAML
        args.append(f"--web.config.file={web}")
        auth = (user, password)
    binaries, package = ("prometheus-pushgateway", "pushgateway"), "prometheus-pushgateway"
    return _prometheus_daemon("Pushgateway", binaries, package, args, workdir / "pushgateway", auth)


class Webhook:
    """A local JSON webhook receiver on a free loopback port: every POSTed body, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.arrivals: list[float] = []  # time.monotonic() of each body's arrival
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                hook.arrivals.append(time.monotonic())
                hook.bodies.append(json.loads(body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def workload_labels(path: Path, traces: int, seed: int) -> Path:
    """Human labels for `rag-monitor calibrate`, written as a labels file: the synthetic workload's
    ground truth (a third ungrounded, half of those hallucinated)."""
    from monitor.demo.workload import WorkloadConfig, generate, load_corpus

    corpus = load_corpus()
    config = WorkloadConfig(ungrounded_rate=0.3, hallucination_rate=0.5)
    with path.open("w") as f:
        for t in generate(traces, seed=seed, config=config).traces:
            record = {
                "trace_id": t.trace_id,
                "query": t.query,
                "query_type": t.query_type,
                "chunks": [{"id": c, "content": corpus.chunks[c].text} for c in t.chunk_ids],
                "answer": t.answer,
            }
            labels = {"faithful": t.grounded, "hallucinated": t.hallucinated, "answerable": t.answerable}
            f.write(json.dumps({"record": record, "labels": labels}) + "\n")
    return path


def start_sidecar(
    bs: str, topic: str, results: Path, log: Path, *args: str, **env: str
) -> subprocess.Popen[bytes]:
    """`rag-monitor run` as a process (`args`: more options, e.g. `--role judge`)."""
    environ = {
        **os.environ,
        "RAGMON_ASSEMBLY__GRACE_SECONDS": "0.2",
        "RAGMON_KAFKA__COMMIT_INTERVAL_SECONDS": "0.2",
        "RAGMON_KAFKA__AUTO_OFFSET_RESET": "earliest",
        "RAGMON_PIPELINE__SAMPLES_TOPIC": f"{topic}-samples",
        "RAGMON_PIPELINE__JUDGE_GROUP_ID": f"g-{topic}-judge",
        **env,
    }
    cmd = [
        sys.executable,
        "-m",
        "monitor.cli",
        "run",
        "--bootstrap-servers",
        bs,
        "--topic",
        topic,
        "--group-id",
        f"g-{topic}",
        "--sample-rate",
        "1.0",
        "--results-file",
        str(results),
        "--metrics-port",
        "0",
        *args,
    ]
    return subprocess.Popen(cmd, env=environ, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def degrade(url: str, **rates: float) -> None:
    """Degrade the example service (its `/admin/degrade`: e.g. `invent_rate`, `drop_best_rate`)."""
    r = httpx.post(f"{url}/admin/degrade", json=rates, timeout=5)
    assert r.status_code == 200, r.text
