"""Calibration: kappa, confusion matrices, the labels file, and judge-twice disagreement."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import workload_labels
from typer.testing import CliRunner

from monitor.cli import app
from monitor.contracts.model import Claim, Judgement
from monitor.ingest.decode import flat_record
from monitor.judge import LexicalJudge
from monitor.judge.calibrate import (
    Confusion,
    Labels,
    cohen_kappa,
    compare,
    disagreements,
    format_report,
    kappa_interval,
    last_review,
    load_labels,
    parse_labelled,
    run_calibration,
    self_agreement,
)
from monitor.llm.outcome import JudgeOutcome

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


def _confusions(tp: int, fp: int, fn: int, tn: int) -> list[Confusion]:
    """One record-level item per record."""
    return [Confusion(tp=1)] * tp + [Confusion(fp=1)] * fp + [Confusion(fn=1)] * fn + [Confusion(tn=1)] * tn


def test_kappa_interval_is_seeded_covers_the_estimate_and_narrows_with_labels() -> None:
    # kappa 0.4 at every size (po 0.7, pe 0.5): only the number of labels changes.
    widths = {}
    for scale in (1, 4, 16):  # 50, 200, 800 records
        items = _confusions(20 * scale, 5 * scale, 10 * scale, 15 * scale)
        iv = kappa_interval(items, resamples=2000, confidence=0.95, rng=random.Random(f"s{scale}"))
        assert iv is not None and iv[0] < 0.4 < iv[1]
        assert iv == kappa_interval(items, resamples=2000, confidence=0.95, rng=random.Random(f"s{scale}"))
        widths[len(items)] = iv[1] - iv[0]
    # The standard error of kappa goes as 1/sqrt(n): a quarter of the labels, twice the width.
    assert 0.4 < widths[50] < 0.6, widths
    assert widths[200] == pytest.approx(widths[50] / 2, rel=0.2)
    assert widths[800] == pytest.approx(widths[200] / 2, rel=0.2)
    assert kappa_interval(items[:1], resamples=100, confidence=0.95, rng=random.Random(0)) is None
    assert (
        kappa_interval(_confusions(0, 0, 0, 30), resamples=100, confidence=0.95, rng=random.Random(0)) is None
    )


def test_intervals_resample_records_so_a_record_s_claims_stay_together() -> None:
    """Ten records of ten claims each, the judge right or wrong on a whole record at once: 100
    claims, but ten independent units. Resampling claims would give a far narrower interval."""
    pairs = []
    for i in range(20):
        label = tuple([i % 2 == 0] * 5 + [True] * 5)
        said = label if i % 4 else tuple(not x for x in label[:5]) + label[5:]
        pairs.append((Labels(claims_supported=label), judgement(f"t{i}", said)))
    report = compare(pairs, resamples=2000, seed=1)
    r = report.checks["claim_supported"]
    assert (r.records, r.confusion.n) == (20, 200)
    by_claim = kappa_interval(
        [Confusion(tp=1)] * r.confusion.tp
        + [Confusion(fp=1)] * r.confusion.fp
        + [Confusion(fn=1)] * r.confusion.fn
        + [Confusion(tn=1)] * r.confusion.tn,
        resamples=2000,
        confidence=0.95,
        rng=random.Random(1),
    )
    assert r.interval is not None and by_claim is not None
    assert r.interval[1] - r.interval[0] > 2 * (by_claim[1] - by_claim[0])


def test_per_query_type_kappas_and_the_report() -> None:
    def j(trace: str, qt: str, supported: bool) -> Judgement:
        meta = {**META, "query_type": qt}
        return Judgement.from_verdicts(
            [Claim("c", supported, "k" if supported else None)],
            answerable_from_context=True,
            answer_admits_uncertainty=False,
            answer_relevance=3,
            trace_id=trace,
            **meta,
        )

    pairs = []
    for i in range(60):  # lookup: the judge agrees; multi_hop: it says "faithful" to everything
        truth = i % 3 != 0
        pairs.append((Labels(faithful=truth), j(f"l{i}", "lookup", truth)))
        pairs.append((Labels(faithful=truth), j(f"m{i}", "multi_hop", True)))
    report = compare(pairs, resamples=500, seed=3)
    lookup, multi = report.by_query_type["lookup"]["faithful"], report.by_query_type["multi_hop"]["faithful"]
    assert lookup.kappa == pytest.approx(1.0) and not lookup.warning and lookup.interval == (1.0, 1.0)
    assert multi.kappa == pytest.approx(0.0) and multi.warning and multi.records == 60
    overall = report.checks["faithful"]
    assert overall.records == 120 and overall.interval is not None
    assert overall.interval[0] < overall.kappa < overall.interval[1]  # type: ignore[operator]
    doc = json.loads(json.dumps(report.to_json_dict(), allow_nan=False))
    assert doc["by_query_type"]["multi_hop"]["faithful"]["confusion"] == {
        "tp": 40,
        "fp": 20,
        "fn": 0,
        "tn": 0,
    }
    assert doc["bootstrap"] == {"resamples": 500, "confidence": 0.95, "unit": "record"}
    assert len(doc["checks"]["faithful"]["interval"]) == 2
    text = format_report(report)
    assert "query_type multi_hop:" in text and "95% interval" in text
    assert compare(pairs).checks["faithful"].interval is None  # no resamples: no interval


def test_reviewed_at_and_the_last_review(tmp_path: Path) -> None:
    record = {"trace_id": "ab" * 16, "query": "q?", "chunks": [{"id": "c1", "content": "t"}], "answer": "a."}
    lines = [
        {"record": record, "labels": {"faithful": True}, "reviewed_at": 1_790_000_000},
        {**record, "labels": {"faithful": True}, "reviewed_at": "2026-11-30T12:00:00Z"},  # flat
        {"record": record, "labels": {"faithful": True}},
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    items = load_labels(path, flat_record)
    assert [i.reviewed_at for i in items] == [1_790_000_000.0, 1_796_040_000.0, None]
    assert last_review(path, items) == 1_796_040_000.0
    os.utime(path, (1_700_000_000, 1_700_000_000))
    assert last_review(path, items[2:]) == 1_700_000_000  # no line says: the file's mtime
    with pytest.raises(ValueError, match="reviewed_at"):
        parse_labelled({"record": record, "labels": {}, "reviewed_at": "last week"}, flat_record)


def test_calibrate_writes_the_textfile_the_alerts_read(tmp_path: Path) -> None:
    labels = workload_labels(tmp_path / "labels.jsonl", 120, seed=99)
    with labels.open("a") as f:  # one more, reviewed later than the file was written
        f.write(labels.read_text().splitlines()[0][:-1] + ', "reviewed_at": 1796000000}\n')
    prom, report = tmp_path / "kappa.prom", tmp_path / "report.json"
    args = ["calibrate", "--labels", str(labels), "--metrics-file", str(prom), "--report", str(report)]
    out = CliRunner().invoke(app, [*args, "--resamples", "300"])
    assert out.exit_code in (0, 1), out.output
    assert "95% interval" in out.output and "query_type lookup:" in out.output
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    kappa = {
        (s.labels["check"], s.labels["bound"]): s.value
        for s in families["ragmon_judge_agreement_kappa"].samples
    }
    assert {s.labels["judge"] for s in families["ragmon_judge_agreement_kappa"].samples} == {"lexical"}
    doc = json.loads(report.read_text())
    faithful = doc["checks"]["faithful"]
    assert kappa["faithful", "estimate"] == pytest.approx(faithful["kappa"])
    assert [kappa["faithful", "lower"], kappa["faithful", "upper"]] == pytest.approx(faithful["interval"])
    assert kappa["faithful", "lower"] <= kappa["faithful", "estimate"] <= kappa["faithful", "upper"]
    assert {(s.labels["check"], s.value) for s in families["ragmon_judge_labels"].samples} >= {
        ("faithful", 121)
    }
    (last,) = families["ragmon_judge_last_review_timestamp_seconds"].samples
    assert last.value == 1796000000
    # The same labels and seed: the same intervals.
    again = CliRunner().invoke(app, [*args, "--resamples", "300"])
    assert again.exit_code == out.exit_code and json.loads(report.read_text()) == doc


def test_ten_labels_are_too_few_for_a_verdict_not_an_unreliable_judge(tmp_path: Path) -> None:
    """Below the labels the `RagmonJudgeUnreliable` alert needs (50 a check), calibrate gives no
    verdict: exit 3 and "too few labels", not exit 1 and "not reliable"."""
    labels = workload_labels(tmp_path / "labels.jsonl", 10, seed=3)
    out = CliRunner().invoke(app, ["calibrate", "--labels", str(labels), "--resamples", "100"])
    assert out.exit_code == 3, out.output
    assert "too few labels: no check has the 50 labelled records" in out.output
    assert "at most 10 records on a check" in out.output
    assert "not reliable" not in out.output and "kappa < 0.60" not in out.output
    assert "too few labels for a verdict (< 50)" in out.output


def test_the_alert_and_calibrate_need_the_same_labels(repo_root: Path) -> None:
    from monitor.judge.calibrate import MIN_LABELS

    for rules in ("deploy/prometheus/alerts.yml", "helm/rag-monitor/rules/alerts.yml"):
        assert (
            f"max by (check, judge) (ragmon_judge_labels) >= {MIN_LABELS}" in (repo_root / rules).read_text()
        )


def test_an_undefined_kappa_with_full_agreement_is_not_called_unreliable() -> None:
    """Every label "not hallucinated" and the judge agreeing on all 60: kappa is undefined (chance
    agreement is 1), which says nothing against the judge."""
    pairs = [(Labels(hallucinated=False), judgement(str(i), (True,))) for i in range(60)]
    report = compare(pairs, min_labels=50)
    check = report.checks["hallucinated"]
    assert check.kappa is None and check.confusion.agreement == 1.0
    assert check.status == "undefined" and not check.warning and not report.warning
    assert report.no_verdict
    row = next(line for line in format_report(report).splitlines() if line.startswith("hallucinated"))
    assert "kappa < 0.60" not in row and "WARNING" not in row
    assert "kappa undefined: judge and labels one class only" in row
