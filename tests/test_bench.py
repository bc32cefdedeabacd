"""The benchmarks still run against the code they measure: a refactor that changes a constructor
breaks a bench silently (nothing else calls it), and its next figure is then missing or wrong.
Every script answers `--help`; the ingest stage benchmark runs for real on a small workload."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py"))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_answers_help(script: str) -> None:
    done = _run(f"bench/{script}", "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()


@pytest.mark.parametrize("workload", ["rag3", "mix"])
def test_the_ingest_stage_benchmark_measures_every_record(workload: str) -> None:
    done = _run("bench/ingest.py", "--stage-only", "--traces", "300", "--workload", workload)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["messages"] == figures["records"] == 300
    assert figures["cpu_us_per_msg"] > 0
