"""`promtool test rules` on deploy/prometheus/alerts.yml, on top of the recording rules of rules.yml:
every alert fires when it should, with its labels and rendered annotations, and stays silent under
its sample guard and on stable healthy series. The estimate-based alerts are fed the raw
`ragmon_estimate_*_total` counters, so the recording rules run too."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml
from alert_rules_cases import ALERTS, RULES, SEVERITY, check, counter, estimate_counters, fired, series, tool


def quality() -> dict[str, Any]:
    """Replica-exact estimates from two judge replicas' counters."""
    shop = {"service": "shop"}
    j0, j1 = {"instance": "judge-0"}, {"instance": "judge-1"}
    sq = [
        # lookup: faithfulness 0.5 on judge-0, 0.7 on judge-1, 1 a minute each: 0.6 together,
        # 120 an hour; relevance 2.0 and 2.4.
        *estimate_counters([(1, 1.0, 0.5)], **shop, **j0, query_type="lookup", metric="faithfulness"),
        *estimate_counters([(1, 1.0, 0.7)], **shop, **j1, query_type="lookup", metric="faithfulness"),
        *estimate_counters([(1, 1.0, 2.0)], **shop, **j0, query_type="lookup", metric="relevance"),
        *estimate_counters([(1, 1.0, 2.4)], **shop, **j1, query_type="lookup", metric="relevance"),
        # comparison: as bad, but 24 an hour: under the effective-sample-size guard.
        *estimate_counters(
            [(0.2, 1.0, 0.5), (0.2, 1.0, 0.7)], **shop, **j0, query_type="comparison", metric="faithfulness"
        ),
        *estimate_counters(
            [(0.2, 1.0, 2.0), (0.2, 1.0, 2.4)], **shop, **j0, query_type="comparison", metric="relevance"
        ),
        # abstractive: estimate 0.8 < 0.85, but 60 an hour of 0s and 1s: upper bound 0.90.
        *estimate_counters(
            [(0.8, 1.0, 1.0), (0.2, 1.0, 0.0)], **shop, **j0, query_type="abstractive", metric="faithfulness"
        ),
        # multi_hop: healthy. Weights 4 on judge-0, 1 on judge-1.
        *estimate_counters(
            [(0.5, 4.0, 0.9), (0.5, 4.0, 1.0)], **shop, **j0, query_type="multi_hop", metric="faithfulness"
        ),
        *estimate_counters([(2, 1.0, 0.95)], **shop, **j1, query_type="multi_hop", metric="faithfulness"),
        *estimate_counters(
            [(1, 1.0, 2.8), (1, 1.0, 3.0)], **shop, **j1, query_type="multi_hop", metric="relevance"
        ),
        # Hallucination on unanswerable records (verdict counters).
        counter("ragmon_unanswerable_total", 1.0, **shop, **j0, query_type="out_of_corpus"),
        counter("ragmon_unanswerable_hallucinated_total", 0.3, **shop, **j0, query_type="out_of_corpus"),
        counter("ragmon_unanswerable_total", 0.2, **shop, **j0, query_type="lookup"),  # 12 an hour
        counter("ragmon_unanswerable_hallucinated_total", 0.1, **shop, **j0, query_type="lookup"),
        counter("ragmon_unanswerable_total", 1.0, **shop, **j0, query_type="comparison"),
        counter("ragmon_unanswerable_hallucinated_total", 0.05, **shop, **j0, query_type="comparison"),
        counter("ragmon_unanswerable_total", 1.0, **shop, **j0, query_type="multi_hop"),  # none hallucinated
    ]
    faithfulness = fired(
        "RagmonFaithfulnessLow",
        {"service": "shop", "query_type": "lookup", "metric": "faithfulness"},
        "Faithfulness of lookup answers of shop over the last hour: estimate 60%, 95% upper bound "
        "61.79% (target 85%), effective sample size 120.",
    )
    relevance = fired(
        "RagmonAnswerRelevanceLow",
        {"service": "shop", "query_type": "lookup", "metric": "relevance"},
        "Answer relevance of lookup answers of shop over the last hour: estimate 2.20, 95% upper "
        "bound 2.24 of 3 (target 2.5), effective sample size 120.",
    )
    hallucination = fired(
        "RagmonHallucinationRateHigh",
        {"service": "shop", "query_type": "out_of_corpus"},
        "30% of the judged out_of_corpus records of shop whose context could not answer the query "
        "were answered anyway in the last hour (60 unanswerable; threshold 15%).",
    )
    return {
        "name": "quality",
        "interval": "1m",
        "input_series": sq,
        "alert_rule_test": [
            # 20 judged by 10m: under the guard. 30 at 15m: pending, firing from 30m.
            check("RagmonFaithfulnessLow", "10m"),
            check("RagmonFaithfulnessLow", "25m"),
            check("RagmonFaithfulnessLow", "60m", faithfulness),
            check("RagmonAnswerRelevanceLow", "25m"),
            check("RagmonAnswerRelevanceLow", "60m", relevance),
            # 20 unanswerable at 20m: pending until 35m.
            check("RagmonHallucinationRateHigh", "30m"),
            check("RagmonHallucinationRateHigh", "60m", hallucination),
        ],
    }


def context_relevance() -> dict[str, Any]:
    """Context relevance per judge: the rules keep `judge`, so a slice judged by two backends has
    two estimates, and only the one below target fires, naming its judge."""
    shop = {"service": "shop"}
    j0, j1 = {"instance": "judge-0"}, {"instance": "judge-1"}
    claude, lexical = {"judge": "anthropic"}, {"judge": "lexical"}
    metric = {"metric": "context_relevance"}
    s = [
        # lookup, anthropic: 2.0 on judge-0, 2.2 on judge-1, 1 a minute each: 2.1 together.
        *estimate_counters([(1, 1.0, 2.0)], **shop, **j0, **claude, query_type="lookup", **metric),
        *estimate_counters([(1, 1.0, 2.2)], **shop, **j1, **claude, query_type="lookup", **metric),
        # lookup, lexical on the same slice: 2.8, healthy. Pooled with it, anthropic would hide.
        *estimate_counters([(2, 1.0, 2.8)], **shop, **j0, **lexical, query_type="lookup", **metric),
        # comparison: as bad, but 24 an hour: under the effective-sample-size guard.
        *estimate_counters([(0.4, 1.0, 2.0)], **shop, **j0, **claude, query_type="comparison", **metric),
    ]
    low = fired(
        "RagmonContextRelevanceLow",
        {"service": "shop", "query_type": "lookup", "metric": "context_relevance", "judge": "anthropic"},
        "Context relevance of lookup queries of shop over the last hour (mean judged relevance of every "
        "retrieved chunk): estimate 2.10, 95% upper bound 2.12 of 3 (target 2.3), effective sample size 120.",
    )
    return {
        "name": "context relevance",
        "interval": "1m",
        "input_series": s,
        "alert_rule_test": [
            check("RagmonContextRelevanceLow", "10m"),
            check("RagmonContextRelevanceLow", "25m"),
            check("RagmonContextRelevanceLow", "60m", low),
        ],
    }


def drift() -> dict[str, Any]:
    lookup = {"query_type": "lookup", "metric": "faithfulness"}
    other = {"query_type": "comparison", "metric": "hallucination"}
    s = [
        # judge-0 raises the alarm from 10m to 29m; judge-1 never does.
        series("ragmon_drift_active", "0x9 1x19 0x61", instance="judge-0", **lookup),
        series("ragmon_drift_active", "0x90", instance="judge-1", **lookup),
        series("ragmon_drift_statistic", "0x9 12.5x19 2x61", instance="judge-0", **lookup),
        series("ragmon_drift_statistic", "1x90", instance="judge-1", **lookup),
        series("ragmon_drift_threshold", "10x90", instance="judge-0", **lookup),
        series("ragmon_drift_threshold", "9x90", instance="judge-1", **lookup),
        series("ragmon_drift_active", "0x90", instance="judge-0", **other),
        series("ragmon_drift_statistic", "3x90", instance="judge-0", **other),
        series("ragmon_drift_threshold", "10x90", instance="judge-0", **other),
        # Both replicas loaded the same pinned baseline file.
        series("ragmon_drift_baseline_info", "1x90", instance="judge-0", version="prod-2027-01"),
        series("ragmon_drift_baseline_info", "1x90", instance="judge-1", version="prod-2027-01"),
    ]

    def alert(statistic: str) -> dict[str, Any]:
        return fired(
            "RagmonDriftActive",
            lookup,
            "faithfulness of lookup queries has moved from its reference: drift statistic "
            f"{statistic} against threshold 10.0. Reference: drift baseline prod-2027-01 "
            "(\"none\": each slice's own first records). Example traces: the sidecar's own "
            "RagmonDriftDetected alert for this slice carries up to five failing records since the "
            "change (example_trace_ids, trace_url, example_traces); look each trace id up in the "
            "results file or topic.",
        )

    return {
        "name": "drift",
        "interval": "1m",
        "input_series": s,
        "alert_rule_test": [
            check("RagmonDriftActive", "5m"),
            check("RagmonDriftActive", "15m", alert("12.5")),
            # Cleared at 29m, kept firing for 30m (with the annotations of its last firing
            # evaluation: Prometheus does not re-render them meanwhile).
            check("RagmonDriftActive", "45m", alert("12.5")),
            check("RagmonDriftActive", "65m"),
        ],
    }


def undecided_drift() -> dict[str, Any]:
    """The drift detectors on the share of records the judge could not decide: an alert of its
    own (with the decided share of the last hour), not RagmonDriftActive's."""
    lookup = {"query_type": "lookup", "metric": "undecided"}
    decisions = {"judge": "lexical", "query_type": "lookup", "check": "faithfulness"}
    s = [
        series("ragmon_drift_active", "0x9 1x19 0x61", instance="judge-0", **lookup),
        series("ragmon_drift_statistic", "0x9 12.5x19 2x61", instance="judge-0", **lookup),
        series("ragmon_drift_threshold", "10x90", instance="judge-0", **lookup),
        # Decided 6 a minute, undecided 4: 60 % decided.
        counter("ragmon_judge_decided_total", 6, instance="judge-0", **decisions),
        counter("ragmon_judge_undecided_total", 3, instance="judge-0", reason="uncertain", **decisions),
        counter("ragmon_judge_undecided_total", 1, instance="judge-0", reason="yes_no", **decisions),
    ]
    alert = fired(
        "RagmonJudgeUndecidedShift",
        lookup,
        "The judge leaves more lookup records undecided than in its reference: drift statistic 12.5 "
        "against threshold 10.0. Over the last hour it decided faithfulness on 60% of them: the "
        "slice's scores rest on those only. The answers changed style (terse, yes/no, multi-hop) or "
        "the judge did.",
    )
    return {
        "name": "undecided share drift",
        "interval": "1m",
        "input_series": s,
        "alert_rule_test": [
            check("RagmonJudgeUndecidedShift", "5m"),
            check("RagmonJudgeUndecidedShift", "15m", alert),
            check("RagmonDriftActive", "15m"),  # not a quality drift: not paged twice
            check("RagmonJudgeUndecidedShift", "65m"),
        ],
    }


def retrieval_drift() -> dict[str, Any]:
    """Label-free retrieval drift from the ingest replicas (PSI against a frozen reference)."""
    lookup = {"query_type": "lookup", "feature": "chunk_count"}
    other = {"query_type": "comparison", "feature": "top_score"}
    s = [
        # ingest-0 raises the alarm from 10m to 29m; ingest-1 (its own share of lookup) never does.
        series("ragmon_retrieval_drift_active", "0x9 1x19 0x61", instance="ingest-0", **lookup),
        series("ragmon_retrieval_drift_active", "0x90", instance="ingest-1", **lookup),
        series("ragmon_retrieval_drift_psi", "0.02x9 0.412x19 0.05x61", instance="ingest-0", **lookup),
        series("ragmon_retrieval_drift_psi", "0.03x90", instance="ingest-1", **lookup),
        series("ragmon_retrieval_drift_threshold", "0.25x90", instance="ingest-0", **lookup),
        series("ragmon_retrieval_drift_threshold", "0.25x90", instance="ingest-1", **lookup),
        # Between release and threshold, never raised: silent.
        series("ragmon_retrieval_drift_active", "0x90", instance="ingest-0", **other),
        series("ragmon_retrieval_drift_psi", "0.2x90", instance="ingest-0", **other),
        series("ragmon_retrieval_drift_threshold", "0.25x90", instance="ingest-0", **other),
        # A rollout: ingest-1 already runs with a newly pinned baseline, ingest-0 with none.
        series("ragmon_drift_baseline_info", "1x90", instance="ingest-0", version="none"),
        series("ragmon_drift_baseline_info", "1x90", instance="ingest-1", version="prod-2027-02"),
    ]
    alert = fired(
        "RagmonRetrievalDrift",
        lookup,
        "The chunk_count distribution of lookup queries has shifted from its reference: PSI 0.41 "
        'against threshold 0.25. Reference: drift baseline none, prod-2027-02 ("none": each '
        "slice's own first records).",
    )
    return {
        "name": "retrieval drift",
        "interval": "1m",
        "input_series": s,
        "alert_rule_test": [
            check("RagmonRetrievalDrift", "5m"),
            check("RagmonRetrievalDrift", "15m", alert),
            # Cleared at 29m, kept firing for 30m with the annotations of its last firing evaluation.
            check("RagmonRetrievalDrift", "45m", alert),
            check("RagmonRetrievalDrift", "65m"),
        ],
    }


def golden() -> dict[str, Any]:
    j = {"job": "rag-monitor"}
    ratios = {  # the replica with the latest run, judge-1
        "recall_at_k": 0.8,
        "precision_at_k": 0.5,  # < 0.6
        "mrr": 0.7,
        "ndcg_at_k": 0.1,  # no target
        "faithfulness": 0.84,  # < 0.85
        "refusal_accuracy": 0.2,  # no target
    }
    s = [
        # judge-0 replayed before losing partition 0: stale, bad, must not alert.
        series("ragmon_golden_last_run_timestamp_seconds", "1000x30", **j, instance="judge-0"),
        series(
            "ragmon_golden_metric_ratio",
            "0.5x30",
            **j,
            instance="judge-0",
            query_type="all",
            metric="recall_at_k",
        ),
        series("ragmon_golden_regression_active", "1x30", **j, instance="judge-0", metric="recall_at_k"),
        series("ragmon_golden_last_run_timestamp_seconds", "2000x30", **j, instance="judge-1"),
        *(
            series(
                "ragmon_golden_metric_ratio", f"{v}x30", **j, instance="judge-1", query_type="all", metric=m
            )
            for m, v in ratios.items()
        ),
        # Per query type: not alerted on (few rows; the slice floor is part of the regression).
        series(
            "ragmon_golden_metric_ratio",
            "0.1x30",
            **j,
            instance="judge-1",
            query_type="lookup",
            metric="recall_at_k",
        ),
        series("ragmon_golden_regression_active", "0x30", **j, instance="judge-1", metric="recall_at_k"),
        series("ragmon_golden_regression_active", "1x30", **j, instance="judge-1", metric="faithfulness"),
        # The judge failed on judge-1's replay: refusal accuracy unmeasured, faithfulness measured;
        # judge-0's stale run could not measure faithfulness: must not alert.
        series("ragmon_golden_unmeasured", "1x30", **j, instance="judge-1", metric="refusal_accuracy"),
        series("ragmon_golden_unmeasured", "0x30", **j, instance="judge-1", metric="faithfulness"),
        series("ragmon_golden_unmeasured", "1x30", **j, instance="judge-0", metric="faithfulness"),
        # judge-2 never replayed: its unlabelled gauge reads 0.
        series("ragmon_golden_last_run_timestamp_seconds", "0x30", **j, instance="judge-2"),
    ]
    at = {**j, "instance": "judge-1"}
    return {
        "name": "golden",
        "interval": "1m",
        "input_series": s,
        "alert_rule_test": [
            check(
                "RagmonGoldenBelowTarget",
                "5m",
                fired(
                    "RagmonGoldenBelowTarget",
                    {**at, "query_type": "all", "metric": "precision_at_k"},
                    "Golden precision_at_k over all query types is 0.500 on the last replay, below its "
                    "target of 0.6.",
                ),
                fired(
                    "RagmonGoldenBelowTarget",
                    {**at, "query_type": "all", "metric": "faithfulness"},
                    "Golden faithfulness over all query types is 0.840 on the last replay, below its "
                    "target of 0.85.",
                ),
            ),
            check(
                "RagmonGoldenRegression",
                "5m",
                fired(
                    "RagmonGoldenRegression",
                    {**at, "metric": "faithfulness"},
                    "The golden replay of 1970-01-01 00:33:20 +0000 UTC found a regression on "
                    "faithfulness (a drop from the baseline, or below a floor).",
                ),
            ),
            check(
                "RagmonGoldenUnmeasured",
                "5m",
                fired(
                    "RagmonGoldenUnmeasured",
                    {**at, "metric": "refusal_accuracy"},
                    "The golden replay of 1970-01-01 00:33:20 +0000 UTC could not measure "
                    "refusal_accuracy: the judge failed on its rows, so the gate did not pass (exit 2), "
                    "whatever the other metrics say.",
                ),
            ),
        ],
    }


def golden_measured() -> dict[str, Any]:
    """The next replay measured everything: the gauge is back to 0, the alert resolves."""
    j = {"job": "rag-monitor", "instance": "judge-1"}
    return {
        "name": "golden measured again",
        "interval": "1m",
        "input_series": [
            series("ragmon_golden_last_run_timestamp_seconds", "1000x10 4600x20", **j),
            series("ragmon_golden_unmeasured", "1x10 0x20", **j, metric="faithfulness"),
        ],
        "alert_rule_test": [
            check(
                "RagmonGoldenUnmeasured",
                "5m",
                fired(
                    "RagmonGoldenUnmeasured",
                    {**j, "metric": "faithfulness"},
                    "The golden replay of 1970-01-01 00:16:40 +0000 UTC could not measure faithfulness: "
                    "the judge failed on its rows, so the gate did not pass (exit 2), whatever the other "
                    "metrics say.",
                ),
            ),
            check("RagmonGoldenUnmeasured", "15m"),
        ],
    }


def golden_stale(last_run: int) -> dict[str, Any]:
    """A replica whose last complete replay ended at `last_run` (0: never), then nothing new."""
    j = {"job": "rag-monitor", "instance": "judge-1"}
    description = (
        "The last complete golden replay "
        + ("finished 1970-01-01 01:00:00 +0000 UTC" if last_run else "never happened")
        + ": the golden metrics, their alerts and the CI baseline comparison describe an old state."
    )
    fires_at = (last_run + 3600 if last_run else 0) + 2 * 3600  # true from then, 2 h pending
    return {
        "name": f"golden stale since {last_run}",
        "interval": "1m",
        "input_series": [series("ragmon_golden_last_run_timestamp_seconds", f"{last_run}x400", **j)],
        "alert_rule_test": [
            check("RagmonGoldenStale", f"{fires_at - 10 * 60}s"),
            check("RagmonGoldenStale", f"{fires_at + 10 * 60}s", fired("RagmonGoldenStale", {}, description)),
        ],
    }


def judge_calibration() -> dict[str, Any]:
    """What `calibrate --metrics-file` writes, as node_exporter's textfile collector serves it."""
    node = {"job": "node", "instance": "host-1:9100"}

    def kappa(check: str, estimate: float, lower: float, upper: float, labels: int) -> list[dict[str, str]]:
        claude = {**node, "check": check, "judge": "anthropic"}
        return [
            *(
                series("ragmon_judge_agreement_kappa", f"{v}x200", **claude, bound=b)
                for b, v in (("estimate", estimate), ("lower", lower), ("upper", upper))
            ),
            series("ragmon_judge_labels", f"{labels}x200", **claude),
        ]

    s = [
        *kappa("faithful", 0.45, 0.35, 0.55, 80),  # confidently below 0.6: fires
        *kappa("hallucinated", 0.30, 0.0, 0.58, 30),  # as bad, but 30 labels: under the guard
        *kappa("answerable", 0.50, 0.25, 0.75, 400),  # the interval still holds 0.6: silent
        # Reviewed 30 days less an hour before the test's epoch: 30 days old from 60m, firing from 120m.
        series("ragmon_judge_last_review_timestamp_seconds", f"{-30 * 86400 + 3600}x200", **node),
    ]
    unreliable = fired(
        "RagmonJudgeUnreliable",
        {"check": "faithful", "judge": "anthropic"},
        "Cohen's kappa of the anthropic judge against human labels on faithful: estimate 0.45, 95% upper "
        "bound 0.55 (below 0.6) over 80 labelled records.",
    )
    stale = fired(
        "RagmonJudgeCalibrationStale",
        {},
        "The last human label of the judge's verdicts was given 1969-12-02 01:00:00 +0000 UTC (30d 1h 10m "
        "0s ago; threshold 30 days): the judge's agreement with people (kappa) describes an older "
        "judge, prompt and traffic.",
    )
    return {
        "name": "judge calibration",
        "interval": "1m",
        "input_series": s,
        "alert_rule_test": [
            check("RagmonJudgeUnreliable", "10m"),  # pending
            check("RagmonJudgeUnreliable", "30m", unreliable),
            check("RagmonJudgeCalibrationStale", "110m"),  # stale since 60m, pending for 1h
            check("RagmonJudgeCalibrationStale", "130m", stale),
        ],
    }


def judge() -> dict[str, Any]:
    a = {"backend": "anthropic"}
    j = {"job": "rag-monitor"}
    shop = {"service": "shop", "query_type": "lookup"}
    s = [
        # judge-a: 4 of 14 requests a minute fail.
        counter("ragmon_judge_requests_total", 10, **a, model="judge-a", outcome="ok"),
        counter("ragmon_judge_requests_total", 3, **a, model="judge-a", outcome="server_error"),
        counter("ragmon_judge_requests_total", 1, **a, model="judge-a", outcome="overloaded"),
        counter("ragmon_judge_requests_total", 0, **a, model="judge-a", outcome="timeout"),
        # judge-b: half fail, but 15 requests in 15 minutes: under the guard.
        counter("ragmon_judge_requests_total", 0.5, **a, model="judge-b", outcome="ok"),
        counter("ragmon_judge_requests_total", 0.5, **a, model="judge-b", outcome="timeout"),
        # judge-c: 1 in 11 rate limited.
        counter("ragmon_judge_requests_total", 10, **a, model="judge-c", outcome="ok"),
        counter("ragmon_judge_requests_total", 1, **a, model="judge-c", outcome="rate_limited"),
        # Budget: judge-0's USD limit spent; its calls limit is not.
        series("ragmon_judge_budget_remaining", "0x90", **j, instance="judge-0", limit="usd"),
        series("ragmon_judge_budget_remaining", "5x90", **j, instance="judge-0", limit="calls"),
        # 3 budget skips for 2 judged records a minute; other skip reasons do not count.
        counter("ragmon_judge_skipped_total", 3, **j, instance="judge-0", **shop, reason="budget"),
        counter("ragmon_judge_skipped_total", 100, **j, instance="judge-0", **shop, reason="no_answer"),
        *(
            counter("ragmon_judged_total", 2, **j, instance="judge-0", **shop, check=c)
            for c in ("faithfulness", "unanswerable", "relevance")
        ),
        # Breaker: open from 5m to 34m on judge-0, for 5 minutes only on judge-1.
        series("ragmon_judge_circuit_open", "0x4 1x29 0x56", **j, instance="judge-0"),
        series("ragmon_judge_circuit_open", "0x4 1x4 0x81", **j, instance="judge-1"),
    ]
    return {
        "name": "judge",
        "interval": "1m",
        "input_series": s,
        "alert_rule_test": [
            check("RagmonJudgeErrorRateHigh", "5m"),
            check(
                "RagmonJudgeErrorRateHigh",
                "30m",
                fired(
                    "RagmonJudgeErrorRateHigh",
                    {"backend": "anthropic", "model": "judge-a"},
                    "28.57% of the judge requests to anthropic (judge-a) failed in the last 15 minutes "
                    "(threshold 20%); by outcome: server_error 45, overloaded 15, timeout 0.",
                ),
            ),
            check("RagmonJudgeBudgetExhausted", "5m"),
            check(
                "RagmonJudgeBudgetExhausted",
                "30m",
                fired(
                    "RagmonJudgeBudgetExhausted",
                    {**j, "instance": "judge-0", "limit": "usd"},
                    "The usd limit of the judge budget has nothing left on judge-0.",
                ),
                fired(
                    "RagmonJudgeBudgetExhausted",
                    {},
                    "60% of the sampled records were skipped by the judge budget in the last 15 "
                    "minutes (threshold 25%).",
                ),
            ),
            check("RagmonJudgeCircuitOpen", "12m"),
            check(
                "RagmonJudgeCircuitOpen",
                "20m",
                fired(
                    "RagmonJudgeCircuitOpen",
                    {**j, "instance": "judge-0"},
                    "The judge circuit breaker of judge-0 has been open for over 10 minutes: the judge "
                    "API keeps failing with outage errors, judging is paused and samples wait on their "
                    "topic (nothing is lost).",
                ),
            ),
            check("RagmonJudgeCircuitOpen", "40m"),
        ],
    }


def pipeline() -> dict[str, Any]:
    j = {"job": "rag-monitor"}
    i0, i1 = {**j, "instance": "ingest-0"}, {**j, "instance": "ingest-1"}
    lag = "ragmon_consumer_lag_messages"
    s = [
        # rag_spans: 150 more a minute; partition 1 moves from ingest-0 to ingest-1 at 21m.
        series(lag, "0+100x90", **i0, topic="rag_spans", partition="0"),
        series(lag, "0+50x20 stale", **i0, topic="rag_spans", partition="1"),
        series(lag, "_x21 1050+50x68", **i1, topic="rag_spans", partition="1"),
        # rag-monitor-samples: a large but steady backlog. small: growing, but under the floor.
        series(lag, "5000x90", **i0, topic="rag-monitor-samples", partition="0"),
        series(lag, "0+1x90", **i0, topic="small", partition="0"),
        # Records until 30m, then none: the rate over 15m is 0 from 45m, firing from 60m.
        series("ragmon_records_total", "0+10x30 300x60", **i0, service="shop", query_type="lookup"),
        series("up", "1x90", **i0),
        series("up", "1x20 0x69", **i1),  # down from 21m, firing from 26m
        # Dead letters: ingest-0 keeps failing; ingest-1 failed until 20m, then the copies went
        # through: errors still in the 15m window at 30m, but nothing pending.
        counter("ragmon_produce_errors_total", 2, **i0, stream="dead_letter"),
        series("ragmon_produce_pending", "3x90", **i0, stream="dead_letter"),
        series("ragmon_produce_errors_total", "0+2x20 40x69", **i1, stream="dead_letter"),
        series("ragmon_produce_pending", "3x20 0x69", **i1, stream="dead_letter"),
        # Samples: ingest-0 keeps failing; ingest-1 has samples in flight but no error.
        counter("ragmon_produce_errors_total", 1, **i0, stream="samples"),
        series("ragmon_produce_pending", "100x90", **i0, stream="samples"),
        counter("ragmon_produce_errors_total", 0, **i1, stream="samples"),
        series("ragmon_produce_pending", "50x90", **i1, stream="samples"),
        # ingest-0's ingest stage stalls from 40m; ingest-1's judge stage stalled for a minute only.
        series("ragmon_stage_stalled", "0x40 1x50", **i0, stage="ingest"),
        series("ragmon_stage_stalled", "0x90", **i0, stage="judge"),
        series("ragmon_stage_stalled", "0x20 1 0x69", **i1, stage="judge"),
        # One oversized sample dropped on ingest-1 at 60m.
        series("ragmon_produce_dropped_total", "0x60 1x30", **i1, stream="samples", reason="too_large"),
    ]
    return {
        "name": "pipeline",
        "interval": "1m",
        "input_series": s,
        "alert_rule_test": [
            check("RagmonConsumerLagGrowing", "10m"),
            check(
                "RagmonConsumerLagGrowing",
                "30m",
                fired(
                    "RagmonConsumerLagGrowing",
                    {"topic": "rag_spans"},
                    "4500 messages of topic rag_spans are not yet processed and committed, and the "
                    "backlog has been growing for the last 15 minutes.",
                ),
            ),
            check("RagmonNoRecords", "55m"),
            check(
                "RagmonNoRecords",
                "65m",
                fired(
                    "RagmonNoRecords",
                    {},
                    "No RAG record was assembled in the last 15 minutes although 1 rag-monitor "
                    "target(s) are up.",
                ),
            ),
            check(
                "RagmonDeadLettersFailing",
                "30m",
                fired(
                    "RagmonDeadLettersFailing",
                    {**i0, "stream": "dead_letter"},
                    "30 dead-letter copies failed in the last 15 minutes on ingest-0, and 3 are still "
                    "waiting for the broker.",
                ),
            ),
            check(
                "RagmonSamplesProduceFailing",
                "30m",
                fired(
                    "RagmonSamplesProduceFailing",
                    {**i0, "stream": "samples"},
                    "15 writes to the samples topic failed in the last 15 minutes on ingest-0, and 100 "
                    "samples are still waiting for the broker; input offsets are not committed "
                    "meanwhile.",
                ),
            ),
            check("RagmonStageStalled", "41m"),
            check("RagmonStageStalled", "23m"),
            check(
                "RagmonStageStalled",
                "43m",
                fired(
                    "RagmonStageStalled",
                    {"instance": "ingest-0", "stage": "ingest"},
                    "The ingest stage on ingest-0 has had work waiting and made no progress for "
                    "pipeline.stall_seconds and 2 more minutes; its /readyz answers 503 and names what is "
                    "stuck. Quality metrics from it are not current: silence is not health.",
                ),
            ),
            check("RagmonProduceDropped", "59m"),
            check(
                "RagmonProduceDropped",
                "62m",
                fired(
                    "RagmonProduceDropped",
                    {"instance": "ingest-1", "stream": "samples"},
                    "1 samples message(s) on ingest-1 were larger than the topic takes "
                    "(pipeline.max_message_bytes) and were dropped in the last 15 minutes; those records "
                    "are not judged, or not on the results topic.",
                ),
            ),
            check("RagmonSidecarAbsent", "24m"),
            check(
                "RagmonSidecarAbsent",
                "30m",
                fired(
                    "RagmonSidecarAbsent",
                    i1,
                    "Prometheus cannot scrape ingest-1 of job rag-monitor. RAG quality is not being "
                    "monitored there.",
                ),
            ),
        ],
    }


def results_file() -> dict[str, Any]:
    """Results-file writes: judge-0's disk fills at 40m and every retry fails (one a minute, as the
    backoff caps at 30 s); judge-1 cut a torn tail once at start-up, and had one io_error at 20m
    that the next retry got past. Only the sustained failure is news."""
    j0 = {"job": "rag-monitor", "instance": "judge-0"}
    j1 = {"job": "rag-monitor", "instance": "judge-1"}
    errors = "ragmon_results_write_errors_total"
    description = (
        "{n} writes of the results file failed (no_space) in the last 5 minutes on judge-0, and they "
        "have kept failing for 10 minutes. The judge stage retries the batch whole (every 30 s at "
        "most) and commits no offset behind it: judged samples pile up unwritten until its queue "
        "bound stops judging, and the samples backlog grows."
    )
    return {
        "name": "results file",
        "interval": "1m",
        "input_series": [
            series(errors, "0x40 1+1x50", **j0, reason="no_space"),
            series(errors, "0x90", **j0, reason="io_error"),
            series(errors, "0 1x89", **j1, reason="torn_tail"),  # cut at open, 1m in
            series(errors, "0x20 1x70", **j1, reason="io_error"),
        ],
        "alert_rule_test": [
            check("RagmonResultsWriteFailing", "2m"),
            check("RagmonResultsWriteFailing", "30m"),  # judge-1's one io_error: not for 10m
            check("RagmonResultsWriteFailing", "48m"),  # judge-0: failing, but not for 10m yet
            check(
                "RagmonResultsWriteFailing",
                "55m",
                fired("RagmonResultsWriteFailing", {**j0, "reason": "no_space"}, description.format(n=5)),
            ),
            check(
                "RagmonResultsWriteFailing",
                "89m",
                fired("RagmonResultsWriteFailing", {**j0, "reason": "no_space"}, description.format(n=5)),
            ),
        ],
    }


def unreadable() -> dict[str, Any]:
    """ingest-0 reads its OpenInference traffic (20 records a minute) while a second service's
    unknown instrumentation ("ai") sends 3 unreadable traces a minute from 10m: 3/23 of the
    requests, past 1 % (and 10 in 15 minutes) from about 14m, so firing from about 29m; a handful
    of missing answers (0.1 a minute) stays below."""
    i0 = {"job": "rag-monitor", "instance": "ingest-0"}
    unread = {**i0, "reason": "unreadable", "scope": "ai"}
    description = (
        "{rate} traces a second from instrumentation scope ai look like RAG requests but make no "
        "record (unreadable), more than 1 % of the requests seen. They are counted, not judged: quality "
        "from that instrumentation is not monitored. The sidecar's log names their span names and "
        "attribute keys once a minute."
    )
    return {
        "name": "unreadable traces",
        "interval": "1m",
        "input_series": [
            counter("ragmon_records_total", 20, **i0, service="shop", query_type="lookup"),
            series("ragmon_unreadable_traces_total", "0x10 3+3x80", **unread),
            counter(
                "ragmon_unreadable_traces_total",
                0.1,
                **i0,
                reason="missing_answer",
                scope="openinference.instrumentation.llama_index",
            ),
        ],
        "alert_rule_test": [
            check("RagmonUnreadableTraces", "9m"),
            check("RagmonUnreadableTraces", "25m"),  # over the share, but not for 15 minutes yet
            check(
                "RagmonUnreadableTraces",
                "50m",
                fired(
                    "RagmonUnreadableTraces",
                    {"reason": "unreadable", "scope": "ai"},
                    description.format(rate="0.05"),
                ),
            ),
        ],
    }


def no_records_series() -> dict[str, Any]:
    """A sidecar up but never counting a record has no ragmon_records_total series at all; one
    that is down is the absence alert's, not this one's."""
    return {
        "name": "never a record",
        "interval": "1m",
        "input_series": [series("up", "1x30", job="rag-monitor", instance="ingest-0")],
        "alert_rule_test": [
            check("RagmonNoRecords", "10m"),
            check(
                "RagmonNoRecords",
                "20m",
                fired(
                    "RagmonNoRecords",
                    {},
                    "No RAG record was assembled in the last 15 minutes although 1 rag-monitor "
                    "target(s) are up.",
                ),
            ),
            check("RagmonSidecarAbsent", "20m"),
        ],
    }


def sidecar_gone() -> dict[str, Any]:
    return {
        "name": "sidecar gone",
        "interval": "1m",
        "input_series": [
            series("up", "1x5", job="rag-monitor", instance="ingest-0"),  # no target after 5m
            series("up", "1x30", job="other", instance="x"),
            series("ragmon_records_total", "0x30", job="rag-monitor", instance="ingest-0"),
        ],
        "alert_rule_test": [
            check("RagmonSidecarAbsent", "9m"),
            check(
                "RagmonSidecarAbsent",
                "20m",
                fired(
                    "RagmonSidecarAbsent",
                    {"job": "rag-monitor"},
                    "Prometheus has no target of job rag-monitor. RAG quality is not being monitored there.",
                ),
            ),
            check("RagmonNoRecords", "30m"),  # nothing is up: not this alert's business
        ],
    }


def healthy() -> dict[str, Any]:
    """Stable, healthy series of every metric an alert reads: no alert fires, ever."""
    j = {"job": "rag-monitor", "instance": "rag-monitor-0"}
    slices = [{"service": "shop", "query_type": t} for t in ("lookup", "comparison", "out_of_corpus")]
    s = [series("up", "1x120", **j)]
    for sl in slices:
        s += estimate_counters([(1, 2.0, 0.9), (1, 1.0, 1.0)], 120, **j, **sl, metric="faithfulness")
        s += estimate_counters([(1, 2.0, 3.0), (1, 1.0, 2.5)], 120, **j, **sl, metric="relevance")
        s += estimate_counters([(1, 2.0, 0.0), (0.1, 1.0, 1.0)], 120, **j, **sl, metric="hallucination")
        s += [
            counter("ragmon_records_total", 20, minutes=120, **j, **sl),
            counter("ragmon_unanswerable_total", 1, minutes=120, **j, **sl),
            counter("ragmon_unanswerable_hallucinated_total", 0.1, minutes=120, **j, **sl),
            counter("ragmon_judge_skipped_total", 0.1, minutes=120, **j, **sl, reason="budget"),
            counter("ragmon_judged_total", 2, minutes=120, **j, **sl, check="unanswerable"),
        ]
        for m in ("faithfulness", "hallucination", "relevance"):
            s += [
                series("ragmon_drift_active", "0x120", **j, query_type=sl["query_type"], metric=m),
                series("ragmon_drift_statistic", "2x120", **j, query_type=sl["query_type"], metric=m),
                series("ragmon_drift_threshold", "10x120", **j, query_type=sl["query_type"], metric=m),
            ]
        for f in ("chunk_count", "top_score"):
            rd = {"query_type": sl["query_type"], "feature": f}
            s += [
                series("ragmon_retrieval_drift_active", "0x120", **j, **rd),
                series("ragmon_retrieval_drift_psi", "0.02x120", **j, **rd),
                series("ragmon_retrieval_drift_threshold", "0.25x120", **j, **rd),
            ]
    golden = {"recall_at_k": 0.9, "precision_at_k": 0.7, "mrr": 0.8, "ndcg_at_k": 0.85, "faithfulness": 0.95}
    s += [series("ragmon_golden_last_run_timestamp_seconds", "0+60x120", **j)]
    for m, v in golden.items():
        s += [
            series("ragmon_golden_metric_ratio", f"{v}x120", **j, query_type="all", metric=m),
            series("ragmon_golden_regression_active", "0x120", **j, metric=m),
        ]
    s += [
        counter("ragmon_judge_requests_total", 30, minutes=120, backend="anthropic", model="m", outcome="ok"),
        counter(
            "ragmon_judge_requests_total", 1, minutes=120, backend="anthropic", model="m", outcome="timeout"
        ),
        series("ragmon_judge_budget_remaining", "400x120", **j, limit="calls"),
        series("ragmon_judge_budget_remaining", "2.5x120", **j, limit="usd"),
        series("ragmon_judge_circuit_open", "0x120", **j),
        # Calibrated at the test's epoch, on enough labels, kappa confidently above 0.6 or unsure.
        *(
            series("ragmon_judge_agreement_kappa", f"{v}x120", check="faithful", judge="lexical", bound=b)
            for b, v in (("estimate", 0.8), ("lower", 0.7), ("upper", 0.9))
        ),
        series(
            "ragmon_judge_agreement_kappa", "0.65x120", check="answerable", judge="lexical", bound="upper"
        ),
        series("ragmon_judge_labels", "200x120", check="faithful", judge="lexical"),
        series("ragmon_judge_labels", "10x120", check="answerable", judge="lexical"),
        series("ragmon_judge_last_review_timestamp_seconds", "0x120"),
        # Lag goes up and down around a few hundred.
        series(
            "ragmon_consumer_lag_messages", "200 400 300 500 " * 30, **j, topic="rag_spans", partition="0"
        ),
        series("ragmon_consumer_lag_messages", "0x120", **j, topic="rag-monitor-samples", partition="0"),
        counter("ragmon_produce_errors_total", 0, minutes=120, **j, stream="dead_letter"),
        counter("ragmon_produce_errors_total", 0, minutes=120, **j, stream="samples"),
        series("ragmon_produce_pending", "0x120", **j, stream="dead_letter"),
        series("ragmon_produce_pending", "40 0 25 0 " * 30, **j, stream="samples"),
        series("ragmon_results_write_errors_total", "1x120", **j, reason="torn_tail"),
        counter("ragmon_results_write_errors_total", 0, minutes=120, **j, reason="no_space"),
        # One request in 500 unread (a stream whose answer no span carries): under the share.
        counter("ragmon_unreadable_traces_total", 0.12, minutes=120, **j, reason="missing_answer", scope="x"),
    ]
    return {
        "name": "healthy",
        "interval": "1m",
        "input_series": s,
        "alert_rule_test": [check(name, at) for name in SEVERITY for at in ("30m", "75m", "120m")],
    }


def scenarios() -> list[dict[str, Any]]:
    return [
        quality(),
        context_relevance(),
        drift(),
        undecided_drift(),
        retrieval_drift(),
        golden(),
        golden_measured(),
        golden_stale(3600),
        golden_stale(0),
        judge_calibration(),
        judge(),
        pipeline(),
        results_file(),
        unreadable(),
        no_records_series(),
        sidecar_gone(),
        healthy(),
    ]


def promtool_tests() -> dict[str, Any]:
    """The `promtool test rules` file of all scenarios."""
    # promtool evaluates the groups of a time step in an arbitrary order unless told: recording
    # rules first, so the alerts and their annotation queries read this step's estimates. (A real
    # Prometheus runs groups on their own timers: an alert may read the estimate one minute old.)
    order = [g["name"] for f in (RULES, ALERTS) for g in yaml.safe_load(f.read_text())["groups"]]
    return {
        "rule_files": [str(RULES), str(ALERTS)],
        "evaluation_interval": "1m",
        "group_eval_order": order,
        "tests": scenarios(),
    }


def test_every_alert_is_tested_firing_and_silent() -> None:
    firing, silent = set(), set()
    for scenario in scenarios():
        for c in scenario["alert_rule_test"]:
            (firing if c["exp_alerts"] else silent).add(c["alertname"])
    assert firing == set(SEVERITY), f"never seen firing: {sorted(set(SEVERITY) - firing)}"
    assert silent == set(SEVERITY)


def test_alerts_fire_and_stay_silent_as_specified(tmp_path: Path) -> None:
    spec = tmp_path / "alerts.test.yml"
    spec.write_text(yaml.safe_dump(promtool_tests(), sort_keys=False))
    run = subprocess.run(
        [tool("promtool"), "test", "rules", str(spec)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-4000:]
