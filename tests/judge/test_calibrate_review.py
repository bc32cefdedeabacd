"""`calibrate` on labels of the review queue: kappa on its uniform share, weighted, by default (the
hard cases left out, and said so); every label, unweighted and called biased, on request; labels
files without the queue's `review` object read as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import workload_labels
from typer.testing import CliRunner

from monitor.cli import app
from monitor.contracts.model import Claim, Judgement
from monitor.ingest.decode import flat_record
from monitor.judge.calibrate import Labels, compare, load_labels, parse_labelled, select_labels

META: dict[str, Any] = {"query_type": "lookup", "service": "s", "backend": "t", "model": "m"}


def judgement(trace: str, faithful: bool) -> Judgement:
    return Judgement.from_verdicts(
        [Claim("c", faithful, "k" if faithful else None)],
        answerable_from_context=True,
        answer_relevance=3,
        trace_id=trace,
        **META,
    )


def test_a_weight_counts_as_that_many_copies_of_the_label() -> None:
    """Kappa on weighted labels is kappa on the population they stand for: an integer weight w is
    w copies of the label, in the estimate and its confusion cells."""
    said = [True, True, False, True, False, False, True, True]
    truth = [True, False, False, True, True, False, True, False]
    weights = [1, 3, 2, 5, 1, 4, 2, 1]
    weighted = compare(
        [
            (Labels(faithful=t, weight=float(w)), judgement(f"t{i}", s))
            for i, (s, t, w) in enumerate(zip(said, truth, weights, strict=True))
        ]
    )
    copies = compare(
        [
            (Labels(faithful=t), judgement(f"t{i}-{k}", s))
            for i, (s, t, w) in enumerate(zip(said, truth, weights, strict=True))
            for k in range(w)
        ]
    )
    pairs = enumerate(zip(said, truth, strict=True))
    plain = compare([(Labels(faithful=t), judgement(f"t{i}", s)) for i, (s, t) in pairs])
    w, c, p = (r.checks["faithful"] for r in (weighted, copies, plain))
    assert w.kappa == pytest.approx(c.kappa) and w.confusion.agreement == pytest.approx(c.confusion.agreement)
    assert w.kappa != pytest.approx(p.kappa)  # the weights matter here
    assert w.records == len(said) and w.confusion.n == len(said)  # counts stay labelled items


def labels_file(path: Path, tmp: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The workload's true labels as the review UI writes them: 90 lines of the uniform share
    (weight 50: a 2 % share of records sampled at 1), and 40 hard cases whose labels a person
    reversed (where the judge goes wrong, as hard cases are chosen to be)."""
    truth = workload_labels(tmp / "truth.jsonl", 130, seed=5)
    docs = [json.loads(line) for line in truth.read_text().splitlines()]
    for i, doc in enumerate(docs):
        if i < 90:
            doc["review"] = {"reasons": ["uniform"], "uniform": True, "weight": 50.0, "queued_at": 1.8e9}
        else:
            doc["labels"]["faithful"] = not doc["labels"]["faithful"]
            doc["review"] = {"reasons": ["boundary"], "uniform": False, "queued_at": 1.8e9}
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path, docs


def calibrate(labels: Path, report: Path, *extra: str) -> tuple[int, str, dict[str, Any]]:
    out = CliRunner().invoke(
        app, ["calibrate", "--labels", str(labels), "--report", str(report), "--resamples", "200", *extra]
    )
    return out.exit_code, out.output, json.loads(report.read_text()) if report.exists() else {}


def without_review(docs: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps({k: v for k, v in d.items() if k != "review"}) + "\n" for d in docs))
    return path


def test_calibrate_estimates_on_the_uniform_share_and_says_what_it_left_out(tmp_path: Path) -> None:
    labels, docs = labels_file(tmp_path / "labels.jsonl", tmp_path)
    code, output, doc = calibrate(labels, tmp_path / "r.json")
    assert code in (0, 1), output
    assert "left out: 40 hard-case labels" in output and "uniform share: 90 labels, weighted" in output
    assert doc["selection"] == {
        "weighted": True,
        "uniform_labels": 90,
        "hard_case_labels": 40,
        "labels_without_review": 0,
        "left_out": 40,
        "biased": False,
    }
    # The same as calibrating the 90 alone: a constant weight changes no kappa, and the hard
    # cases, which the judge gets wrong, do not drag it down.
    _, _, alone = calibrate(without_review(docs[:90], tmp_path / "uniform.jsonl"), tmp_path / "u.json")
    faithful = doc["checks"]["faithful"]
    assert faithful["records"] == 90
    assert faithful["kappa"] == pytest.approx(alone["checks"]["faithful"]["kappa"])
    assert faithful["interval"] == pytest.approx(alone["checks"]["faithful"]["interval"])
    # Every label, on request: the hard cases in, unweighted, said to be biased.
    code, output, every = calibrate(labels, tmp_path / "a.json", "--all-labels")
    assert code in (0, 1) and "BIASED" in output and every["selection"]["biased"] is True
    _, _, plain = calibrate(without_review(docs, tmp_path / "all.jsonl"), tmp_path / "p.json")
    assert every["checks"]["faithful"]["kappa"] == pytest.approx(plain["checks"]["faithful"]["kappa"])
    assert every["checks"]["faithful"]["kappa"] < faithful["kappa"] - 0.2
    # A file without any `review` object: as before the queue (no selection, every label counts 1).
    assert plain["selection"] is None and plain["checks"]["faithful"]["records"] == 130


def test_only_hard_cases_is_an_error_unless_all_labels_are_asked_for(tmp_path: Path) -> None:
    _, docs = labels_file(tmp_path / "labels.jsonl", tmp_path)
    hard = tmp_path / "hard.jsonl"
    hard.write_text("".join(json.dumps(d) + "\n" for d in docs[90:]))
    code, output, _ = calibrate(hard, tmp_path / "r.json")
    assert code == 2 and "no label of the review queue's uniform share" in output
    code, output, doc = calibrate(hard, tmp_path / "r.json", "--all-labels")
    assert doc["selection"]["hard_case_labels"] == 40
    assert code == 3 and "too few labels" in output  # 40 labels: fewer than the 50 a verdict needs


def test_the_review_object_is_read_beside_the_labels_or_in_the_queue_line(tmp_path: Path) -> None:
    record = {"trace_id": "a" * 32, "query": "q?", "chunks": [{"id": "c1", "content": "x"}], "answer": "x."}
    review = {"reasons": ["disagreement", "uniform"], "uniform": True, "weight": 12.5, "queued_at": 1.8e9}
    beside = parse_labelled({"record": record, "labels": {"faithful": True}, "review": review}, flat_record)
    queue_line = {**record, "claims": [{"text": "x.", "verdict": "supported"}], "review": review}
    inside = parse_labelled({"record": queue_line, "labels": {"faithful": True}}, flat_record)
    flat = parse_labelled({**queue_line, "labels": {"faithful": True}}, flat_record)
    for item in (beside, inside, flat):
        assert item.review is not None and item.review.uniform and item.review.weight == 12.5
        assert item.record.trace_id == "a" * 32
    kept, selection = select_labels([beside, parse_labelled({"record": record, "labels": {}}, flat_record)])
    assert [k.labels.weight for k in kept] == [12.5]
    assert selection is not None and (selection.uniform, selection.unmarked) == (1, 1)
    with pytest.raises(ValueError, match="weight"):
        parse_labelled({"record": record, "labels": {}, "review": {"uniform": True}}, flat_record)
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps({"record": record, "labels": {}, "review": "uniform"}) + "\n")
    with pytest.raises(ValueError, match=r"l.jsonl:1: \"review\" must be an object"):
        load_labels(path, flat_record)
