"""The sidecar image, checked without a container engine: the Dockerfile's stages, user, command,
port and health check against the project (pyproject's scripts and extras, the CLI, the config
defaults, the HTTP server), and the .dockerignore against what the Dockerfile copies."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from typer.core import TyperGroup
from typer.main import get_command

from monitor.cli import app
from monitor.outputs.config import MetricsConfig
from monitor.outputs.http import MetricsServer

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"no {keyword} in stage {self.name or self.image}"
        return found[-1]


def parse_dockerfile(text: str) -> list[Stage]:
    """Instructions (continuation lines joined, comments dropped) grouped by FROM, with the ARGs
    declared before the first FROM substituted into the images."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], rest.split()[0])
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(image, name))
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, rest))
    return stages


def exec_form(args: str) -> list[str]:
    """A JSON-array instruction (exec form): what the engine runs without a shell."""
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile((ROOT / "Dockerfile").read_text())


@pytest.fixture(scope="module")
def final(stages: list[Stage]) -> Stage:
    return stages[-1]


def test_multi_stage_slim_python_311_runtime(stages: list[Stage], final: Stage) -> None:
    assert len(stages) >= 2
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", final.image), final.image
    builders = {s.name for s in stages[:-1]}
    copied_from = {m.group(1) for c in final.all("COPY") for m in [re.search(r"--from=(\S+)", c)] if m}
    assert copied_from and copied_from <= builders  # the runtime takes the build's result, not the tools
    assert not any("pip install" in r for r in final.all("RUN"))  # nothing is built in the runtime


def test_runs_as_a_fixed_non_root_uid(final: Stage) -> None:
    user = final.last("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, user  # numeric: Kubernetes' runAsNonRoot can verify it
    assert not gid or (gid.isdigit() and int(gid) != 0), user
    keywords = [kw for kw, _ in final.instructions]
    assert keywords.index("ENTRYPOINT") > max(i for i, kw in enumerate(keywords) if kw == "USER")
    assert any(f"--uid {uid}" in r for r in final.all("RUN"))  # the user exists in /etc/passwd


def test_read_only_root_filesystem_is_enough(final: Stage) -> None:
    env = dict(
        (k, v) for instr in final.all("ENV") for k, _, v in (w.partition("=") for w in shlex.split(instr))
    )
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    volumes = exec_form(final.last("VOLUME"))
    assert "/tmp" in volumes
    writable = [Path(v) for v in volumes]

    def inside_a_volume(path: str) -> bool:
        return any(Path(path) == v or Path(path).is_relative_to(v) for v in writable)

    assert inside_a_volume(env["HOME"]) and inside_a_volume(env["TMPDIR"])
    assert inside_a_volume(final.last("WORKDIR"))  # a relative results.file lands in a volume


def test_entrypoint_and_command_are_the_cli(final: Stage) -> None:
    entrypoint = exec_form(final.last("ENTRYPOINT"))
    cmd = exec_form(final.last("CMD"))
    assert entrypoint == ["rag-monitor"]
    assert entrypoint[0] in PYPROJECT["project"]["scripts"]
    assert cmd[0] == "run"
    # The CLI accepts the command's options (an unknown one or a missing value raises here).
    cli = get_command(app)
    assert isinstance(cli, TyperGroup)
    run = cli.commands["run"]
    ctx = run.make_context("run", cmd[1:])
    config = ctx.params["config"]
    # The default command works without a mount: the image writes that file.
    assert any(re.search(rf">\s*{re.escape(str(config))}\s*$", r) for r in final.all("RUN")), config


def test_installs_the_sidecar_extra_and_no_demo(stages: list[Stage]) -> None:
    installs = [r for s in stages for r in s.all("RUN") if "pip install" in r]
    extras = {
        e.strip() for r in installs for group in re.findall(r"\[([\w,-]+)\]", r) for e in group.split(",")
    }
    assert extras == {"sidecar"}
    assert extras <= set(PYPROJECT["project"]["optional-dependencies"])


def test_exposes_the_default_metrics_port(final: Stage) -> None:
    assert final.last("EXPOSE").split() == [str(MetricsConfig().port)]


def _healthcheck(final: Stage) -> list[str]:
    args = final.last("HEALTHCHECK")
    assert " CMD " in f" {args} ", args
    command = exec_form(args.split("CMD", 1)[1].strip())
    assert command[0] == "python"  # the slim image has no curl
    return [sys.executable, *command[1:]]


def test_healthcheck_probes_healthz_on_the_metrics_port(final: Stage) -> None:
    command = _healthcheck(final)
    assert f"'{MetricsConfig().port}'" in command[-1]  # the default port, unless RAGMON_METRICS__PORT
    server = MetricsServer(CollectorRegistry(), "127.0.0.1", 0)
    port = server.start()
    env = {**os.environ, "RAGMON_METRICS__PORT": str(port)}
    try:
        up = subprocess.run(command, env=env, capture_output=True, timeout=30)
    finally:
        server.stop()
    assert up.returncode == 0, up.stderr
    down = subprocess.run(command, env=env, capture_output=True, timeout=30)
    assert down.returncode != 0


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, enough for these patterns: the last pattern matching the path or a parent
    decides; `!` re-includes."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!")
        globs = (
            [pat, pat.removeprefix("**/"), "*/" + pat.removeprefix("**/")] if pat.startswith("**/") else [pat]
        )
        if any(fnmatch.fnmatchcase(p, g) for p in prefixes for g in globs):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_what_the_build_copies_and_nothing_else() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = [
        src
        for s in parse_dockerfile((ROOT / "Dockerfile").read_text())
        for c in s.all("COPY")
        if "--from=" not in c
        for src in c.split()[:-1]
    ]
    assert copied
    for src in copied:
        assert not _ignored(src, patterns), src
        assert (ROOT / src).exists(), src
    assert not _ignored("monitor/cli/__init__.py", patterns)
    assert not _ignored("monitor/data/corpus.jsonl", patterns)
    for junk in (
        ".venv/bin/python",
        "tests/deploy/test_dockerfile.py",
        ".git/HEAD",
        "monitor/__pycache__/cli.pyc",
    ):
        assert _ignored(junk, patterns), junk
