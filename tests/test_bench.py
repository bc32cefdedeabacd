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


def test_the_ingest_stage_benchmark_compares_two_trees_in_one_run() -> None:
    """`--before DIR`: DIR's stage and this tree's, alternating; here DIR is this tree itself."""
    done = _run("bench/ingest.py", "--stage-only", "--traces", "200", "--before", ".", "--repeat", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(figures["after_over_before_per_round"]) == 2
    assert figures["after_over_before_median"] > 0


def test_the_raw_consumer_is_set_up_as_the_sidecar_sets_up_its_own() -> None:
    """(a) of bench/ingest.py copies `KafkaSource`'s consumer settings, captured from the real
    code without a broker: a change to `KafkaSource` that breaks the capture fails here, not after
    a full run's fill (issue 41's `Metrics.consumer` did, unseen)."""
    from bench.ingest import raw_consumer_settings

    settings = raw_consumer_settings()
    assert settings["enable_auto_commit"] is False
    assert settings["max_poll_records"] > 0
    assert not {"group_id", "bootstrap_servers", "client_id"} & settings.keys()


def test_workers_see_the_group_drained_only_when_every_worker_has_settled(tmp_path: Path) -> None:
    """`--workers`: a worker's slot is seen by the others; the group is done only when the records
    of all add up and every worker has settled; the figures combine over one clock."""
    from bench.ingest import Peers, combine_workers

    path = str(tmp_path / "peers")
    Peers.create(path, 2)
    one, two = Peers(path, 2), Peers(path, 2)
    one.post(0, 60, 600, True)
    assert two.totals() == (60, 600, False)  # the second has not posted: not settled
    two.post(1, 40, 400, False)
    assert one.totals() == (100, 1000, False)
    two.post(1, 40, 400, True)
    assert one.totals() == (100, 1000, True)
    one.close()
    two.close()

    def worker(first: float | None, end: float, counted: int, cpu: float) -> dict[str, object]:
        return {
            "role": "on",
            "first_at": first,
            "end_at": end,
            "decoded_at": end - 0.5,
            "counted": counted,
            "fetches": 10,
            "cpu_us_per_msg": cpu,
            "stage_cpu_us_per_msg": cpu / 2,
            "sampled": 3,
            "judged": 0,
            "judge_skipped": 0,
            "results_lines": 0,
            "fetched": counted + 5,
            "records": counted,
            "rejected": 0,
            "join_seconds": 15.0,
            "fetch_wait_seconds": 1.0,
            "peak_rss_mib": 100.0,
        }

    both = combine_workers([worker(10.0, 20.0, 3000, 30.0), worker(11.0, 20.004, 1000, 50.0)])
    assert both["msgs_per_s"] == pytest.approx(4000 / 10.0)  # the first fetch of any to the first end seen
    assert both["msgs_per_s_decoded"] == pytest.approx(4000 / 9.5)
    assert both["cpu_us_per_msg"] == pytest.approx((3000 * 30 + 1000 * 50) / 4000)
    assert both["peak_rss_mib"] == 200.0 and both["sampled"] == 6 and both["per_worker_msgs"] == [3000, 1000]
    idle = combine_workers([worker(10.0, 20.0, 3000, 30.0), worker(None, 20.002, 0, 0.0)])
    assert idle["msgs_per_s"] == pytest.approx(300.0) and idle["cpu_us_per_msg"] == pytest.approx(30.0)


def test_leave_one_family_out_never_tunes_on_the_family_it_reports() -> None:
    """bench/lexical_judge.py --lofo: the setting a family is judged with is chosen on the other
    families alone. Setting 1 is far better on family `a` and worse on `b` and `c`: `a` held out
    gets setting 0, chosen by b and c, though a alone would pick setting 1."""
    from bench.lexical_judge import Tally, _choose

    def tally(grounded_right: int, flagged_right: int, uncertain: int = 0) -> Tally:
        t = Tally()
        for i in range(10):
            t.add(False, "uncertain" if i < uncertain else "grounded" if i < grounded_right else "flagged")
            t.add(True, "flagged" if i < flagged_right else "grounded")
        return t

    per_setting = [
        {"a": tally(5, 5), "b": tally(9, 9), "c": tally(9, 8)},
        {"a": tally(10, 10), "b": tally(8, 8), "c": tally(8, 8)},
        {"a": tally(10, 10), "b": tally(10, 10, uncertain=9), "c": tally(10, 10, uncertain=9)},
    ]
    assert _choose(per_setting, ["b", "c"]) == 0  # a held out
    # b held out: the worst tuning family decides, so a's 0.5 at setting 0 rules that one out
    assert _choose(per_setting, ["a", "c"]) == 1
    # a setting that decides too little (10 % of b's and c's grounded cases) is never chosen,
    # however accurate its few decided cases are
    assert _choose([per_setting[2], per_setting[0]], ["b", "c"]) == 1


def test_a_family_built_from_the_same_rows_is_held_out_with_it() -> None:
    from bench.lexical_judge import FAMILIES, tuning_families

    assert tuning_families("hotpotqa", FAMILIES) == ["squad2", "clapnq", "multihop_rag", "yes_no_multihop"]
    assert tuning_families("same_kind_swap", FAMILIES) == ["squad2", "clapnq", "yes_no_multihop"]


def test_leave_one_family_out_reports_every_family_and_the_worst() -> None:
    done = _run("bench/lexical_judge.py", "--sample", "--lofo", "--families", "squad2,multihop_rag")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line[:1].isalpha()}
    assert {"squad2", "multihop_rag"} <= rows.keys()
    worst = min(("squad2", "multihop_rag"), key=lambda f: float(rows[f][3]))
    assert f"worst held-out family: {worst}," in done.stdout
