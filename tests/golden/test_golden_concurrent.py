"""Two writers adding to one golden file at once keep every row (issue 38 item 7: two processes
adding 150 rows each to one JSONL file all reported success, and the file had 172): `golden add`
and the review UI's `g` read, check and rename under the file's lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from monitor.golden import load_golden

REPO = Path(__file__).resolve().parents[2]
ROWS = 150

# One writer: waits for the start file, then adds ROWS production rows one by one (the code
# `golden add` and the review UI's `g` run), and prints how many it was told were added.
WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from monitor.golden.production import add_production_row
    from monitor.golden.schema import GoldenRow

    golden, start, who, n = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    Path(f"{start}.{who}.ready").touch()  # imported: the parent starts both together
    while not start.exists():
        time.sleep(0.005)
    added = 0
    for i in range(n):
        trace = f"{who}{i:031x}"
        row = GoldenRow.model_validate({
            "id": f"prod-{who}-{i}", "query": f"question {i} of writer {who}?", "query_type": "lookup",
            "relevant_chunk_ids": [f"c{i}"], "answerable": True, "source": "production",
            "trace_id": trace, "added_on": "2025-12-01",
        })
        add_production_row(golden, row)
        added += 1
    print(json.dumps({"added": added}))
    """
)


def test_two_writers_adding_150_rows_each_keep_all_300(tmp_path: Path) -> None:
    golden = tmp_path / "golden.jsonl"
    start = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(golden), str(start), who, str(ROWS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for who in ("a", "b")
    ]
    deadline = time.monotonic() + 120
    while not all(Path(f"{start}.{w}.ready").exists() for w in "ab"):  # both imported and waiting
        assert time.monotonic() < deadline, "a writer did not start"
        time.sleep(0.01)
    start.touch()
    reported = 0
    for w in writers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
        reported += json.loads(out)["added"]
    assert reported == 2 * ROWS
    check = load_golden(golden)
    assert check.ok, check.errors[:3]
    assert len(check.rows) == 2 * ROWS  # before the lock: 172 of 300
    assert {r.id for r in check.rows} == {f"prod-{w}-{i}" for w in "ab" for i in range(ROWS)}
    assert not list(tmp_path.glob(".golden.jsonl.*.tmp"))  # no temporary file left behind
