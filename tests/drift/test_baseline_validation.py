"""A drift baseline is validated when it loads: strata present and non-empty where the file has
them and adding up to their slice, sums finite and consistent, means within the metric's range.
A file that is not is a one-line error and exit 2 at start-up, never a crash on the first record
(issue 38 item 2: `"strata": {}` loaded and the first results line raised ZeroDivisionError, on
every restart; a faithfulness mean of 50 and `Infinity` loaded)."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from test_drift_baseline import cli

from monitor.contracts.metrics import Metrics
from monitor.drift import DriftMonitor, DriftPolicy
from monitor.drift.reference import BaselineFileError, load_baseline

STRATA = {
    "rate": {"records": 100, "sum_w": 100.0, "sum_w2": 100.0, "sum_wy": 10.0, "sum_wy2": 10.0,
             "sum_y": 10.0, "sum_y2": 10.0, "sum_y3": 10.0},
    "no_chunks": {"records": 50, "sum_w": 200.0, "sum_w2": 800.0, "sum_wy": 40.0, "sum_wy2": 40.0,
                  "sum_y": 10.0, "sum_y2": 10.0, "sum_y3": 10.0},
}  # fmt: skip
GOOD: dict[str, Any] = {
    "kind": "rag-monitor-drift-baseline",
    "schema_version": 2,
    "version": "sha256:0123456789ab",
    "created_at": "2027-01-15T08:00:00+00:00",
    "source": {"kind": "results", "path": "results.jsonl"},
    "slices": {
        "lookup": {
            "hallucination": {"records": 150, "sum_w": 300.0, "sum_w2": 900.0, "sum_wy": 50.0,
                              "sum_wy2": 50.0, "strata": STRATA},
        }
    },
}  # fmt: skip


def slice_(doc: dict[str, Any]) -> dict[str, Any]:
    hallucination: dict[str, Any] = doc["slices"]["lookup"]["hallucination"]
    return hallucination


def watch(path: Path) -> None:
    """What the drift stage does with a loaded file: a detector per slice, fed every stratum."""
    monitor = DriftMonitor(
        DriftPolicy(), Metrics(CollectorRegistry()).drift, load_baseline(path).references()
    )
    for i in range(50):
        for stratum in ("rate", "no_chunks", "", "unseen"):
            monitor.observe("lookup", 1.0 + i % 3, [("hallucination", float(i % 2))], stratum=stratum)


def write(tmp_path: Path, doc: Any, text: str | None = None) -> Path:
    path = tmp_path / "b.json"
    path.write_text(text if text is not None else json.dumps(doc))
    return path


def test_a_good_file_loads_and_watches(tmp_path: Path) -> None:
    watch(write(tmp_path, GOOD))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(strata={}), r"slices\.lookup\.hallucination\.strata: .*at least 1 item"),
        (lambda s: s.update(sum_wy=50 * 300.0, sum_wy2=50 * 50 * 300.0), r"mean 50 is outside hallucination"),
        (lambda s: s["strata"].pop("no_chunks"), r"the strata hold 100 records .* must add up"),
        (lambda s: s.update(sum_w=100.0), r"sum_w 100 is below records 150"),
        (lambda s: s["strata"]["rate"].update(sum_y3=500.0), r"stratum 'rate': sum_y3 500 is more than"),
    ],
)
def test_a_file_that_could_not_work_is_one_line_at_load(tmp_path: Path, change: Any, message: str) -> None:
    doc = copy.deepcopy(GOOD)
    change(slice_(doc))
    with pytest.raises(BaselineFileError, match=message) as caught:
        load_baseline(write(tmp_path, doc))
    assert "\n" not in str(caught.value)


def test_infinity_and_nan_do_not_load(tmp_path: Path) -> None:
    for word in ("Infinity", "NaN"):
        text = json.dumps(GOOD).replace('"sum_w2": 900.0', f'"sum_w2": {word}')
        with pytest.raises(BaselineFileError, match="finite"):
            load_baseline(write(tmp_path, None, text))


def test_the_sidecar_refuses_an_empty_strata_file_at_start_with_exit_2(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    slice_(doc)["strata"] = {}
    bad = write(tmp_path, doc)
    config = tmp_path / "c.yaml"
    config.write_text(
        f"alerts:\n  drift:\n    baseline_file: {bad}\nkafka:\n  bootstrap_servers: 127.0.0.1:1\n"
    )
    done = cli("run", "--config", str(config), "--metrics-port", "0")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: drift baseline {bad}: slices.lookup.hallucination.strata")


HOSTILE = [0, -1, 1, 1e-300, 1e300, 10**20, 0.5, 3.0, "x", None, [], {}, True]


def test_fuzzed_files_either_load_and_watch_or_are_one_line_errors(tmp_path: Path) -> None:
    """500 files, each the good one with one to three numbers replaced by hostile values: every
    one either loads and is watched without an exception, or is a BaselineFileError."""
    rng = random.Random(38)
    paths: list[tuple[dict[str, Any], str]] = []

    def numbers(node: dict[str, Any]) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                numbers(value)
            elif isinstance(value, int | float):
                paths.append((node, key))

    loaded = refused = 0
    for _ in range(500):
        doc = copy.deepcopy(GOOD)
        paths.clear()
        numbers(doc["slices"])
        for node, key in rng.sample(paths, rng.randint(1, 3)):
            node[key] = rng.choice(HOSTILE)
        path = write(tmp_path, doc)
        try:
            load_baseline(path)
        except BaselineFileError as exc:
            assert "\n" not in str(exc)
            refused += 1
            continue
        watch(path)
        loaded += 1
    assert refused > 100 and loaded > 10  # both sides exercised
