"""The HTTP endpoint over real HTTP: `/metrics` exposition, `/healthz`, `/readyz` from its callback."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from monitor.outputs.http import MetricsServer, Readiness


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
