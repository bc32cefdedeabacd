"""The alerting side of deploy/ checked as written: `promtool check rules` on the alert rules
(deploy/prometheus/alerts.yml) and the recording rules of rules.yml, `amtool check-config` on the
Alertmanager config; every metric an alert reads is one the sidecar exports or rules.yml records,
and every alert has its severity, annotations and runbook section (deploy/runbooks.md).

That each alert fires and stays silent as specified: test_alert_rules_promtool.py; the
Alertmanager's inhibitions: test_alert_rules_alertmanager.py."""

from __future__ import annotations

import re
import subprocess

import yaml
from alert_rules_cases import ALERTMANAGER_CONFIG, ALERTS, RULES, SEVERITY, alert_rules, tool
from support import REPO

RUNBOOKS = REPO / "deploy" / "runbooks.md"
RUNBOOK_BASE = "https://github.com/rag-monitor/rag-monitor/blob/main/deploy/runbooks.md#"

# What the sidecar exports (docs/contract.md, Metrics); an alert may read nothing else but `up` and the
# recording rules of rules.yml.
COUNTERS = frozenset(
    {
        "ragmon_records_total",
        "ragmon_rejected_total",
        "ragmon_unreadable_traces_total",
        "ragmon_produce_dropped_total",
        "ragmon_judged_total",
        "ragmon_judge_skipped_total",
        "ragmon_claims_total",
        "ragmon_claims_supported_total",
        "ragmon_unanswerable_total",
        "ragmon_unanswerable_hallucinated_total",
        "ragmon_refusals_total",
        "ragmon_hedges_total",
        "ragmon_false_refusals_total",
        "ragmon_claims_contradicted_total",
        "ragmon_claims_uncertain_total",
        "ragmon_judge_decided_total",
        "ragmon_judge_undecided_total",
        "ragmon_judge_evidence_mismatch_total",
        "ragmon_judge_coverage_gaps_total",
        "ragmon_judge_requests_total",
        "ragmon_judge_tokens_total",
        "ragmon_judge_cost_usd_total",
        "ragmon_judge_retries_total",
        "ragmon_bad_samples_total",
        "ragmon_consumer_restarts_total",
        "ragmon_produce_errors_total",
        "ragmon_drift_alarms_total",
        "ragmon_retrieval_drift_alarms_total",
        "ragmon_evaluation_events_total",
        "ragmon_replay_records_total",
        "ragmon_results_write_errors_total",
        *(
            f"ragmon_estimate_{s}_total"
            for s in (
                "samples",
                "weight",
                "weighted_value",
                "weight_squared",
                "weight_squared_value",
                "weight_squared_value_squared",
            )
        ),
    }
)
HISTOGRAMS = frozenset(
    {
        "ragmon_faithfulness_score",
        "ragmon_answer_relevance_score",
        "ragmon_context_relevance_score",
        "ragmon_retrieved_chunks",
        "ragmon_retrieval_top_score",
        "ragmon_judge_latency_seconds",
        "ragmon_record_lag_seconds",
    }
)
GAUGES = frozenset(
    {
        "ragmon_consumer_lag_messages",
        "ragmon_open_traces",
        "ragmon_inflight_judgements",
        "ragmon_produce_pending",
        "ragmon_judge_circuit_open",
        "ragmon_judge_budget_remaining",
        "ragmon_drift_active",
        "ragmon_drift_statistic",
        "ragmon_drift_threshold",
        "ragmon_drift_baseline_info",
        "ragmon_retrieval_drift_psi",
        "ragmon_retrieval_drift_threshold",
        "ragmon_retrieval_drift_active",
        "ragmon_golden_metric_ratio",
        "ragmon_golden_regression_active",
        "ragmon_golden_unmeasured",
        "ragmon_golden_last_run_timestamp_seconds",
        "ragmon_faithfulness_window_ratio",
        "ragmon_hallucination_rate_window_ratio",
        "ragmon_window_samples",
        "ragmon_stage_stalled",
        # From `rag-monitor calibrate --metrics-file` (node_exporter's textfile collector).
        "ragmon_judge_agreement_kappa",
        "ragmon_judge_labels",
        "ragmon_judge_last_review_timestamp_seconds",
    }
)
EXPORTED = COUNTERS | GAUGES | {f"{h}{s}" for h in HISTOGRAMS for s in ("_bucket", "_sum", "_count")}
# Closed label values the exprs may match on (a typo here would match nothing, silently).
LABEL_VALUES = {
    "stream": {"samples", "dead_letter"},
    "outcome": {
        "ok",
        "rate_limited",
        "overloaded",
        "server_error",
        "timeout",
        "invalid_output",
        "client_error",
        "auth_error",
        "billing_error",
        "connection_error",
        "internal_error",
    },
    "limit": {"calls", "tokens", "usd"},
    "bound": {"estimate", "lower", "upper"},
    "reason": {"budget", "no_space", "io_error", "torn_tail"},
    "feature": {"chunk_count", "top_score"},
    "check": {"faithfulness", "unanswerable", "relevance", "context_relevance"},
    "metric": {
        *("faithfulness", "hallucination", "refusal", "false_refusal", "relevance", "context_relevance"),
        "undecided",
        *("recall_at_k", "precision_at_k", "mrr", "ndcg_at_k", "refusal_accuracy"),
    },
}


def recorded_names() -> set[str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}


# -- checks -----------------------------------------------------------------------------------------


def test_rule_files_are_valid() -> None:
    run = subprocess.run(
        [tool("promtool"), "check", "rules", str(ALERTS), str(RULES)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(SEVERITY)} rules found" in run.stdout


def test_alertmanager_config_is_valid() -> None:
    run = subprocess.run(
        [tool("amtool"), "check-config", str(ALERTMANAGER_CONFIG)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    assert config["route"]["group_by"] == ["alertname", "query_type"]


# -- metric names -----------------------------------------------------------------------------------

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "group_left", "group_right"}
_MATCHER = re.compile(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads: identifiers that are not functions, aggregations,
    keywords, label names (inside {} or by/on/… lists), strings or durations."""
    bare = _STRINGS.sub('""', _MATCHERS.sub("", expr))
    bare = _GROUPING.sub("", _RANGES.sub("", bare))
    return {
        m.group(1)
        for m in _IDENT.finditer(bare)
        if m.group(2) is None and m.group(1).lower() not in _KEYWORDS
    }


def template_queries(text: str) -> list[str]:
    """The PromQL an annotation template runs through `query` (raw strings and "…" after `query`)."""
    raw = re.findall(r"`([^`]*)`", text)
    quoted = re.findall(r'query\s+"((?:[^"\\]|\\.)*)"', text)
    return [q.replace("%q", '"x"') for q in raw + quoted]


def test_metric_name_parser() -> None:
    expr = (
        'sum by (service, query_type) (increase(ragmon_a_total{reason="b c"}[1h])) / 1e-9 '
        'and on (topic) deriv(sum by (topic) (lag)[15m:1m]) > 0 or absent(up{job="x"}) '
        "unless ignoring (metric) (foo:bar:ratio1h == scalar(max(ts))) or vector(0)"
    )
    assert metric_names(expr) == {"ragmon_a_total", "lag", "up", "foo:bar:ratio1h", "ts"}


def test_alerts_read_only_exported_or_recorded_metrics() -> None:
    known = EXPORTED | recorded_names() | {"up"}
    for name, rule in alert_rules().items():
        used = metric_names(rule["expr"])
        assert used, name
        assert used <= known, f"{name} reads {sorted(used - known)}, neither exported nor recorded"
        for text in rule["annotations"].values():
            for query in template_queries(text):
                in_query = metric_names(query)
                assert in_query and in_query <= known, f"{name}: annotation query {query!r}"
        for label, _, value in _MATCHER.findall(rule["expr"]):
            if label in LABEL_VALUES:
                values = set(value.split("|"))
                assert values <= LABEL_VALUES[label], f"{name}: {label}={value!r}"


def github_anchor(heading: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_every_alert_has_severity_annotations_and_a_runbook() -> None:
    rules = alert_rules()
    assert set(rules) == set(SEVERITY), "SEVERITY lists every alert of alerts.yml, and only those"
    anchors = {github_anchor(h) for h in re.findall(r"^#{1,6}\s+(.+)$", RUNBOOKS.read_text(), re.M)}
    for name, rule in rules.items():
        assert name.startswith("Ragmon")
        assert rule["labels"]["severity"] == SEVERITY[name], name
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook_url", "dashboard_url"} <= set(annotations), name
        assert "{{" not in annotations["summary"], f"{name}: summary is static"
        assert "{{" in annotations["description"], f"{name}: description carries the values"
        assert annotations["runbook_url"] == RUNBOOK_BASE + name.lower(), name
        assert name.lower() in anchors, f"deploy/runbooks.md has no section {name}"
        assert annotations["dashboard_url"].startswith("https://"), name
