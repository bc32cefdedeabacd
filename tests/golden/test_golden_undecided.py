"""The golden report counts decided rows only: a row whose faithfulness the judge could not
decide is out of the score and its interval, and the report shows the decided share (the real
anthropic SDK against the local fake API, the oracle target answering every row)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from fake_llm import FakeAPI, Reply, anthropic_message, good_output, shown
from prometheus_client import CollectorRegistry
from rich.console import Console

from monitor.golden import load_golden, run_replay
from monitor.golden.gauges import GoldenGauges
from monitor.golden.render import render_report

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "examples" / "golden.jsonl"


def abstains(answer: str) -> bool:
    """The fake judge abstains on every claim of about half the answers."""
    return len(answer) % 2 == 1


def judge_reply(path: str, body: dict[str, Any]) -> Reply:
    out = good_output(body)
    answer, _ = shown(body)
    if abstains(answer):
        out["claims"] = [{**c, "verdict": "uncertain", "quotes": []} for c in out["claims"]]
    return Reply(body=anthropic_message(out))


async def test_undecided_rows_are_out_of_faithfulness_and_its_interval(api: FakeAPI, tmp_path: Path) -> None:
    from monitor.judge import create_judge

    golden = tmp_path / "g.jsonl"
    golden.write_text("".join(line + "\n" for line in GOLDEN.read_text().splitlines()[:24]))
    rows = [r for r in load_golden(golden).rows if r.answerable]
    api.default = judge_reply
    judge = create_judge("anthropic", {"base_url": api.url, "api_key": api.key, "max_retries": 0})
    try:
        report = await run_replay(rows, "support:oracle_target", judge=judge)
    finally:
        await judge.aclose()
    data = report.to_json_dict()
    undecided = [r for r in data["rows"] if abstains(r["answer"])]
    decided = [r for r in data["rows"] if not abstains(r["answer"])]
    assert undecided and decided
    assert all(r["undecided"] == "unplaced" and r["faithfulness"] is None for r in undecided)
    assert all(r["undecided"] is None and r["faithfulness"] is not None for r in decided)
    overall = report.metrics["all"]
    assert (overall["judged_claims"], overall["undecided"]) == (len(decided), len(undecided))
    assert overall["decided_share"] == len(decided) / len(rows)
    # The score and its interval rest on the decided rows: as if the undecided were not there.
    mean = sum(r["faithfulness"] for r in decided) / len(decided)
    assert overall["faithfulness"] == mean
    iv = report.intervals["all"]["faithfulness"]
    assert iv is not None and iv.low <= mean <= iv.high
    # The terminal report says how much of the run the score covers.
    out = io.StringIO()
    render_report(report, Console(file=out, width=200, color_system=None))
    share = len(decided) / len(rows)
    assert (
        f"overall: faithfulness on {share:.0%} of the answers to judge ({len(decided)}), " in out.getvalue()
    )
    assert f"{1 - share:.0%} undecided ({len(undecided)})" in out.getvalue()
    assert json.loads(json.dumps(data))["metrics"]["all"]["decided_share"] == share
    # And the gauges export it beside the score, overall and per query type.
    registry = CollectorRegistry()
    GoldenGauges(registry).publish(report)
    assert registry.get_sample_value("ragmon_golden_judge_decided_ratio", {"query_type": "all"}) == share
    for group, stats in report.metrics.items():
        got = registry.get_sample_value("ragmon_golden_judge_decided_ratio", {"query_type": group})
        assert got == stats["decided_share"], group
