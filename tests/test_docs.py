"""The repository stands alone, and docs/contract.md matches the code.

A user who clones the repository has nothing outside it: no file may cite a working document or a
data directory that lives elsewhere. The contract names every metric the sidecar and the golden
replay export (and no other), and every `rag-monitor` command, so that dashboards, alert rules
and scripts written against it keep working.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from prometheus_client import CollectorRegistry

from monitor.cli import app
from monitor.golden.gauges import GoldenGauges
from monitor.judge.batches import BatchCollector
from monitor.llm.batches import BatchStats
from monitor.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract.md"
# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile("|".join(re.escape(s) for s in ("design" + ".md", "/" + "work/", "../" + "shared")))


def _repository_files() -> list[Path]:
    """Tracked files and new ones not ignored: what a commit would hand a user."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_file_cites_a_path_outside_the_repository() -> None:
    found = []
    for path in _repository_files():
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not found, "cite docs/contract.md or a repository path instead:\n" + "\n".join(found)


def _contract() -> str:
    return " ".join(CONTRACT.read_text(encoding="utf-8").split())


def _exported() -> set[str]:
    """Every series name the sidecar's registry, the golden gauges and the batch judge export
    (counters with their `_total`), from fresh registries."""
    registry = CollectorRegistry()
    Metrics(registry)
    GoldenGauges(registry)
    registry.register(BatchCollector(BatchStats()))
    return {
        f"{family.name}_total" if family.type == "counter" else family.name for family in registry.collect()
    }


def _named(text: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def test_every_exported_metric_is_in_the_contract() -> None:
    exported = _exported()
    assert "ragmon_stage_stalled" in exported and "ragmon_golden_unmeasured" in exported
    text = _contract()
    missing = sorted(name for name in exported if not _named(text, name))
    assert not missing, f"exported but not in docs/contract.md (Metrics): {missing}"


def test_the_contract_names_no_metric_the_code_does_not_export() -> None:
    exported = _exported()
    named = set(re.findall(r"\bragmon_\w+", _contract()))
    assert not named - exported, f"in docs/contract.md but not exported: {sorted(named - exported)}"


def _commands(group: Any, prefix: str = "rag-monitor") -> Iterator[str]:
    """Full command lines of the leaves (typer's groups are its own click's: duck-typed)."""
    for name, command in group.commands.items():
        path = f"{prefix} {name}"
        if hasattr(command, "commands"):
            yield from _commands(command, path)
        else:
            yield path


def test_every_command_is_in_the_contract() -> None:
    commands = sorted(_commands(typer.main.get_command(app)))
    assert "rag-monitor golden trigger" in commands and "rag-monitor baseline pin" in commands
    text = _contract()
    missing = [c for c in commands if not _named(text, c)]
    assert not missing, f"commands not in docs/contract.md (CLI): {missing}"
