"""Retrieval metrics against trec_eval (via pytrec_eval) on random runs, binary and graded."""

from __future__ import annotations

import math
import random

import pytest
import pytrec_eval

from monitor.golden import RowResult, aggregate, score_ranking
from monitor.golden.scores import ALL

K = 5
MEASURES = {f"recall.{K}", f"P.{K}", "recip_rank", f"ndcg_cut.{K}", f"success.{K}"}


def _random_case(rng: random.Random, graded: bool) -> tuple[list[str], dict[str, int]]:
    pool = [f"d{i}" for i in range(30)]
    n_rel = rng.randint(1, 6)
    rel = {d: (rng.randint(1, 3) if graded else 1) for d in rng.sample(pool, n_rel)}
    ranking = rng.sample(pool, rng.randint(0, 8))  # shorter and longer than k
    return ranking, rel


@pytest.mark.parametrize("graded", [False, True])
def test_metrics_match_trec_eval_on_random_runs(graded: bool) -> None:
    rng = random.Random(1234 + graded)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    ours = {}
    for q in range(300):
        ranking, rel = _random_case(rng, graded)
        qid = f"q{q}"
        qrels[qid] = rel
        # Scores strictly decreasing with rank, so trec_eval's order is exactly ours, then cut at k
        # (our replay asks the target for k chunks; recip_rank is uncut in trec_eval).
        run[qid] = {d: float(100 - r) for r, d in enumerate(ranking[:K])}
        ours[qid] = score_ranking(ranking, rel, K)
    ref = pytrec_eval.RelevanceEvaluator(qrels, MEASURES).evaluate(run)
    for qid, s in ours.items():
        want = ref.get(qid, {})
        assert s.recall_at_k == pytest.approx(want.get(f"recall_{K}", 0.0)), qid
        assert s.precision_at_k == pytest.approx(want.get(f"P_{K}", 0.0)), qid
        assert s.hit_at_k == pytest.approx(want.get(f"success_{K}", 0.0)), qid
        assert s.mrr == pytest.approx(want.get("recip_rank", 0.0)), qid
        assert s.ndcg_at_k == pytest.approx(want.get(f"ndcg_cut_{K}", 0.0)), qid


def test_edge_cases() -> None:
    s = score_ranking(["a", "a", "x", "b"], {"a": 1, "b": 1}, 3)  # a duplicate counts once
    assert s.recall_at_k == 1.0 and s.precision_at_k == pytest.approx(2 / 3) and s.mrr == 1.0
    s = score_ranking([], {"a": 1}, 5)
    assert (s.recall_at_k, s.hit_at_k, s.mrr, s.ndcg_at_k) == (0.0, 0.0, 0.0, 0.0)
    s = score_ranking(["x", "b", "a"], {"a": 3, "b": 1}, 3)  # graded: ideal puts the 3 first
    ideal = 3 + 1 / math.log2(3)
    assert s.ndcg_at_k == pytest.approx((1 / math.log2(3) + 3 / math.log2(4)) / ideal)
    with pytest.raises(ValueError):
        score_ranking(["a"], {}, 5)


def test_aggregate_is_per_type_and_overall_over_answerable_rows_only() -> None:
    rows = [
        RowResult(
            "1",
            "lookup",
            True,
            ["a"],
            "x",
            score_ranking(["a"], {"a": 1}, 5),
            faithfulness=1.0,
            refused=False,
        ),
        RowResult(
            "2", "lookup", True, ["z"], "x", score_ranking(["z"], {"a": 1}, 5), faithfulness=0.5, refused=True
        ),
        RowResult(
            "3", "multi_hop", True, ["a"], "x", score_ranking(["a"], {"a": 1, "b": 1}, 5), refused=False
        ),
        RowResult("4", "out_of_corpus", False, ["a"], "x", None, faithfulness=None, refused=True),
        RowResult("5", "out_of_corpus", False, ["a"], "x", None, faithfulness=0.0, refused=False),
    ]
    m = aggregate(rows)
    assert list(m) == [ALL, "lookup", "multi_hop", "out_of_corpus"]
    assert m[ALL]["recall_at_k"] == pytest.approx((1 + 0 + 0.5) / 3)  # unanswerable rows never count
    assert m["lookup"]["recall_at_k"] == 0.5 and m["multi_hop"]["recall_at_k"] == 0.5
    assert m["out_of_corpus"]["recall_at_k"] is None
    assert m[ALL]["faithfulness"] == pytest.approx(1.5 / 3)  # rows without claims are not averaged in
    assert m[ALL]["refusal_accuracy"] == 0.5 and m[ALL]["false_refusal_rate"] == pytest.approx(1 / 3)
