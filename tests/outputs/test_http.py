"""The HTTP endpoint over real HTTP: `/metrics` exposition, `/healthz`, `/readyz` from its callback."""

from __future__ import annotations

import asyncio
import gzip
import resource
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families
from support import eventually

from monitor.app.config import Settings
from monitor.outputs.http import MetricsServer, Readiness, Response


class Probe:
    """What a stage would expose: plain attributes, read by the server's thread."""

    def __init__(self) -> None:
        self.partitions = 0

    def readiness(self) -> Readiness:
        checks = {"ingest": f"{self.partitions} partitions assigned"}
        return Readiness(self.partitions > 0, checks)


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("ragmon_records", "records", ["query_type"], registry=reg).labels(query_type="lookup").inc(3)
    return reg


@contextmanager
def serve(server: MetricsServer) -> Iterator[httpx.Client]:
    port = server.start()
    assert port > 0
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            yield client
    finally:
        server.stop()


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def client(registry: CollectorRegistry, probe: Probe) -> Iterator[httpx.Client]:
    with serve(MetricsServer(registry, "127.0.0.1", 0, probe.readiness)) as c:
        yield c


def test_metrics_is_prometheus_exposition(client: httpx.Client) -> None:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    [sample] = [s for s in families["ragmon_records"].samples if s.name == "ragmon_records_total"]
    assert sample.labels == {"query_type": "lookup"} and sample.value == 3


def test_metrics_negotiates_gzip_and_openmetrics(client: httpx.Client) -> None:
    # Raw bytes: httpx would otherwise decompress transparently.
    with client.stream("GET", "/metrics", headers={"Accept-Encoding": "gzip"}) as r:
        assert r.headers["content-encoding"] == "gzip"
        assert b"ragmon_records_total" in gzip.decompress(b"".join(r.iter_raw()))
    r = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n")


def test_healthz_answers_while_the_process_runs(client: httpx.Client) -> None:
    r = client.get("/healthz")
    assert (r.status_code, r.text) == (200, "ok\n")  # liveness does not follow readiness


def test_readyz_follows_the_callback(client: httpx.Client, probe: Probe) -> None:
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json() == {"ingest": "0 partitions assigned"}
    probe.partitions = 3
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json() == {"ingest": "3 partitions assigned"}


def test_readyz_without_a_callback_is_ready(registry: CollectorRegistry) -> None:
    with serve(MetricsServer(registry, "127.0.0.1", 0)) as client:
        r = client.get("/readyz")
        assert (r.status_code, r.json()) == (200, {})


def test_unknown_paths_are_404(client: httpx.Client) -> None:
    for path in ("/", "/metrics/extra", "/favicon.ico", "/ready"):
        assert client.get(path).status_code == 404, path


def test_stop_frees_the_port(registry: CollectorRegistry) -> None:
    server = MetricsServer(registry, "127.0.0.1", 0)
    port = server.start()
    server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    again = MetricsServer(registry, "127.0.0.1", port)  # the port can be bound again at once
    assert again.start() == port
    again.stop()


# --------------------------------------------------------------------------------------------
# Under abuse: idle floods, slow clients, the bind address

IDLE = 2000


@pytest.fixture
def many_fds() -> Iterator[None]:
    """Room for both ends of IDLE loopback connections in this one process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * IDLE + 1024
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _open_idle(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]


def _until_closed(
    sock: socket.socket, within: float, trickle: bytes = b"", every: float = 0.2
) -> float | None:
    """Seconds until the server closes `sock` (sending `trickle` one byte per `every`), None if not
    within `within`."""
    t0 = time.monotonic()
    sock.settimeout(every)
    payload = iter(trickle)
    while time.monotonic() - t0 < within:
        byte = next(payload, None)
        try:
            if byte is not None:
                sock.send(bytes([byte]))
            if sock.recv(4096) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except OSError:  # reset by the server
            return time.monotonic() - t0
    return None


async def test_idle_connections_hold_no_thread_and_scrapes_stay_prompt(
    registry: CollectorRegistry, many_fds: None
) -> None:
    server = MetricsServer(registry, "127.0.0.1", 0, timeout_seconds=60, workers=4)
    port = server.start()
    loop = asyncio.get_running_loop()
    lags: list[float] = []

    async def ticker() -> None:  # the process's own event loop keeps its pace
        while True:
            t = loop.time()
            await asyncio.sleep(0.01)
            lags.append(loop.time() - t - 0.01)

    tick = asyncio.create_task(ticker())
    threads = threading.active_count()
    idle = await asyncio.to_thread(_open_idle, port, IDLE)
    try:
        await eventually(lambda: server.open_connections >= IDLE, what="the idle connections accepted")
        lags.clear()  # from here on: while they are held
        assert threading.active_count() <= threads + 4  # the worker pool, not a thread per connection
        took: list[float] = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            for path in ("/metrics", "/healthz") * 10:
                t0 = time.perf_counter()
                r = await client.get(path, headers={"Connection": "close"})
                took.append(time.perf_counter() - t0)
                assert r.status_code == 200
        print(
            f"\n{IDLE} idle connections: /metrics,/healthz median {statistics.median(took) * 1000:.1f} ms, "
            f"max {max(took) * 1000:.1f} ms; loop lag max {max(lags) * 1000:.1f} ms; "
            f"threads +{threading.active_count() - threads}"
        )
        assert max(took) < 1.0 and statistics.median(took) < 0.2
        assert max(lags) < 0.5
    finally:
        tick.cancel()
        for s in idle:
            s.close()
        server.stop()


def test_idle_and_slow_clients_are_dropped_after_the_timeout(registry: CollectorRegistry) -> None:
    server = MetricsServer(
        registry,
        "127.0.0.1",
        0,
        routes={"/golden/replay": lambda r: Response(202, {"ok": True})},
        timeout_seconds=1.0,
    )
    port = server.start()
    try:
        with socket.create_connection(("127.0.0.1", port)) as idle:
            t = _until_closed(idle, within=10)
            assert t is not None and 0.8 < t < 2.5, t
        # Slowloris: headers one byte every 0.2 s (10 s of them) are cut at the timeout, not per byte.
        with socket.create_connection(("127.0.0.1", port)) as slow:
            head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 50 + b"\r\n\r\n"
            t = _until_closed(slow, within=10, trickle=head)
            assert t is not None and t < 2.5, t
        # The trigger's body promised and never finished.
        with socket.create_connection(("127.0.0.1", port)) as body:
            body.sendall(b'POST /golden/replay HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"kind"')
            t = _until_closed(body, within=10)
            assert t is not None and t < 2.5, t
        r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        assert r.status_code == 200
        assert server.dropped["timeout"] == 3
    finally:
        server.stop()


def test_past_max_connections_the_longest_waiting_is_closed(registry: CollectorRegistry) -> None:
    server = MetricsServer(registry, "127.0.0.1", 0, timeout_seconds=60, max_connections=50)
    port = server.start()
    idle = _open_idle(port, 120)
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        assert r.status_code == 200
        assert server.open_connections <= 50 and server.dropped["evicted"] >= 70
        idle[0].settimeout(2)
        assert idle[0].recv(1) == b""  # the oldest went first
    finally:
        for s in idle:
            s.close()
        server.stop()


def test_the_bind_address_is_honoured(registry: CollectorRegistry) -> None:
    server = MetricsServer(registry, "127.0.0.2", 0)
    port = server.start()
    try:
        assert httpx.get(f"http://127.0.0.2:{port}/healthz", timeout=2).status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    finally:
        server.stop()
    assert Settings().metrics.host == "0.0.0.0"  # the documented default: every interface
