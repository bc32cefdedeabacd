"""`make bench-guard` (bench/instructions.py --guard) fails a stage that got slower: a reference
measured here, then the same tree with 10 % of the reference's instructions a message planted in
the measured batches. Under callgrind, ~15 s a run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _guard(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "bench/instructions.py", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _calibrated(out: str) -> float:
    found = re.search(r"^span1 +total +[\d,]+ +[\d,]+ +[\d.]+ +([\d.]+)$", out, re.M)
    assert found, out
    return float(found.group(1))


def test_the_guard_passes_the_tree_it_measured_and_fails_a_planted_ten_percent(tmp_path: Path) -> None:
    reference = tmp_path / "reference.json"
    done = _guard(
        "--workloads", "span1", "--traces", "100", "--write-reference", "--reference", str(reference)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(reference.read_text())["workloads"]["span1"]["instructions_per_msg"] > 0

    same = _guard("--guard", "--reference", str(reference))
    assert same.returncode == 0, same.stdout + same.stderr[-2000:]
    assert abs(_calibrated(same.stdout) - 1.0) < 0.01  # counts repeat: no load, no noise

    planted = _guard("--guard", "--reference", str(reference), "--plant", "0.1")
    assert planted.returncode == 1, planted.stdout + planted.stderr[-2000:]
    assert "FAILED: span1" in planted.stdout
    assert 1.08 < _calibrated(planted.stdout) < 1.2
