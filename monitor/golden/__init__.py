"""The golden set: labelled rows replayed against the RAG service to measure retrieval (recall@k,
precision@k, hit@k, MRR, nDCG@k) and generation (faithfulness, refusal accuracy) against truth and
a versioned baseline — the CI gate for chunking, embedding, reranking and prompt changes.

`schema` reads and validates golden files, `targets` replays (HTTP or a callable), `replay` runs a
replay against a target (`run_replay`), `scores` is what a row measures (`retrieval` scores rankings)
and its averages, `intervals` bootstraps confidence intervals over rows (paired against a
baseline), `comparison` compares a run with a baseline and gates it, `report` assembles the report,
`baselines` replays the rows with the labelled chunks (oracle) and with no context beside it,
`change` names the event a replay checks, `service` is the sidecar's golden replay beside the
stages (scheduled, and triggered through `trigger`, which runs replays one at a time and serves
`POST /golden/replay`), `synthesize` writes candidate rows from corpus chunks for review, `cost`
prices an LLM judge's (or generator's) share before it is spent, `gauges` exports
`ragmon_golden_*`, `render` draws the terminal tables; `monitor.cli.golden` holds the `replay` /
`golden validate` / `golden trigger` / `golden synthesize` commands.
"""

from __future__ import annotations

from monitor.golden.comparison import (
    Baseline,
    BaselineError,
    Comparison,
    GateConfig,
    MetricChange,
    Regression,
    compare,
    load_baseline,
)
from monitor.golden.gauges import GAUGE_METRICS, GoldenGauges
from monitor.golden.intervals import Interval, IntervalConfig
from monitor.golden.replay import ReplayFailed, run_replay
from monitor.golden.report import Hint, ReplayReport
from monitor.golden.retrieval import RETRIEVAL_METRICS, RetrievalScores, score_ranking
from monitor.golden.schema import GoldenCheck, GoldenRow, Issue, load_golden, parse_golden, validate
from monitor.golden.scores import ALL, METRICS, RowResult, aggregate
from monitor.golden.targets import (
    REPLAY_HEADER,
    CallableTarget,
    HttpTarget,
    HttpTargetConfig,
    ResponseMapping,
    Target,
    TargetError,
    TargetResponse,
    make_target,
)

__all__ = [
    "ALL",
    "GAUGE_METRICS",
    "METRICS",
    "REPLAY_HEADER",
    "RETRIEVAL_METRICS",
    "Baseline",
    "BaselineError",
    "CallableTarget",
    "Comparison",
    "GateConfig",
    "GoldenCheck",
    "GoldenGauges",
    "GoldenRow",
    "Hint",
    "HttpTarget",
    "HttpTargetConfig",
    "Interval",
    "IntervalConfig",
    "Issue",
    "MetricChange",
    "Regression",
    "ReplayFailed",
    "ReplayReport",
    "ResponseMapping",
    "RetrievalScores",
    "RowResult",
    "Target",
    "TargetError",
    "TargetResponse",
    "aggregate",
    "compare",
    "load_baseline",
    "load_golden",
    "make_target",
    "parse_golden",
    "run_replay",
    "score_ranking",
    "validate",
]
