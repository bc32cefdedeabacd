"""The sidecar image, built from the real Dockerfile and run, without a Docker engine.

deploy/image/build.py bootstraps a Debian bookworm base (python3 3.11) with mmdebstrap and builds the
Dockerfile on it with `podman build` (chroot isolation, host network); both are cached by their
inputs (~/.cache/rag-monitor-image and podman's storage), so only the first run pays for them. The
image then runs as a user would run it: `podman run` as uid 10001 with a read-only root and only
the image's declared volumes writable, on the host's network, against the session's embedded
broker on loopback.

podman, buildah and mmdebstrap missing is a failure (`make test` installs them via `make debs`);
the tests skip only where podman is installed but cannot run at all.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
import uuid
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from helm_cases import pod_spec, render
from support import REPO, eventually, result_lines

from monitor.app.config import load_settings
from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.demo.workload import generate, produce
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig

BUILD = REPO / "deploy" / "image" / "build.py"
UID = 10001
PYPROJECT_VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
# Under `podman run` here: crun refuses this host's cgroup v1/v2 hybrid ("cgroups in hybrid mode
# not supported"), runc runs; the OCI default rlimits (nofile, nproc 1048576) exceed what this
# sandbox may set, so the container gets the host's open-files limit and a modest process limit.
NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
NPROC = 4096
PODMAN_RUN = [
    "podman",
    "--runtime",
    "runc",
    "run",
    "--rm",
    "--network=host",
    f"--ulimit=nofile={NOFILE}:{NOFILE}",
    f"--ulimit=nproc={NPROC}:{NPROC}",
]


def _tools() -> None:
    missing = [t for t in ("podman", "buildah", "mmdebstrap", "runc") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: `make debs` installs them (Debian packages)")
    probe = subprocess.run(["podman", "info"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run on this machine: {probe.stderr.strip()[:300]}")


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    """deploy/image/build.py's summary: the image, its base, size, layers, timings."""
    _tools()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(BUILD)], capture_output=True, text=True, check=False, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-4000:]
    summary: dict[str, Any] = json.loads(done.stdout)
    summary["fixture_seconds"] = round(time.monotonic() - started, 1)
    print(f"image build: {summary['image']} {summary['seconds']} ({summary['fixture_seconds']} s)")
    return summary


def image_config(ref: str) -> dict[str, Any]:
    """The image's config, with its health check (kept only in the Docker format)."""
    out = subprocess.run(["podman", "image", "inspect", ref], capture_output=True, text=True, check=True)
    inspected = json.loads(out.stdout)[0]
    config: dict[str, Any] = {**inspected["Config"], "Healthcheck": inspected.get("Healthcheck")}
    return config


def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def kill(name: str, proc: subprocess.Popen[bytes]) -> None:
    subprocess.run(["podman", "kill", name], check=False, capture_output=True)
    proc.wait(timeout=30)


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


def metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_compilers_stay_in_the_builder(built: dict[str, Any]) -> None:
    done = subprocess.run(
        [*PODMAN_RUN, "--entrypoint", "sh", built["image"], "-c", "command -v gcc cc || echo none"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.strip() == "none", done.stdout
    # The build fails without the extensions (Dockerfile), and the runtime imports them, on the
    # Python of the default base (python:3.11-slim).
    code = "import sys, monitor.ingest._wire; assert sys.version_info[:2] == (3, 11), sys.version"
    done = subprocess.run(
        [*PODMAN_RUN, "--entrypoint", "python", built["image"], "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_size_layers_and_sbom_are_reported(built: dict[str, Any]) -> None:
    """The summary's figures are the image's, and the SBOM lists exactly the Python distributions
    installed in the image's venv (as the image's own interpreter sees them)."""
    assert built["size_bytes"] > built["base_size_bytes"] > 0
    assert built["layers"] >= 2 and any(h["size"] for h in built["history"])
    sbom = json.loads(Path(built["sbom"]["cyclonedx"]).read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    listed = {(c["name"].lower().replace("_", "-"), c["version"]) for c in sbom["components"]}
    code = (
        "import importlib.metadata as m, json;"
        "print(json.dumps([[d.metadata['Name'], d.version] for d in m.distributions()]))"
    )
    done = subprocess.run(
        [*PODMAN_RUN, "--entrypoint", "python", built["image"], "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    installed = {(n.lower().replace("_", "-"), v) for n, v in json.loads(done.stdout.splitlines()[-1])}
    assert ("rag-monitor", PYPROJECT_VERSION) in installed and (
        "aiokafka",
        dict(installed)["aiokafka"],
    ) in listed
    assert listed == installed
    assert built["sbom"]["debian_packages"] > 50  # the base's dpkg database, listed beside it


async def test_runs_read_only_as_10001_consumes_judges_and_stops_on_sigterm(
    built: dict[str, Any], broker: EmbeddedBroker, tmp_path: Path
) -> None:
    image = built["image"]
    config = image_config(image)
    assert config["User"] == f"{UID}:{UID}"
    volumes = sorted(config["Volumes"])
    assert "/tmp" in volumes
    state_dir = config["WorkingDir"]
    assert state_dir in volumes  # a relative results.file lands in a volume

    # Only the declared volumes are writable: /tmp a tmpfs, the others host directories owned by
    # the image's user (the host directory stands in for a Kubernetes volume or a compose volume).
    mounts: list[str] = []
    host_dirs: dict[str, Path] = {}
    for path in volumes:
        if path == "/tmp":
            mounts += ["--tmpfs", "/tmp:rw,mode=1777"]
            continue
        host = tmp_path / path.strip("/").replace("/", "_")
        host.mkdir()
        if os.geteuid() == 0:
            os.chown(host, UID, UID)
        else:
            host.chmod(0o777)
        host_dirs[path] = host
        mounts += ["--volume", f"{host}:{path}:rw"]

    topic = f"spans-{uuid.uuid4().hex[:10]}"
    bs = broker.bootstrap_servers
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [topic], partitions=3)
    port = free_port()
    shutdown_seconds = 10.0
    env = {
        "RAGMON_KAFKA__BOOTSTRAP_SERVERS": bs,
        "RAGMON_KAFKA__TOPIC": topic,
        "RAGMON_KAFKA__GROUP_ID": f"g-{topic}",
        "RAGMON_KAFKA__AUTO_OFFSET_RESET": "earliest",
        "RAGMON_KAFKA__COMMIT_INTERVAL_SECONDS": "0.3",
        "RAGMON_PIPELINE__SAMPLES_TOPIC": f"{topic}-samples",
        "RAGMON_PIPELINE__JUDGE_GROUP_ID": f"g-{topic}-judge",
        "RAGMON_PIPELINE__SHUTDOWN_SECONDS": str(shutdown_seconds),
        "RAGMON_ASSEMBLY__GRACE_SECONDS": "0.2",
        "RAGMON_SAMPLING__RATE": "1.0",
        "RAGMON_JUDGE__BACKEND": "lexical",
        "RAGMON_METRICS__HOST": "127.0.0.1",
        "RAGMON_METRICS__PORT": str(port),
        "RAGMON_RESULTS__FILE": "results.jsonl",  # relative: in the working directory, a volume
    }
    name = f"ragmon-test-{uuid.uuid4().hex[:8]}"
    cmd = [
        *PODMAN_RUN,
        "--name",
        name,
        "--read-only",
        "--read-only-tmpfs=false",  # no tmpfs podman adds by itself: only the image's volumes
        "--image-volume=ignore",
        *mounts,
        *(f"--env={k}={v}" for k, v in env.items()),
        image,  # its own ENTRYPOINT, CMD and USER
    ]
    log = tmp_path / "container.log"
    proc = start(cmd, log)
    results = host_dirs[state_dir] / "results.jsonl"
    work = generate(40, seed=30)
    ids = {t.trace_id for t in work.traces}
    try:
        await eventually(lambda: "assigned partitions" in log.read_text(), within=90, what="group join")
        await produce(bs, topic, work.pairs())
        await eventually(
            lambda: results.exists() and {line["trace_id"] for line in result_lines(results)} >= ids,
            within=60,
            what="every trace judged into the volume",
        )
        # The image's HEALTHCHECK command (podman cannot schedule it without systemd), as Docker runs it.
        health = config["Healthcheck"]["Test"]
        assert health[0] == "CMD"
        checked = await asyncio.to_thread(
            subprocess.run,
            ["podman", "exec", "--env", f"RAGMON_METRICS__PORT={port}", name, *health[1:]],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        assert checked.returncode == 0, checked.stderr
        status, _ = await asyncio.to_thread(get, f"http://127.0.0.1:{port}/healthz")
        assert status == 200
        status, _ = await asyncio.to_thread(get, f"http://127.0.0.1:{port}/readyz")
        assert status == 200
        status, text = await asyncio.to_thread(get, f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert metric(text, "ragmon_records_total") >= len(ids)
        assert metric(text, "ragmon_judged_total") >= len(ids)

        proc.send_signal(signal.SIGTERM)  # podman run forwards it to the container's process
        started = time.monotonic()
        code = await asyncio.to_thread(proc.wait, shutdown_seconds + 20)
        stopped_in = time.monotonic() - started
    finally:
        if proc.poll() is None:
            await asyncio.to_thread(kill, name, proc)
    text = log.read_text()
    assert code == 0, text[-3000:]
    print(f"SIGTERM to exit: {stopped_in:.1f} s")
    assert stopped_in < shutdown_seconds + 5, f"stopped in {stopped_in:.1f} s"
    assert "otlp_proto decoder compiled, trace assembler compiled, record accounting compiled" in text
    lines = result_lines(results)
    assert {line["trace_id"] for line in lines} == ids
    assert all(line["judge"]["backend"] == "lexical" and line["judge"]["outcome"] == "ok" for line in lines)
    assert any(line.get("faithfulness") is not None for line in lines)
    if os.geteuid() == 0:  # written by the image's user, not root
        assert results.stat().st_uid == UID


def healthcheck_url(config: dict[str, Any], port: int) -> str:
    """The URL the image's HEALTHCHECK fetches, with the port it would use."""
    test = config["Healthcheck"]["Test"]
    code = test[-1].replace("os.environ.get('RAGMON_METRICS__PORT', '9612')", repr(str(port)))
    found = re.search(r"'(http://[^']*)'\s*\+\s*'(\d+)'\s*\+\s*'([^']*)'", code)
    assert found, code
    return "".join(found.groups())


def exposed_ports(config: dict[str, Any]) -> set[int]:
    return {int(p.split("/")[0]) for p in config["ExposedPorts"]}


def test_compose_service_agrees_with_the_image(built: dict[str, Any]) -> None:
    config = image_config(built["image"])
    compose = yaml.safe_load((REPO / "deploy" / "docker-compose.yml").read_text())
    service = compose["services"]["rag-monitor"]
    # Built from this Dockerfile: the image under test is the one compose runs.
    assert (REPO / "deploy" / service["build"]["context"]).resolve() == REPO
    assert service["build"]["dockerfile"] == "Dockerfile"
    assert service["entrypoint"] == config["Entrypoint"]
    assert service["command"] == config["Cmd"]
    # The image's user unless compose names the same one.
    assert service.get("user", config["User"]) == config["User"]
    # The config it mounts is the file the command reads, read-only; its results (if any) land in
    # one of the image's volumes (compose gives each an anonymous volume).
    config_path = service["command"][service["command"].index("--config") + 1]
    mounts = {m.split(":")[1]: m for m in service["volumes"]}
    assert mounts[config_path].endswith(":ro")
    settings = load_settings(REPO / "deploy" / mounts[config_path].split(":")[0])
    if settings.results.file:
        results = PurePosixPath(config["WorkingDir"], settings.results.file)
        assert any(results.is_relative_to(v) for v in config["Volumes"]), results
    # It publishes the port the image exposes and the config listens on.
    published = {int(p.rsplit(":", 1)[1]) for p in service["ports"]}
    assert published == {settings.metrics.port} and published <= exposed_ports(config)
    # Its health check runs a program the image has, against the port and a path the image serves.
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD"
    has = subprocess.run(
        [*PODMAN_RUN, "--entrypoint", "sh", built["image"], "-c", f"command -v {test[1]}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert has.returncode == 0, f"{test[1]} is not in the image"
    url = re.search(r"'(http://[^']*)'", test[-1])
    assert url
    parts = urlsplit(url.group(1))
    assert parts.port == settings.metrics.port and parts.path in ("/healthz", "/readyz")
    assert urlsplit(healthcheck_url(config, settings.metrics.port)).port == parts.port
    grace = service["stop_grace_period"]
    assert int(grace.rstrip("s")) > settings.pipeline.shutdown_seconds


def test_chart_agrees_with_the_image(built: dict[str, Any]) -> None:
    config = image_config(built["image"])
    uid, gid = (int(x) for x in config["User"].split(":"))
    health_path = urlsplit(healthcheck_url(config, 9612)).path
    values = yaml.safe_load((REPO / "helm" / "rag-monitor" / "values.yaml").read_text())
    assert (
        values["image"]["repository"].rsplit("/", 1)[1] == config["Labels"]["org.opencontainers.image.title"]
    )
    objects = render()
    workloads = [o for o in objects if o["kind"] == "Deployment"]
    assert workloads
    for workload in workloads:
        pod = pod_spec(workload)
        (container,) = [c for c in pod["containers"] if c["name"] == "rag-monitor"]
        name = workload["metadata"]["name"]
        image, _, tag = container["image"].rpartition(":")
        assert image == values["image"]["repository"] and tag == PYPROJECT_VERSION, container["image"]
        assert container["command"] == config["Entrypoint"], name
        assert container["args"][0] == config["Cmd"][0], name
        # The image's user, and a read-only root with each of the image's volumes mounted writable.
        assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (uid, gid)
        assert pod["securityContext"]["fsGroup"] == gid  # the state volume is writable by it
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
        assert set(config["Volumes"]) <= writable, name
        # Probes on the port the image exposes: liveness the image's HEALTHCHECK path, readiness /readyz.
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert set(ports.values()) <= exposed_ports(config)
        live, ready = container["livenessProbe"]["httpGet"], container["readinessProbe"]["httpGet"]
        assert live["path"] == health_path and ready["path"] == "/readyz"
        assert ports[live["port"]] in exposed_ports(config) and ports[ready["port"]] in exposed_ports(config)
        assert pod["terminationGracePeriodSeconds"] > load_settings(None, {}).pipeline.shutdown_seconds
