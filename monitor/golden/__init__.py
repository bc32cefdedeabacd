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
`POST /golden/replay`), `synthesize` writes candidate rows from corpus chunks for review,
`production` adds a production record as a row (`golden add`), `cost` prices an LLM judge's (or
generator's) share before it is spent, `gauges` exports `ragmon_golden_*`, `render` draws the
terminal tables; `monitor.cli.golden` holds the `replay` / `golden validate` / `golden add` /
`golden trigger` / `golden synthesize` commands.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from monitor.golden.config import HttpTargetConfig, ResponseMapping
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

# Each export's module, imported on first use: `monitor.golden.config` (which the sidecar's
# configuration imports) must not load the replay, its HTTP client and its reports with it.
_EXPORTS = {
    "ALL": "monitor.golden.scores",
    "Baseline": "monitor.golden.comparison",
    "BaselineError": "monitor.golden.comparison",
    "CallableTarget": "monitor.golden.targets",
    "Comparison": "monitor.golden.comparison",
    "GAUGE_METRICS": "monitor.golden.gauges",
    "GateConfig": "monitor.golden.comparison",
    "GoldenCheck": "monitor.golden.schema",
    "GoldenGauges": "monitor.golden.gauges",
    "GoldenRow": "monitor.golden.schema",
    "Hint": "monitor.golden.report",
    "HttpTarget": "monitor.golden.targets",
    "HttpTargetConfig": "monitor.golden.config",
    "Interval": "monitor.golden.intervals",
    "IntervalConfig": "monitor.golden.intervals",
    "Issue": "monitor.golden.schema",
    "METRICS": "monitor.golden.scores",
    "MetricChange": "monitor.golden.comparison",
    "REPLAY_HEADER": "monitor.golden.targets",
    "RETRIEVAL_METRICS": "monitor.golden.retrieval",
    "Regression": "monitor.golden.comparison",
    "ReplayFailed": "monitor.golden.replay",
    "ReplayReport": "monitor.golden.report",
    "ResponseMapping": "monitor.golden.config",
    "RetrievalScores": "monitor.golden.retrieval",
    "RowResult": "monitor.golden.scores",
    "Target": "monitor.golden.targets",
    "TargetError": "monitor.golden.targets",
    "TargetResponse": "monitor.golden.targets",
    "aggregate": "monitor.golden.scores",
    "compare": "monitor.golden.comparison",
    "load_baseline": "monitor.golden.comparison",
    "load_golden": "monitor.golden.schema",
    "make_target": "monitor.golden.targets",
    "parse_golden": "monitor.golden.schema",
    "run_replay": "monitor.golden.replay",
    "score_ranking": "monitor.golden.retrieval",
    "validate": "monitor.golden.schema",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
