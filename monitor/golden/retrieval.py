"""Retrieval metrics against labels, no model in the loop.

Definitions are trec_eval's (the tests compare with `pytrec_eval` on random runs), for one query
with relevance grades `rel` (chunk id → grade > 0) and a ranking cut at k:

- recall@k = relevant in top k / all relevant;  precision@k = relevant in top k / k (a ranking
  shorter than k is not rewarded: trec_eval's P_k);  hit@k = 1 if any relevant in top k;
- MRR = 1 / rank of the first relevant chunk in the top k (0 if none);
- nDCG@k = DCG / ideal DCG with gain = grade and discount log2(rank + 1) (trec_eval's
  ``ndcg_cut``); with every grade 1 it is binary nDCG.

A chunk id repeated in a ranking counts once, at its best rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["RETRIEVAL_METRICS", "RetrievalScores", "score_ranking"]

RETRIEVAL_METRICS = ("recall_at_k", "precision_at_k", "hit_at_k", "mrr", "ndcg_at_k")


@dataclass(frozen=True, slots=True)
class RetrievalScores:
    recall_at_k: float
    precision_at_k: float
    hit_at_k: float
    mrr: float
    ndcg_at_k: float

    def as_dict(self) -> dict[str, float]:
        return {m: getattr(self, m) for m in RETRIEVAL_METRICS}


def _dedupe(ids: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for i in ids:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


def score_ranking(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> RetrievalScores:
    """Scores of one ranking (best first) against `relevance` (id → grade; grades ≤ 0 ignored)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    rel = {cid: g for cid, g in relevance.items() if g > 0}
    if not rel:
        raise ValueError("no relevant chunk: retrieval metrics are undefined (unanswerable row?)")
    top = _dedupe(ranking)[:k]
    found = [cid for cid in top if cid in rel]
    first = next((rank for rank, cid in enumerate(top, 1) if cid in rel), None)
    dcg = sum(rel.get(cid, 0) / math.log2(rank + 1) for rank, cid in enumerate(top, 1))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, 1))
    return RetrievalScores(
        recall_at_k=len(found) / len(rel),
        precision_at_k=len(found) / k,
        hit_at_k=1.0 if found else 0.0,
        mrr=1.0 / first if first else 0.0,
        ndcg_at_k=dcg / idcg,
    )
