"""Ctrl-C on `rag-monitor demo`, as a terminal sends it: SIGINT to the demo's whole process group.

The demo stops the sidecar first (it drains against a live broker), then the example service, then
the embedded broker; quickly, in a handful of lines, leaving no server behind. Before, the same
signal reached the broker, which died first: 25 s of thousands of `Unable connect to node` lines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from monitor.demo.broker import free_port


def _children(pid: int) -> dict[int, str]:
    """The live processes whose parent is `pid`, with their command names."""
    out: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if int(rest[1]) == pid and rest[0] != "Z":
            out[int(entry.name)] = name
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.timeout(150)
def test_ctrl_c_stops_the_demo_in_seconds_quietly_and_leaves_no_server(
    tmp_path: Path, repo_root: Path
) -> None:
    results = tmp_path / "results.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "demo", "--duration", "600", "--metrics-port", str(free_port()),
         "--results-file", str(results)],
        cwd=repo_root,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a terminal's foreground job has
    )  # fmt: skip
    errors: list[tuple[float, str]] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            errors.append((time.monotonic(), line.decode(errors="replace").rstrip()))

    readers = [
        threading.Thread(target=read_stderr, daemon=True),
        threading.Thread(target=lambda: proc.stdout and proc.stdout.read(), daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        deadline = time.monotonic() + 100
        while not (results.exists() and len(results.read_text().splitlines()) >= 50):
            assert proc.poll() is None, f"the demo exited early: {[e for _, e in errors][-20:]}"
            assert time.monotonic() < deadline, "the demo wrote no results in 100 s"
            time.sleep(0.5)
        servers = _children(proc.pid)
        assert any("tansu" in name for name in servers.values()), f"no broker among {servers}"
        assert len(servers) >= 3, f"expected the broker and two example services, got {servers}"

        signalled = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for t in readers:
        t.join(timeout=5)
    after = [line for at, line in errors if at >= signalled]
    print(f"stopped in {took:.2f}s, exit {code}, {len(after)} log lines after the signal: {after}")

    assert code == 0
    assert took < 5.0, f"the demo took {took:.1f}s to stop"
    assert len(after) <= 10, f"{len(after)} log lines after Ctrl-C: {after[:20]}"
    assert not [line for line in after if "Unable connect" in line or "Unclosed" in line], after
    left = {pid: name for pid, name in servers.items() if _alive(pid)}
    assert not left, f"servers left running after the demo exited: {left}"
