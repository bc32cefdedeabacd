"""The rag-monitor Grafana dashboards, generated from this one file.

`python dashboards/build.py` (re)writes `dashboards/*.json` and identical copies in
`helm/rag-monitor/dashboards/` (the chart ships them with `.Files.Glob`). Edit this file, never the
JSON: tests/deploy/test_dashboards.py fails when they disagree, parses every query and runs it against a
real Prometheus scraping a live sidecar.

Queries read only what the sidecar exports (monitor/contracts/metrics/, monitor/golden/gauges.py), the
recording rules of deploy/prometheus/rules.yml and `ALERTS`. The 1 h quality estimates pool the
rules' additive `:increase1h` statistics over the selected services before dividing, so a panel
shows the Hájek estimate, 95 % interval and effective sample size of exactly the traffic selected
(for one service, the rules' own `:ratio1h` values).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

Json = dict[str, Any]

HERE = Path(__file__).resolve().parent
OUTPUTS = (HERE, HERE.parent / "helm" / "rag-monitor" / "dashboards")

SCHEMA_VERSION = 39
TAG = "rag-monitor"
DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}
WIDTH = 24  # Grafana's grid
# The tracing UI exemplars link to: a Tempo data source by default (a Jaeger one when the variable's
# `query` is set to "jaeger"). An exemplar's own link comes from the Prometheus data source's
# `exemplarTraceIdDestinations` (docs/dashboards.md); panels showing exemplars link here too.
TRACING_TYPE = "tempo"
TRACES_LINK: Json = {
    "title": "Traces in $tracing_datasource",
    "url": "/explore?left="
    + quote(
        json.dumps(
            {"datasource": "${tracing_datasource}", "queries": [{"refId": "A"}]}, separators=(",", ":")
        ),
        safe="${}",  # the variable stays as Grafana interpolates it
    )
    + "&${__url_time_range}",
    "targetBlank": True,
}

# Label filters. Only series that carry a label are filtered on it: drift and golden gauges have
# query_type but no service; judge, cost and Kafka metrics have neither.
QT = 'query_type=~"$query_type"'
SVC_QT = f'service=~"$service",{QT}'
# Series per release (the estimates by release, the RED figures) are filtered on $release too.
REL = 'release=~"$release"'
SVC_QT_REL = f"{SVC_QT},{REL}"
RATE = "[$__rate_interval]"

# The recording rules' pooled statistics, and the z of their 95 % interval.
RULE = "service_query_type_metric:ragmon_estimate_{}:increase1h"
RELEASE_RULE = "release_query_type_metric:ragmon_estimate_{}:increase1h"  # pooled over services
Z = 1.96

ALERTS_FIRING = 'ALERTS{alertname=~"Ragmon.*",alertstate="firing"}'
# Golden gauges of the replica with the latest complete replay (as deploy/prometheus/alerts.yml).
LATEST_GOLDEN_RUN = (
    "(ragmon_golden_last_run_timestamp_seconds == scalar(max(ragmon_golden_last_run_timestamp_seconds)))"
)


# -- targets and panels ------------------------------------------------------------------------


def target(
    expr: str, legend: str = "", *, fmt: str = "time_series", exemplar: bool = False, instant: bool = False
) -> Json:
    """One Prometheus query; refIds are assigned by `panel`. `exemplar`: Grafana also asks for the
    exemplars of the series it reads (the judge's verdict series carry a `trace_id`, failing
    records first) and draws them as points that link to the trace. `instant`: the value now (a
    table's cell) rather than a range."""
    out: Json = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend or "__auto", "format": fmt}
    if exemplar:
        out["exemplar"] = True
    if instant:
        out["instant"] = True
    return out


def by_name(name: str, **props: Any) -> Json:
    """Field overrides for the series `name`; `custom__fillOpacity=0` sets `custom.fillOpacity`."""
    return _override({"id": "byName", "options": name}, props)


def by_regexp(pattern: str, **props: Any) -> Json:
    return _override({"id": "byRegexp", "options": pattern}, props)


def _override(matcher: Json, props: dict[str, Any]) -> Json:
    return {
        "matcher": matcher,
        "properties": [{"id": k.replace("__", "."), "value": v} for k, v in props.items()],
    }


def panel(
    kind: str,
    title: str,
    description: str,
    unit: str,
    targets: Sequence[Json],
    *,
    width: int = 12,
    height: int = 8,
    custom: Json | None = None,
    overrides: Sequence[Json] = (),
    options: Json | None = None,
    defaults: Json | None = None,
    repeat: str | None = None,
    links: Sequence[Json] = (),
) -> Json:
    """A panel of any `kind`; gridPos and id are set by `dashboard`."""
    field_defaults: Json = {"unit": unit, **(defaults or {})}
    if custom:
        field_defaults["custom"] = custom
    out: Json = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": height, "w": width, "x": 0, "y": 0},
        "fieldConfig": {"defaults": field_defaults, "overrides": list(overrides)},
        "options": options or {},
        "targets": [{**t, "refId": chr(ord("A") + i)} for i, t in enumerate(targets)],
    }
    if repeat:
        out.update(repeat=repeat, repeatDirection="h", maxPerRow=3)
    if links:
        out["links"] = list(links)
    return out


def timeseries(
    title: str, description: str, unit: str, targets: Sequence[Json], *, bars: bool = False, **kw: Any
) -> Json:
    custom: Json = {"drawStyle": "bars", "fillOpacity": 60} if bars else {"fillOpacity": 10}
    custom |= kw.pop("custom", {})
    legend = {"displayMode": "list", "placement": "bottom", "showLegend": True}
    opts = {"legend": legend, "tooltip": {"mode": "multi", "sort": "desc"}}
    return panel("timeseries", title, description, unit, targets, custom=custom, options=opts, **kw)


def stat(title: str, description: str, unit: str, targets: Sequence[Json], **kw: Any) -> Json:
    opts = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "colorMode": "value"}
    return panel(
        "stat", title, description, unit, targets, width=kw.pop("width", 6), height=4, options=opts, **kw
    )


def thresholds(*steps: tuple[float | None, str]) -> Json:
    """Absolute colour steps; the first value is None (the base)."""
    return {"thresholds": {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}}


def quantiles(metric: str, by: str, matchers: str = "", qs: Iterable[float] = (0.5, 0.9, 0.99)) -> list[Json]:
    """histogram_quantile of a `_bucket` series' rate, one target per quantile."""
    sel = f"{metric}_bucket{{{matchers}}}" if matchers else f"{metric}_bucket"
    group = f"{by}, le" if by else "le"
    prefix = f"{{{{{by}}}}} " if by else ""
    return [
        target(f"histogram_quantile({q}, sum by ({group}) (rate({sel}{RATE})))", f"{prefix}p{round(q * 100)}")
        for q in qs
    ]


def heatmap(title: str, description: str, metric: str, unit: str, matchers: str) -> Json:
    """Bucket counts per interval, as Grafana's heatmap expects them (`format: heatmap`)."""
    expr = f"sum by (le) (increase({metric}_bucket{{{matchers}}}{RATE}))"
    opts: Json = {
        "calculate": False,
        "yAxis": {"unit": unit},
        "cellGap": 1,
        "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
        "rowsFrame": {"layout": "auto"},
        "tooltip": {"mode": "single", "yHistogram": True},
    }
    return panel("heatmap", title, description, unit, [target(expr, "{{le}}", fmt="heatmap")], options=opts)


# -- the pooled 1 h estimates --------------------------------------------------------------------


def pooled(stat_name: str, metric: str, by: str, rule: str = RULE, sel: str = SVC_QT) -> str:
    """A recording rule's statistic summed over the selected services (and types unless `by`)."""
    series = f'{rule.format(stat_name)}{{metric="{metric}",{sel}}}'
    return f"sum by ({by}) ({series})" if by else f"sum({series})"


def value_range(metric: str) -> tuple[float, float]:
    """The range of a metric's per-answer value, which its estimate is clamped to as in
    deploy/prometheus/rules.yml: 1-3 for the relevance metrics, 0-1 for the others."""
    return (1.0, 3.0) if metric.endswith("relevance") else (0.0, 1.0)


def estimate(metric: str, by: str = "query_type", rule: str = RULE, sel: str = SVC_QT) -> dict[str, str]:
    """Hájek estimate (clamped to the metric's range), linearised-variance 95 % bounds (clamped to
    [0, top of the range]) and Kish's effective sample size, as deploy/prometheus/rules.yml computes
    them, from the pooled statistics. The clamp: `increase()` extrapolates Σw·y and Σw by different
    factors while their counters are young, and their ratio can leave the range (the rules' header)."""

    def p(stat_name: str) -> str:
        return pooled(stat_name, metric, by, rule, sel)

    low, top = value_range(metric)
    sw, sw2 = p("weight"), p("weight_squared")
    est = f"clamp({p('weighted_value')} / ({sw} > 0), {low:g}, {top:g})"
    var = (
        f"(clamp_min({p('weight_squared_value_squared')}"
        f" - 2 * {est} * {p('weight_squared_value')} + {est} ^ 2 * {sw2}, 0) / {sw} ^ 2)"
    )
    half = f"{Z} * sqrt({var})"
    return {
        "estimate": est,
        "lower": f"clamp_min({est} - {half}, 0)",
        "upper": f"clamp_max({est} + {half}, {top:g})",
        "ess": f"{sw} ^ 2 / ({sw2} > 0)",
    }


def band(title: str, description: str, unit: str, metric: str, **kw: Any) -> Json:
    """One panel per selected query type: the estimate line in its interval, shaded between the
    bounds (a band needs one slice per panel: Grafana fills between two named series)."""
    e = estimate(metric)
    hidden = {"custom__lineWidth": 0, "custom__hideFrom": {"legend": True, "tooltip": False, "viz": False}}
    return timeseries(
        f"{title} — $query_type",
        description,
        unit,
        [target(e["estimate"], "estimate"), target(e["lower"], "lower"), target(e["upper"], "upper")],
        custom={"fillOpacity": 0, "lineWidth": 2},
        overrides=[
            by_name("upper", **hidden, custom__fillBelowTo="lower", custom__fillOpacity=25),
            by_name("lower", **hidden),
        ],
        repeat="query_type",
        width=8,
        **kw,
    )


def by_release(metric: str, title: str) -> Json:
    """The estimate per release (solid) and its 95 % bounds (dashed), the selected query types
    pooled: releases side by side, so a new one's drop shows against the one before."""
    e = estimate(metric, by="release", rule=RELEASE_RULE, sel=f"{QT},{REL}")
    return timeseries(
        title,
        "Weighted faithfulness per release (the `release` label: slices.release_keys, default the "
        "resource's service.version) over the last hour, all services and the selected query types "
        "pooled; dashed: its 95 % interval. Two releases whose intervals do not overlap differ; "
        "`rag-monitor compare --by release` gives the verdict with the test.",
        "percentunit",
        [
            target(e["estimate"], "{{release}}"),
            target(e["lower"], "{{release}} lower"),
            target(e["upper"], "{{release}} upper"),
        ],
        custom={"fillOpacity": 0, "lineWidth": 2},
        overrides=[
            by_regexp(
                ".* (lower|upper)$", custom__lineStyle={"fill": "dash", "dash": [6, 4]}, custom__lineWidth=1
            )
        ],
        defaults={"min": 0, "max": 1},
    )


# -- the service's own RED figures ------------------------------------------------------------------

# deploy/prometheus/rules.yml's ragmon-service-red-5m group (service, query type and release kept).
RED_BUCKETS = "service_query_type_release_stage_le:ragmon_request_duration_seconds_bucket:rate5m"
RED_RULE = "service_query_type_release:ragmon_{}:rate5m"
RED_TOKENS = "service_query_type_release_type:ragmon_generator_tokens:rate5m"


def row(title: str) -> Json:
    """A row header: the panels after it, up to the next, are its."""
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "gridPos": {"h": 1, "w": WIDTH}}


def service_red() -> list[Json]:
    """The RAG service's own latency, errors, tokens and cost beside its quality, per release (and
    query type), from every record the ingest stage counts: "slower, costlier and less faithful
    since v1.4.2" in one glance. The latency quantiles pool the rules' bucket rates over the
    selected services and query types before histogram_quantile (quantiles do not add up)."""

    def latency(stage: str, by: str) -> list[Json]:
        legend = "{{release}} " + ("{{stage}} " if "stage" in by else "")
        return [
            target(
                f"histogram_quantile({q}, sum by ({by}, le) "
                f'({RED_BUCKETS}{{stage=~"{stage}",{SVC_QT_REL}}}))',
                f"{legend}p{round(q * 100)}",
            )
            for q in (0.5, 0.95)
        ]

    def share(part: str) -> str:
        return (
            f"sum by (release, query_type) ({RED_RULE.format(part)}{{{SVC_QT_REL}}})"
            f" / (sum by (release, query_type) ({RED_RULE.format('requests')}{{{SVC_QT_REL}}}) > 0)"
        )

    return [
        row("Service: latency, errors, cost"),
        timeseries(
            "Request latency by release (p50, p95)",
            "The RAG service's own request duration (its root span), p50 and p95 over 5 minutes per "
            "release, the selected services and query types pooled; every record, not only the judged "
            "ones. Beside the quality panels: a release that is slower and less faithful shows in both.",
            "s",
            latency("request", "release"),
        ),
        timeseries(
            "Stage latency by release (p50, p95)",
            "Retriever stage (first retriever or reranker span's start to the last one's end) and "
            "generator stage (likewise over the LLM spans), p50 and p95 over 5 minutes per release: "
            "which half of the request got slower.",
            "s",
            latency("retrieval|generation", "release, stage"),
        ),
        timeseries(
            "Error share by release and query type",
            "Share of requests whose root span status is ERROR, over 5 minutes, per release and query "
            "type. Requests that failed before an answer was written are not records (rejected as "
            "missing_answer), so this is the share among answered requests.",
            "percentunit",
            [target(share("request_errors"), "{{release}} {{query_type}}")],
            defaults={"min": 0},
        ),
        timeseries(
            "Generator tokens per request by release and query type",
            "Input and output tokens the service's LLM spans report (gen_ai.usage.* or "
            "llm.token_count.*), per request, over 5 minutes, per release and query type.",
            "none",
            [
                target(
                    f"sum by (release, query_type, type) ({RED_TOKENS}{{{SVC_QT_REL}}}) / ignoring (type) "
                    "group_left sum by (release, query_type) "
                    f"({RED_RULE.format('requests')}{{{SVC_QT_REL}}})",
                    "{{release}} {{query_type}} {{type}}",
                )
            ],
        ),
        timeseries(
            "Generator USD per hour by release and query type",
            "What the service's generator tokens cost per hour at metrics.service_prices (USD per "
            "million tokens), over 5 minutes, per release and query type. Models without a price are "
            "counted in the next panel, not here.",
            "currencyUSD",
            [
                target(
                    "3600 * sum by (release, query_type) "
                    f"({RED_RULE.format('generator_cost_usd')}{{{SVC_QT_REL}}})",
                    "{{release}} {{query_type}}",
                )
            ],
        ),
        timeseries(
            "Unpriced requests by release and query type",
            "Share of requests with generator tokens whose model has no price in "
            "metrics.service_prices: their tokens are counted, their cost is not. Above 0, the USD "
            "panel undercounts: add the model's price.",
            "percentunit",
            [target(share("generator_unpriced"), "{{release}} {{query_type}}")],
            defaults={"min": 0},
        ),
    ]


# -- dashboards ---------------------------------------------------------------------------------


def variables() -> list[Json]:
    """$datasource, $tracing_datasource, $service, $query_type, $release: the same on every
    dashboard, so links keep them ($release filters only the series that carry the label)."""

    def query_var(name: str, label: str, query: str) -> Json:
        return {
            "type": "query",
            "name": name,
            "label": label,
            "datasource": DATASOURCE,
            "definition": query,
            "query": {"qryType": 1, "query": query, "refId": f"{name}-variable"},
            "refresh": 2,
            "multi": True,
            "includeAll": True,
            "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "sort": 1,
            "regex": "",
            "options": [],
            "hide": 0,
        }

    return [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            "query": "prometheus",
            "current": {},
            "regex": "",
            "options": [],
            "refresh": 1,
            "hide": 0,
        },
        {
            "type": "datasource",
            "name": "tracing_datasource",
            "label": "Traces",
            "description": "Where exemplars' trace ids open (a Tempo or Jaeger data source)",
            "query": TRACING_TYPE,
            "current": {},
            "regex": "",
            "options": [],
            "refresh": 1,
            "hide": 0,
        },
        query_var("service", "Service", "label_values(ragmon_records_total, service)"),
        query_var(
            "query_type", "Query type", 'label_values(ragmon_records_total{service=~"$service"}, query_type)'
        ),
        query_var("release", "Release", 'label_values(ragmon_requests_total{service=~"$service"}, release)'),
    ]


def golden_annotation() -> Json:
    """A mark at each complete golden replay: the gauge's value is the run's time."""
    return {
        "name": "Golden replay",
        "datasource": DATASOURCE,
        "enable": True,
        "iconColor": "purple",
        "expr": "max(ragmon_golden_last_run_timestamp_seconds) * 1000",
        "useValueForTime": True,
        "step": "1m",
        "titleFormat": "Golden replay",
        "textFormat": "A complete golden-set replay finished",
    }


def change_annotation() -> Json:
    """A mark at each change event (deploy, reindex, prompt, model, other) whose out-of-schedule
    golden replay completed, titled with its kind; the gauge's value is when the change came in.
    Every kind is exported from the start at 0 (no change yet), which lands at 1970: off screen."""
    return {
        "name": "Change (golden replay)",
        "datasource": DATASOURCE,
        "enable": True,
        "iconColor": "orange",
        "expr": "max by (kind) (ragmon_golden_last_change_timestamp_seconds) * 1000",
        "useValueForTime": True,
        "step": "1m",
        "titleFormat": "Change: {{kind}}",
        "textFormat": "A {{kind}} change triggered a golden replay (the report holds its ref)",
    }


RELEASE_FIRST_SEEN = (
    f'min by (release) (ragmon_release_first_seen_timestamp_seconds{{release!~"other|unknown",{REL}}}) * 1000'
)


def release_annotation() -> Json:
    """A mark where each release (`service.version` by default) first appeared among the sampled
    records, titled with it: beside a drop, the release that came just before it. `other` (past
    the label's bound) and `unknown` (no version) have no moment of their own; the min over drift
    members is the release's first appearance."""
    return {
        "name": "Release first seen",
        "datasource": DATASOURCE,
        "enable": True,
        "iconColor": "blue",
        "expr": RELEASE_FIRST_SEEN,
        "useValueForTime": True,
        "step": "1m",
        "titleFormat": "Release {{release}}",
        "textFormat": "The first sampled record of release {{release}}",
    }


def layout(panels: Sequence[Json]) -> list[Json]:
    """Left to right, wrapping at the grid's width; ids in order."""
    x = y = row_height = 0
    out = []
    for i, p in enumerate(panels, 1):
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if x + w > WIDTH:
            x, y, row_height = 0, y + row_height, 0
        out.append({"id": i, **p, "gridPos": {"h": h, "w": w, "x": x, "y": y}})
        x += w
        row_height = max(row_height, h)
    return out


def dashboard(
    uid: str,
    title: str,
    description: str,
    panels: Sequence[Json],
    *,
    golden: bool = False,
    releases: bool = False,
) -> Json:
    builtin = {
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    }
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": [TAG],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {"refresh_intervals": ["10s", "30s", "1m", "5m", "15m", "30m", "1h"]},
        "timezone": "browser",
        "links": [
            {
                "type": "dashboards",
                "tags": [TAG],
                "title": "rag-monitor",
                "asDropdown": False,
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "annotations": {
            "list": [
                builtin,
                *([golden_annotation(), change_annotation()] if golden else []),
                *([release_annotation()] if releases else []),
            ]
        },
        "templating": {"list": variables()},
        "panels": layout(panels),
    }


def golden_ratio(metric: str) -> str:
    """A golden metric per query type of the latest replay; query_type="all" is the overall row."""
    series = f'ragmon_golden_metric_ratio{{metric="{metric}",query_type=~"$query_type|all"}}'
    return f"max by (query_type) ({series} and ignoring (query_type, metric) {LATEST_GOLDEN_RUN})"


def golden_panel(metric: str, title: str, what: str, decided: bool = False) -> Json:
    """`decided`: also the share of the rows the judge decided, on which the metric rests."""
    bounds = (
        f'max by (bound) (ragmon_golden_metric_interval_ratio{{metric="{metric}",query_type="all"}} '
        f"and ignoring (query_type, metric, bound) {LATEST_GOLDEN_RUN})"
    )
    targets = [target(golden_ratio(metric), "{{query_type}}"), target(bounds, "all, {{bound}} 95 %")]
    if decided:
        share = 'ragmon_golden_judge_decided_ratio{query_type="all"}'
        share += f" and ignoring (query_type) {LATEST_GOLDEN_RUN}"
        targets.append(target(f"max({share})", "all, decided share"))
    return timeseries(
        f"Golden {title}",
        f"{what} on the labelled golden set, per query type, from the last complete replay "
        '(query_type "all": every row; dashed: its 95 % bootstrap interval over rows — with 20–100 '
        "rows a golden metric is noisy)"
        + ("; dotted: the share of rows the judge decided, the only ones scored." if decided else "."),
        "percentunit",
        targets,
        defaults={"min": 0, "max": 1},
        overrides=[
            by_regexp(
                "all, .* 95 %", custom__lineStyle={"fill": "dash", "dash": [10, 10]}, custom__fillOpacity=0
            ),
            by_regexp(
                "all, decided share",
                custom__lineStyle={"fill": "dot", "dash": [0, 10]},
                custom__fillOpacity=0,
            ),
        ],
        width=6,
    )


def quality() -> Json:
    faith = estimate("faithfulness", by="")
    halluc = estimate("hallucination", by="")
    ess = {m: estimate(m)["ess"] for m in ("faithfulness", "hallucination")}
    drift_sel = f"{{{QT}}}"
    panels = [
        stat(
            "Faithfulness (1 h)",
            "Weighted (Hájek) share of answer claims supported by the retrieved context over the last "
            "hour, all selected services and query types pooled. Target 0.85 (RagmonFaithfulnessLow).",
            "percentunit",
            [target(faith["estimate"], "faithfulness")],
            defaults=thresholds((None, "red"), (0.85, "green")),
        ),
        stat(
            "Hallucinated answers (1 h)",
            "Weighted share of judged answers that answer although the context cannot (its prevalence in "
            "traffic), last hour, selected services and query types pooled.",
            "percentunit",
            [target(halluc["estimate"], "hallucination")],
            defaults=thresholds((None, "green"), (0.05, "red")),
        ),
        stat(
            "Alerts firing",
            "rag-monitor alerts (alertname Ragmon*) firing now in Prometheus.",
            "none",
            [target(f"count({ALERTS_FIRING}) or vector(0)", "firing")],
            defaults=thresholds((None, "green"), (1, "red")),
        ),
        stat(
            "Slices drifting",
            "(query type, metric) slices whose drift detector (CUSUM) has raised an alarm and not yet "
            "cleared.",
            "none",
            [
                target(
                    f"count(max by (query_type, metric) (ragmon_drift_active{drift_sel}) == 1) or vector(0)"
                )
            ],
            defaults=thresholds((None, "green"), (1, "orange")),
        ),
        band(
            "Faithfulness",
            "Weighted share of claims supported by the retrieved chunks over the last hour (recording "
            "rules, selected services pooled), shaded between the 95 % interval's bounds. The alert "
            "fires when the upper bound stays below 0.85 with >= 30 effective samples.",
            "percentunit",
            "faithfulness",
            defaults={"min": 0, "max": 1},
        ),
        band(
            "Hallucinated answers",
            "Weighted share of judged answers that answer although their context cannot (hallucination "
            "on unanswerable queries, as a share of all judged traffic), last hour, with its 95 % "
            "interval.",
            "percentunit",
            "hallucination",
            defaults={"min": 0},
        ),
        band(
            "Answer relevance",
            "Weighted mean answer relevance (1-3) over the last hour with its 95 % interval. The alert "
            "fires when the upper bound stays below 2.5.",
            "none",
            "relevance",
            defaults={"min": 1, "max": 3},
        ),
        timeseries(
            "Effective sample size (1 h)",
            "Kish's effective number of judged answers behind each 1 h estimate: below ~30 an interval "
            "is wide and the quality alerts stay silent.",
            "short",
            [target(expr, f"{{{{query_type}}}} {m}") for m, expr in ess.items()],
        ),
        by_release("faithfulness", "Faithfulness by release (1 h)"),
        timeseries(
            "Hallucination rate on unanswerable queries",
            "Among judged records whose context could not answer the query, the share answered anyway "
            "(unweighted judge counts, as RagmonHallucinationRateHigh reads them; threshold 0.15).",
            "percentunit",
            [
                target(
                    f"sum by (query_type) (rate(ragmon_unanswerable_hallucinated_total{{{SVC_QT}}}{RATE}))"
                    f" / (sum by (query_type) (rate(ragmon_unanswerable_total{{{SVC_QT}}}{RATE})) > 0)",
                    "{{query_type}}",
                    exemplar=True,
                )
            ],
            defaults={"min": 0, "max": 1},
            links=[TRACES_LINK],
        ),
        timeseries(
            "Unsupported claims",
            "Share of the judged answers' claims that their retrieved chunks do not support "
            "(unweighted judge counts). Exemplars (points) are recent answers with an unsupported "
            "claim or a hallucination, where there are any; hover one to open its trace.",
            "percentunit",
            [
                target(
                    f"1 - sum by (query_type) (rate(ragmon_claims_supported_total{{{SVC_QT}}}{RATE}))"
                    f" / (sum by (query_type) (rate(ragmon_claims_total{{{SVC_QT}}}{RATE})) > 0)",
                    "{{query_type}}",
                    exemplar=True,
                )
            ],
            defaults={"min": 0, "max": 1},
            links=[TRACES_LINK],
        ),
        timeseries(
            "Refusals and false refusals (1 h)",
            "Weighted share of judged answers that give no answer (refusal; an answer that only hedges "
            "part of it is not one), and of those refusing although the context held the answer (false "
            "refusal), last hour.",
            "percentunit",
            [
                target(estimate(m)["estimate"], f"{{{{query_type}}}} {m.replace('_', ' ')}")
                for m in ("refusal", "false_refusal")
            ],
            defaults={"min": 0},
        ),
        timeseries(
            "Judged answers",
            "Production answers judged per second, per query type (what the estimates rest on).",
            "reqps",
            [
                target(
                    f'sum by (query_type) (rate(ragmon_judged_total{{check="unanswerable",{SVC_QT}}}{RATE}))',
                    "{{query_type}}",
                    exemplar=True,
                )
            ],
            links=[TRACES_LINK],
        ),
        timeseries(
            "Drift statistic against threshold",
            "Drift statistic of each (query type, metric) detector, and its threshold (dashed): an alarm "
            "is raised when the statistic reaches the threshold, cleared at a quarter of it.",
            "none",
            [
                target(
                    f"max by (query_type, metric) (ragmon_drift_statistic{drift_sel})",
                    "{{query_type}} {{metric}}",
                ),
                target(
                    f"max by (query_type, metric) (ragmon_drift_threshold{drift_sel})",
                    "{{query_type}} {{metric}} threshold",
                ),
            ],
            overrides=[
                by_regexp(
                    ".* threshold",
                    custom__lineStyle={"fill": "dash", "dash": [10, 10]},
                    custom__fillOpacity=0,
                )
            ],
        ),
        panel(
            "state-timeline",
            "Drift active",
            "Per (query type, metric): whether the drift alarm is raised (RagmonDriftActive).",
            "none",
            [
                target(
                    f"max by (query_type, metric) (ragmon_drift_active{drift_sel})",
                    "{{query_type}} {{metric}}",
                )
            ],
            defaults={
                "mappings": [
                    {
                        "type": "value",
                        "options": {
                            "0": {"text": "in control", "color": "green"},
                            "1": {"text": "drifting", "color": "red"},
                        },
                    }
                ],
                **thresholds((None, "green"), (1, "red")),
            },
            options={"showValue": "never", "mergeValues": True},
        ),
        armed_slices(drift_sel),
        timeseries(
            "Drift alarms raised",
            "Drift alarms raised per interval, per (query type, metric).",
            "none",
            [
                target(
                    f"sum by (query_type, metric) (increase(ragmon_drift_alarms_total{drift_sel}{RATE}))",
                    "{{query_type}} {{metric}}",
                )
            ],
            bars=True,
        ),
        timeseries(
            "Alerts firing",
            "rag-monitor alerts firing in Prometheus, by alert name and severity (ALERTS).",
            "none",
            [target(f"sum by (alertname, severity) ({ALERTS_FIRING})", "{{alertname}} ({{severity}})")],
            bars=True,
        ),
        timeseries(
            "Citation precision",
            "Of the answers' citations the judge could check, the share whose cited chunk supports a "
            "claim of the sentence it sits in, per query type (unweighted judged records). Unresolved: "
            "citations naming no retrieved chunk, per citation. No series while answers cite nothing.",
            "percentunit",
            [
                target(
                    f"sum by (query_type) (rate(ragmon_citations_total"
                    f'{{verdict="supported",{SVC_QT}}}{RATE})) / sum by (query_type) '
                    f'(rate(ragmon_citations_total{{verdict=~"supported|unsupported",{SVC_QT}}}{RATE}))',
                    "{{query_type}}",
                ),
                target(
                    f'sum(rate(ragmon_citations_total{{verdict="unresolved",{SVC_QT}}}{RATE}))'
                    f" / sum(rate(ragmon_citations_total{{{SVC_QT}}}{RATE}))",
                    "unresolved / citation",
                ),
            ],
            defaults={"min": 0, "max": 1},
        ),
        golden_panel("faithfulness", "faithfulness", "Faithfulness of the service's answers", decided=True),
        golden_panel("refusal_accuracy", "refusal accuracy", "Share of correct refusals (unanswerable rows)"),
        golden_panel(
            "citation_precision",
            "citation precision",
            "Share of checked citations whose chunk supports the claim",
        ),
        decided_share(),
        *service_red(),
    ]
    return dashboard(
        "rag-monitor",
        "rag-monitor / Quality overview",
        "Answer quality of the RAG service: faithfulness, hallucination, refusals, relevance, drift.",
        panels,
        golden=True,
        releases=True,
    )


def armed_slices(sel: str) -> Json:
    """Per (query type, metric): whether its drift detector runs yet, and the judged records its
    reference still needs. Until a slice is armed a calm drift panel says nothing about it; every
    slice is listed from the drift stage's start (max over drift members: the owner's state)."""

    def of(metric: str) -> str:
        return f"max by (query_type, metric) ({metric}{sel})"

    records = of("ragmon_drift_reference_records")
    table = panel(
        "table",
        "Armed slices / records to go",
        "Per (query type, metric): armed once its reference is frozen (a pinned baseline's from "
        "start-up, else its first alerts.drift.reference_records judged records) and its drift "
        "detector runs; until then no drift alarm can fire for it. Records: judged records in the "
        "reference so far; to go: what it still needs. A slice without traffic stays at 0: pin a "
        "baseline (rag-monitor baseline pin) to be armed from the start.",
        "none",
        [
            target(of("ragmon_drift_armed"), fmt="table", instant=True),
            target(records, fmt="table", instant=True),
            target(f"{of('ragmon_drift_reference_required_records')} - {records}", fmt="table", instant=True),
        ],
        overrides=[
            by_name(
                "armed",
                mappings=[
                    {
                        "type": "value",
                        "options": {
                            "0": {"text": "collecting", "color": "orange"},
                            "1": {"text": "armed", "color": "green"},
                        },
                    }
                ],
                custom__cellOptions={"type": "color-text"},
            )
        ],
        options={
            "showHeader": True,
            "cellHeight": "sm",
            "footer": {"show": False},
            "sortBy": [{"displayName": "records to go", "desc": True}],
        },
    )
    table["transformations"] = merged_columns("armed", "records", "records to go")
    return table


DECIDED = "judge_query_type_check:ragmon_judge_{}:increase1h"


def decided_share() -> Json:
    """Per query type, faithfulness next to the share of records it rests on: "faithfulness 0.91
    on 72 % of records, 28 % undecided". Records the judge could not decide are in no estimate, so
    a score without its decided share hides how much of the traffic it speaks for."""

    def pooled_decisions(kind: str) -> str:
        return f'sum by (query_type) ({DECIDED.format(kind)}{{check="faithfulness",{QT}}})'

    decided, undecided = pooled_decisions("decided"), pooled_decisions("undecided")
    to_decide = f"(({decided} + {undecided}) > 0)"
    table = panel(
        "table",
        "Faithfulness and the share of records it rests on (1 h)",
        "Per query type: the 1 h faithfulness estimate, and of the judged answers that make claims "
        "the share the judge decided (the estimate's records) and the share it could not "
        "(undecided: no decided claim; left out of every score, counted in "
        "ragmon_judge_undecided_total by reason). Selected services pooled for the estimate; the "
        "decision counters have no service label. A rising undecided share fires "
        "RagmonJudgeUndecidedShift.",
        "percentunit",
        [
            target(estimate("faithfulness")["estimate"], fmt="table", instant=True),
            target(f"{decided} / {to_decide}", fmt="table", instant=True),
            target(f"{undecided} / {to_decide}", fmt="table", instant=True),
        ],
        width=WIDTH,
        overrides=[by_name("faithfulness", unit="none", decimals=2)],
        options={"showHeader": True, "cellHeight": "sm", "footer": {"show": False}},
    )
    table["transformations"] = merged_columns("faithfulness", "decided", "undecided")
    return table


def merged_columns(*names: str) -> list[Json]:
    """A per-query-type table from instant queries A, B, C…: merged on query type, the values
    named in query order, the time column dropped."""
    rename = {"query_type": "query type"} | {f"Value #{chr(65 + i)}": n for i, n in enumerate(names)}
    return [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": {"Time": True}, "renameByName": rename}},
    ]


def retrieval() -> Json:
    chunks, score = "ragmon_retrieved_chunks", "ragmon_retrieval_top_score"
    latest = f"ragmon_golden_regression_active and ignoring (metric) {LATEST_GOLDEN_RUN}"
    panels = [
        timeseries(
            "Retrieved chunks per request",
            "Quantiles of the number of chunks the retriever returned per request, per query type.",
            "short",
            quantiles(chunks, "query_type", SVC_QT, (0.5, 0.9)),
        ),
        heatmap(
            "Retrieved chunks — distribution",
            "Requests per interval by number of chunks retrieved (histogram buckets).",
            chunks,
            "short",
            SVC_QT,
        ),
        timeseries(
            "Top retrieval score",
            "Quantiles of the top-ranked chunk's score, per query type (requests whose retriever reports "
            "scores). A drop says retrieval, not generation, got worse.",
            "short",
            quantiles(score, "query_type", SVC_QT, (0.1, 0.5, 0.9)),
        ),
        heatmap(
            "Top retrieval score — distribution",
            "Requests per interval by the top-ranked chunk's score (histogram buckets).",
            score,
            "short",
            SVC_QT,
        ),
        band(
            "Context relevance",
            "Weighted mean relevance (1-3) of the retrieved chunks to the query over the last hour, "
            "judged in the same call as the answer: each chunk rated 3 (answers it or a needed part), "
            "2 (on topic) or 1 (unrelated), averaged over all k chunks of a record, not the top one. "
            "Shaded: the 95 % interval. RagmonContextRelevanceLow fires when the upper bound stays "
            "below 2.3 (recording rules, per judge backend; selected services and backends pooled here).",
            "none",
            "context_relevance",
            defaults={"min": 1, "max": 3},
        ),
        timeseries(
            "Retrieval drift (PSI)",
            "Population stability index of each slice's recent records (alerts.drift.retrieval."
            "window_records, every record, no judge) against its frozen reference (the slice's first "
            "reference_records), per query type and feature: chunk_count, top_score (records without "
            "a score in a bin of their own). Dashed: the threshold (0.25 by convention: a major shift); "
            "the alarm clears at release (0.1). Stable traffic stays below ~0.06. Highest replica.",
            "none",
            [
                target(
                    f"max by (query_type, feature) (ragmon_retrieval_drift_psi{{{QT}}})",
                    "{{query_type}} {{feature}}",
                ),
                target(f"max(ragmon_retrieval_drift_threshold{{{QT}}})", "threshold"),
            ],
            defaults={"min": 0},
            overrides=[
                by_name(
                    "threshold", custom__lineStyle={"fill": "dash", "dash": [10, 10]}, custom__fillOpacity=0
                )
            ],
        ),
        panel(
            "state-timeline",
            "Retrieval drift active",
            "Per (query type, feature): whether the retrieval drift alarm is raised on some ingest "
            "replica (RagmonRetrievalDrift).",
            "none",
            [
                target(
                    f"max by (query_type, feature) (ragmon_retrieval_drift_active{{{QT}}})",
                    "{{query_type}} {{feature}}",
                )
            ],
            defaults={
                "mappings": [
                    {
                        "type": "value",
                        "options": {
                            "0": {"text": "in control", "color": "green"},
                            "1": {"text": "shifted", "color": "red"},
                        },
                    }
                ],
                **thresholds((None, "green"), (1, "red")),
            },
            options={"showValue": "never", "mergeValues": True},
        ),
        golden_panel("recall_at_k", "recall@k", "Share of the relevant chunks retrieved in the top k"),
        golden_panel("precision_at_k", "precision@k", "Share of the top k chunks that are relevant"),
        golden_panel("mrr", "MRR", "Mean reciprocal rank of the first relevant chunk"),
        golden_panel("ndcg_at_k", "nDCG@k", "Normalised discounted cumulative gain of the top k"),
        stat(
            "Golden regressions",
            "Golden metrics on which the last replay regressed against the baseline or a floor "
            "(RagmonGoldenRegression).",
            "none",
            [target(f"max by (metric) ({latest})", "{{metric}}")],
            width=18,
            defaults={
                "mappings": [{"type": "value", "options": {"0": {"text": "ok"}, "1": {"text": "regressed"}}}],
                **thresholds((None, "green"), (1, "red")),
            },
        ),
        stat(
            "Since the last golden replay",
            "Time since the last complete golden-set replay; it grows when replays stop or fail.",
            "s",
            [target("time() - max(ragmon_golden_last_run_timestamp_seconds)", "age")],
        ),
    ]
    return dashboard(
        "rag-monitor-retrieval",
        "rag-monitor / Retrieval",
        "What the retriever returns in production, its drift from a frozen reference, and "
        "recall/precision/MRR/nDCG on the golden set.",
        panels,
        golden=True,
    )


def judge() -> Json:
    requests = "ragmon_judge_requests_total"
    budget = (("calls", "none", "API requests"), ("tokens", "short", "tokens"), ("usd", "currencyUSD", "USD"))
    panels = [
        timeseries(
            "Judge requests by outcome",
            "Judgements attempted per second, by backend, model and outcome (production and golden replay).",
            "reqps",
            [target(f"sum by (backend, model, outcome) (rate({requests}{RATE}))", "{{backend}} {{outcome}}")],
        ),
        timeseries(
            "Judge error share",
            "Share of judge requests that did not end ok (threshold 0.2: RagmonJudgeErrorRateHigh).",
            "percentunit",
            [
                target(
                    f'(sum(rate({requests}{{outcome!="ok"}}{RATE})) or vector(0))'
                    f" / sum(rate({requests}{RATE}))",
                    "errors",
                )
            ],
            defaults={"min": 0, "max": 1},
        ),
        timeseries(
            "Judge latency",
            "Judge service time per judgement, quantiles per backend.",
            "s",
            quantiles("ragmon_judge_latency_seconds", "backend"),
        ),
        timeseries(
            "Judge tokens / s",
            "Tokens billed by the judge per second, by model and kind (input, output, cache).",
            "short",
            [target(f"sum by (model, type) (rate(ragmon_judge_tokens_total{RATE}))", "{{model}} {{type}}")],
        ),
        timeseries(
            "Judge cost per hour",
            "Judge spend at the current rate, in USD per hour, by model (from the price table).",
            "currencyUSD",
            [target(f"sum by (model) (rate(ragmon_judge_cost_usd_total{RATE})) * 3600", "{{model}}")],
        ),
        stat(
            "Self-evaluations",
            "Judged records whose judge model is the model that wrote the answer, over the time range "
            "(a model grading itself is biased: use another judge model). 0 is the healthy value.",
            "none",
            [target("sum(increase(ragmon_judge_self_evaluations_total[$__range])) or vector(0)", "records")],
            defaults=thresholds((None, "green"), (1, "red")),
        ),
        stat(
            "Judge cost over the time range",
            "Judge spend in USD over the dashboard's time range.",
            "currencyUSD",
            [target("sum(increase(ragmon_judge_cost_usd_total[$__range]))", "USD")],
        ),
        *(
            stat(
                f"Budget left: {limit}",
                f"Judge budget left in the current sliding window, in {what}, summed over replicas "
                "(each enforces its share). Absent when that limit is not configured.",
                unit,
                [target(f'sum(ragmon_judge_budget_remaining{{limit="{limit}"}})', limit)],
            )
            for limit, unit, what in budget
        ),
        timeseries(
            "Samples not judged",
            "Sampled records skipped per second, by reason (budget, no answer, chunk text not captured).",
            "reqps",
            [target(f"sum by (reason) (rate(ragmon_judge_skipped_total{{{SVC_QT}}}{RATE}))", "{{reason}}")],
        ),
        timeseries(
            "Judge outages",
            "Circuit breaker open (1: judging paused after repeated outage errors) and outage retries "
            "per second.",
            "short",
            [
                target("max(ragmon_judge_circuit_open)", "circuit open"),
                target(f"sum(rate(ragmon_judge_retries_total{RATE}))", "retries / s"),
            ],
        ),
        timeseries(
            "Samples held by the judge stage",
            "Samples read from the samples topic and not yet written (queued, judged or being written).",
            "short",
            [target("sum(ragmon_inflight_judgements)", "in flight")],
        ),
        timeseries(
            "Verdicts the code overruled or left undecided",
            "Per judged claim, the share whose quoted evidence failed the check (not in the cited "
            "chunk, missing the claim's numbers, sharing no word with it, no quote) and was scored "
            "not in context, and the share the judge could not decide (uncertain: left out of "
            "faithfulness); per judged answer, the share whose claims left part of the answer out "
            "after the one repair. Rising: the judge model or its prompt changed, inputs try to "
            "steer it, or (undecided) traffic unlike what the offline judge handles.",
            "percentunit",
            [
                target(
                    f"(sum(rate(ragmon_judge_evidence_mismatch_total{{{SVC_QT}}}{RATE})) or vector(0))"
                    f" / sum(rate(ragmon_claims_total{{{SVC_QT}}}{RATE}))",
                    "evidence mismatch / claim",
                ),
                target(
                    f"(sum(rate(ragmon_claims_uncertain_total{{{SVC_QT}}}{RATE})) or vector(0))"
                    f" / sum(rate(ragmon_claims_total{{{SVC_QT}}}{RATE}))",
                    "undecided / claim",
                ),
                target(
                    f'(sum(rate(ragmon_judge_coverage_gaps_total{{outcome="unrepaired",{SVC_QT}}}{RATE}))'
                    f" or vector(0))"
                    f' / sum(rate(ragmon_judged_total{{check="unanswerable",{SVC_QT}}}{RATE}))',
                    "claims left out / answer",
                ),
            ],
            defaults={"min": 0},
        ),
        timeseries(
            "Judge self-disagreement",
            "Share of repeated judgements (judge.repeat_fraction) whose two verdicts differ, per check: "
            "how unstable the judge is.",
            "percentunit",
            [
                target(
                    f"sum by (check) (rate(ragmon_judge_disagreements_total{RATE}))"
                    f" / on () group_left () sum(rate(ragmon_judge_repeats_total{RATE}))",
                    "{{check}}",
                )
            ],
            defaults={"min": 0, "max": 1},
        ),
        timeseries(
            "Judge agreement with humans (kappa)",
            "Cohen's kappa of the judge against human labels, per check and judge, with the 95% "
            "bootstrap interval (over labelled records), as `rag-monitor calibrate --metrics-file` writes "
            "it for node_exporter's textfile collector. Below 0.6 the judge is not reliable on that check; "
            "RagmonJudgeUnreliable fires when the upper bound is (with 50 labels or more).",
            "none",
            [
                target(
                    'max by (check, judge) (ragmon_judge_agreement_kappa{bound="estimate"})',
                    "{{check}} ({{judge}})",
                ),
                target(
                    'max by (check, judge) (ragmon_judge_agreement_kappa{bound="lower"})', "{{check}} lower"
                ),
                target(
                    'max by (check, judge) (ragmon_judge_agreement_kappa{bound="upper"})', "{{check}} upper"
                ),
            ],
            defaults={"min": -1, "max": 1, **thresholds((None, "red"), (0.6, "green"))},
            custom={"thresholdsStyle": {"mode": "dashed"}},
        ),
        stat(
            "Human labels per check",
            "Labelled records `rag-monitor calibrate` compared with the judge, per check: with fewer "
            "than 50, kappa's interval is about ±0.2 wide and RagmonJudgeUnreliable stays silent.",
            "none",
            [target("max by (check, judge) (ragmon_judge_labels)", "{{check}} ({{judge}})")],
            defaults=thresholds((None, "orange"), (50, "green")),
        ),
        stat(
            "Days since the last human review",
            "Age of the newest human label calibrate saw (its `reviewed_at`, else the labels file's "
            "time); RagmonJudgeCalibrationStale fires past 30 days.",
            "d",
            [target("(time() - max(ragmon_judge_last_review_timestamp_seconds)) / 86400", "days")],
            defaults=thresholds((None, "green"), (30, "red")),
        ),
    ]
    return dashboard(
        "rag-monitor-judge",
        "rag-monitor / Judge and cost",
        "The judge: outcomes, latency, tokens, spend and budget, outages, stability.",
        panels,
    )


def ingest() -> Json:
    whole_message = 'reason=~"decode_error|invalid_utf8|too_large|empty"'
    panels = [
        timeseries(
            "Records / s",
            "RAG records assembled from production traces per second, per query type.",
            "recps",
            [target(f"sum by (query_type) (rate(ragmon_records_total{{{SVC_QT}}}{RATE}))", "{{query_type}}")],
        ),
        timeseries(
            "Rejects by reason",
            "Inputs rejected or fields dropped per second, by reason (bad messages never stop a partition).",
            "cps",
            [target(f"sum by (reason) (rate(ragmon_rejected_total{RATE})) > 0", "{{reason}}")],
        ),
        timeseries(
            "Consumer lag",
            "Messages between the committed offset and the partition's end, per topic (input topic: "
            "ingest stage; samples topic: judge stage) and partition.",
            "short",
            [target("max by (topic, partition) (ragmon_consumer_lag_messages)", "{{topic}} p{{partition}}")],
        ),
        timeseries(
            "Record lag",
            "Seconds from the root span's end to the record being counted (assembly grace period plus "
            "consumer lag).",
            "s",
            quantiles("ragmon_record_lag_seconds", ""),
        ),
        timeseries(
            "Open traces",
            "Traces waiting for spans in the assembler, per replica (bounded by assembly.max_open_traces).",
            "short",
            [target("sum by (instance) (ragmon_open_traces)", "{{instance}}")],
        ),
        timeseries(
            "Dead letters",
            "Whole messages rejected per second (copied to kafka.dead_letter_topic when one is set), "
            "and dead-letter copies still waiting for the broker.",
            "short",
            [
                target(
                    f"sum by (reason) (rate(ragmon_rejected_total{{{whole_message}}}{RATE})) > 0",
                    "{{reason}} / s",
                ),
                target('sum(ragmon_produce_pending{stream="dead_letter"})', "copies waiting"),
            ],
        ),
        timeseries(
            "Produce errors",
            "Failed produce attempts per second, by stream (samples, dead_letter); retried, with their "
            "source offsets held.",
            "cps",
            [target(f"sum by (stream) (rate(ragmon_produce_errors_total{RATE}))", "{{stream}}")],
        ),
        timeseries(
            "Produces waiting for an ack",
            "Messages produced and not yet acknowledged, by stream; their source offsets are held.",
            "short",
            [target("sum by (stream) (ragmon_produce_pending)", "{{stream}}")],
        ),
        timeseries(
            "Consumer restarts",
            "Consumers restarted by the fetch watchdog (no fetch returned while partitions were "
            "assigned), per topic.",
            "none",
            [target(f"sum by (topic) (increase(ragmon_consumer_restarts_total{RATE}))", "{{topic}}")],
            bars=True,
        ),
        timeseries(
            "Unreadable samples",
            "Samples-topic messages the judge stage could not read (skipped and logged), per second.",
            "cps",
            [target(f"sum(rate(ragmon_bad_samples_total{RATE}))", "unreadable")],
        ),
        timeseries(
            "Golden replay records",
            "Records of golden-replay traffic (rag.replay=true) per second, kept out of the production "
            "metrics.",
            "recps",
            [target(f"sum(rate(ragmon_replay_records_total{RATE}))", "replay")],
        ),
    ]
    return dashboard(
        "rag-monitor-ingest",
        "rag-monitor / Ingest health",
        "The ingest pipeline and Kafka: throughput, rejects, lag, assembly, dead letters, restarts.",
        panels,
    )


DASHBOARDS = {
    "rag-monitor-quality.json": quality,
    "rag-monitor-retrieval.json": retrieval,
    "rag-monitor-judge.json": judge,
    "rag-monitor-ingest.json": ingest,
}


def render() -> dict[str, str]:
    """File name → JSON text, exactly as committed."""
    return {
        name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n" for name, build in DASHBOARDS.items()
    }


def main() -> int:
    for directory in OUTPUTS:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in render().items():
            (directory / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(DASHBOARDS)} dashboards to {', '.join(str(d) for d in OUTPUTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
