"""Calibration: kappa, confusion matrices, the labels file, and judge-twice disagreement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import workload_labels

from monitor.ingest.decode import flat_record
from monitor.judge import LexicalJudge
from monitor.judge.calibrate import (
    Confusion,
    Labels,
    cohen_kappa,
    compare,
    disagreements,
    format_report,
    load_labels,
    parse_labelled,
    run_calibration,
    self_agreement,
)
from monitor.llm.outcome import JudgeOutcome
from monitor.model import Claim, Judgement

META: dict[str, Any] = {"query_type": "lookup", "service": "s", "backend": "t", "model": "m"}


def judgement(
    trace: str = "t1",
    supported: tuple[bool, ...] = (True,),
    answerable: bool = True,
    admits: bool = False,
    relevance: int = 3,
) -> Judgement:
    return Judgement.from_verdicts(
        [Claim(f"c{i}", s, "k" if s else None) for i, s in enumerate(supported)],
        answerable_from_context=answerable,
        answer_admits_uncertainty=admits,
        answer_relevance=relevance,  # type: ignore[arg-type]
        trace_id=trace,
        **META,
    )


def test_kappa_known_values() -> None:
    # po = 0.7, pe = (25*30 + 25*20) / 50^2 = 0.5 -> kappa 0.4
    assert cohen_kappa(Confusion(tp=20, fp=5, fn=10, tn=15)) == pytest.approx(0.4)
    assert cohen_kappa(Confusion(tp=10, tn=10)) == pytest.approx(1.0)
    assert cohen_kappa(Confusion(fp=10, fn=10)) == pytest.approx(-1.0)
    assert cohen_kappa(Confusion()) is None
    assert cohen_kappa(Confusion(tn=40)) is None  # both constant: chance agreement is 1


def test_compare_counts_and_warns() -> None:
    pairs = [
        (Labels(faithful=True, hallucinated=False, answerable=True), judgement("a", (True, True))),
        (Labels(faithful=False, hallucinated=False, answerable=True), judgement("b", (True, False))),
        (Labels(faithful=False, hallucinated=True, answerable=False), judgement("c", (True,))),  # judge wrong
        (Labels(faithful=True, hallucinated=True), judgement("d", (), answerable=False)),
        (Labels(faithful=True), Judgement.failed(JudgeOutcome.TIMEOUT, "timeout: x", trace_id="e", **META)),
        (Labels(claims_supported=(True, False)), judgement("f", (True, False))),
        (Labels(claims_supported=(True,)), judgement("g", (True, False))),  # misaligned
    ]
    report = compare(pairs)
    assert (report.judged, report.failed, report.claims_misaligned) == (6, 1, 1)
    assert report.errors == ["timeout: x"]
    f = report.checks["faithful"].confusion
    assert (f.tp, f.fp, f.fn, f.tn) == (2, 1, 0, 1)  # a refusal-like empty answer counts as faithful
    h = report.checks["hallucinated"].confusion
    assert (h.tp, h.fp, h.fn, h.tn) == (1, 0, 1, 2)
    cs = report.checks["claim_supported"].confusion
    assert (cs.tp, cs.tn, cs.fp, cs.fn) == (1, 1, 0, 0)
    assert report.checks["answerable"].kappa is not None
    assert report.warning  # a few items with errors: kappa below 0.6 somewhere
    d = json.loads(json.dumps(report.to_json_dict(), allow_nan=False))
    assert d["checks"]["faithful"]["confusion"] == {"tp": 2, "fp": 1, "fn": 0, "tn": 1}
    text = format_report(report)
    assert "faithful" in text and "WARNING" in text


def test_labels_file_parsing(tmp_path: Path) -> None:
    record = {
        "trace_id": "ab" * 16,
        "query": "q?",
        "query_type": "lookup",
        "chunks": [{"id": "c1", "content": "text", "score": 0.5}],
        "answer": "a.",
    }
    lines = [
        {"record": record, "labels": {"faithful": True, "hallucinated": False, "answerable": True}},
        {**record, "labels": {"faithful": [True, {"supported": False}]}},  # flat, per-claim
        {"record": record, "labels": {}},
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    items = load_labels(path, flat_record)
    assert len(items) == 3 and items[0].record.chunks[0].content == "text"
    assert items[1].labels == Labels(faithful=False, claims_supported=(True, False))
    assert items[2].labels == Labels()

    bad_lines: list[tuple[dict[str, Any], str]] = [
        ({"record": record}, 'missing "labels"'),
        ({"record": {**record, "query": None}, "labels": {}}, "missing_query"),
        ({"record": record, "labels": {"hallucinated": "yes"}}, "hallucinated"),
        ({"record": record, "labels": {"faithful": [1, 0]}}, "per-claim"),
    ]
    for bad, message in bad_lines:
        with pytest.raises(ValueError, match=message):
            parse_labelled(bad, flat_record)
    path.write_text(json.dumps(lines[0]) + "\n" + json.dumps({"record": record}) + "\n")
    with pytest.raises(ValueError, match=r"labels.jsonl:2"):
        load_labels(path, flat_record)


async def test_run_calibration_lexical_on_workload_truth(tmp_path: Path) -> None:
    """Labels = the workload's ground truth, written as a labels file, judged by the lexical judge."""
    path = workload_labels(tmp_path / "labels.jsonl", 120, seed=99)
    items = load_labels(path, flat_record)
    report, judgements = await run_calibration(LexicalJudge(), items, concurrency=4)
    print("\n" + format_report(report))
    assert len(judgements) == 120 and report.judged == 120 and report.failed == 0
    assert report.checks["faithful"].kappa is not None and report.checks["faithful"].kappa > 0.9
    assert not report.checks["faithful"].warning


def test_judge_twice() -> None:
    a = judgement("t", (True, True))
    assert disagreements(a, judgement("t", (True, True, True))) == []  # another claim split: same decision
    assert disagreements(a, judgement("t", (True, False))) == ["faithful"]
    assert disagreements(a, judgement("t", (True, True), answerable=False, relevance=2)) == [
        "hallucinated",
        "answerable",
        "relevance",
    ]
    failed = Judgement.failed(JudgeOutcome.RATE_LIMITED, "x", trace_id="t", **META)
    assert disagreements(a, failed) == ["failed"] and disagreements(failed, failed) == []
    with pytest.raises(ValueError):
        disagreements(a, judgement("other"))

    pairs = [(judgement(str(i), (i % 2 == 0,)), judgement(str(i), (i % 2 == 0,))) for i in range(10)]
    assert self_agreement(pairs).checks["faithful"].kappa == pytest.approx(1.0)
    flipped = [(x, judgement(x.trace_id, (not x.claims[0].supported,))) for x, _ in pairs]
    report = self_agreement(flipped)
    assert report.checks["faithful"].kappa == pytest.approx(-1.0) and report.warning
