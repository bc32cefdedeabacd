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
import resource
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from support import REPO, eventually, result_lines

from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.demo.workload import generate, produce
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig

BUILD = REPO / "deploy" / "image" / "build.py"
UID = 10001
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
    # The build fails without the extensions (Dockerfile), and the runtime imports them.
    done = subprocess.run(
        [*PODMAN_RUN, "--entrypoint", "python", built["image"], "-c", "import monitor.ingest._wire"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


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
    assert stopped_in < shutdown_seconds + 5, f"stopped in {stopped_in:.1f} s"
    assert "otlp_proto decoder compiled, trace assembler compiled, record accounting compiled" in text
    lines = result_lines(results)
    assert {line["trace_id"] for line in lines} == ids
    assert all(line["judge"]["backend"] == "lexical" and line["judge"]["outcome"] == "ok" for line in lines)
    assert any(line.get("faithfulness") is not None for line in lines)
    if os.geteuid() == 0:  # written by the image's user, not root
        assert results.stat().st_uid == UID
