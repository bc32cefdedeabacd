"""The Grafana dashboards (dashboards/build.py → dashboards/*.json and the Helm chart's copies).

Grafana is not installable here, so the dashboards are checked the way Grafana would use them:
the committed JSON is what the generator writes, every panel says what it shows and in which
unit, every query parses as PromQL and names only series the sidecar exports (or the recording
rules, or ALERTS), and every panel's query returns data from a real Prometheus scraping a live
sidecar fed through the real broker — including the panels of rare events (drift alarm, golden
replay, dead letters, a consumer restart, judge self-disagreement), which the test provokes.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import importlib.util
import json
import math
import re
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import httpx
import promql_parser
import pytest
import yaml
from aiokafka import AIOKafkaProducer
from fake_llm import FakeAPI, Reply, anthropic_message
from support import (
    REPO,
    eventually,
    example_service,
    prometheus_process,
    read_topic,
    running,
    sample,
    sdk_trace,
    settings_for,
    workload_labels,
)

from monitor.app.sidecar import Sidecar
from monitor.contracts.estimate import ESTIMATE_METRICS
from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.slices import DEFAULT_QUERY_TYPES
from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.demo.workload import WorkloadConfig, generate, produce
from monitor.drift.config import DRIFT_METRICS
from monitor.golden import GoldenGauges
from monitor.judge.calibrate import CalibrationGauges
from monitor.judge.lexical import LexicalJudge
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig
from monitor.outputs.http import MetricsServer

RULES = REPO / "deploy" / "prometheus" / "rules.yml"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
DIRECTORIES = (REPO / "dashboards", REPO / "helm" / "rag-monitor" / "dashboards")
# What Grafana puts in a query before Prometheus sees it (All = the variables' allValue).
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "${datasource}": "prometheus",
    "$datasource": "prometheus",
    "$query_type": ".*",
    "$service": ".*",
    "$release": ".*",
}
DEGRADED_RELEASE = "v2.0.0"  # the `service.version` of the degraded traffic `drive` sends
LOOKUP_FAITH = ("lookup", "faithfulness")  # the slice `drive` makes drift
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")


def _load_generator() -> Any:
    """dashboards/build.py, a script rather than a package module."""
    spec = importlib.util.spec_from_file_location("ragmon_dashboards", REPO / "dashboards" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load_generator()


# -- what the dashboards may query -----------------------------------------------------------------


def exported_series() -> set[str]:
    """Sample names of every metric family the sidecar registers (golden gauges included: the
    judge stage registers them when a golden replay is configured), and those `rag-monitor
    calibrate --metrics-file` writes for node_exporter's textfile collector."""
    metrics = Metrics()
    GoldenGauges(metrics.registry)
    CalibrationGauges(metrics.registry)
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {
        f"{family.name}{suffix}" for family in metrics.registry.collect() for suffix in suffixes[family.type]
    }


def recording_rules() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"]}


def dashboards() -> dict[str, dict[str, Any]]:
    return {name: json.loads(text) for name, text in build.render().items()}


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels that show something: row headers only group the panels after them."""
    return [p for p in board["panels"] if p["type"] != "row"]


def queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target, annotation and variable, with Grafana's variables
    substituted. A variable's `label_values(selector, label)` becomes `count by (label) (selector)`:
    the series Grafana reads the values from."""
    for p in panels(board):
        for t in p["targets"]:
            yield f"{board['uid']} / {p['title']} / {t['refId']}", substitute(t["expr"])
    for a in board["annotations"]["list"]:
        if "expr" in a:
            yield f"{board['uid']} / annotation {a['name']}", substitute(a["expr"])
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            m = LABEL_VALUES.match(v["query"]["query"])
            assert m and m["selector"], f"{v['name']}: not label_values(metric, label)"
            yield (
                f"{board['uid']} / variable {v['name']}",
                substitute(f"count by ({m['label']}) ({m['selector']})"),
            )


def substitute(expr: str, **chosen: str) -> str:
    """`expr` as Grafana sends it, with the variables at All unless `chosen` (name: value)."""
    values = GRAFANA_VARIABLES | {f"${name}": value for name, value in chosen.items()}
    for name, value in values.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def selectors(expr: str) -> list[str]:
    """Metric names of every series selector in `expr` ("" for one without a name)."""
    names: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.append(node.name or "")

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


# -- a. the committed JSON is the generator's ------------------------------------------------------


def test_committed_json_is_what_the_generator_writes() -> None:
    expected = build.render()
    assert len(expected) == 4
    for directory in DIRECTORIES:
        committed = {p.name: p.read_text(encoding="utf-8") for p in directory.glob("*.json")}
        assert committed.keys() == expected.keys(), f"{directory}: run `python dashboards/build.py`"
        for name, text in expected.items():
            assert committed[name] == text, f"{directory / name} differs: run `python dashboards/build.py`"


# -- b. every panel is described, and its queries read real series ---------------------------------


def test_dashboards_share_variables_links_and_settings() -> None:
    boards = dashboards()
    uids = {b["uid"] for b in boards.values()}
    assert len(uids) == 4 and "rag-monitor" in uids  # the alerts' dashboard_url is /d/rag-monitor/
    for board in boards.values():
        assert board["tags"] == ["rag-monitor"]
        assert board["refresh"] == "30s" and board["schemaVersion"] >= 39
        assert board["links"] and all(link["tags"] == ["rag-monitor"] for link in board["links"])
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        for name in ("service", "query_type", "release"):
            assert variables[name]["multi"] and variables[name]["includeAll"], name


def test_quality_panels_show_exemplars_linked_to_a_tracing_data_source() -> None:
    """The quality panels that read the judge's verdict series (which carry a `trace_id` exemplar)
    ask Grafana for exemplars, and link to the tracing UI chosen in $tracing_datasource."""
    verdict_series = re.compile(r"\bragmon_(judged|claims\w*|unanswerable\w*)_total\b")
    for board in dashboards().values():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        tracing = variables["tracing_datasource"]
        assert tracing["type"] == "datasource" and tracing["query"] in ("tempo", "jaeger")
    quality = dashboards()["rag-monitor-quality.json"]
    shown = []
    for p in panels(quality):
        for t in p["targets"]:
            if verdict_series.search(t["expr"]):
                assert t.get("exemplar") is True, p["title"]
                assert any("${tracing_datasource}" in link["url"] for link in p["links"]), p["title"]
                shown.append(p["title"])
    assert {"Judged answers", "Unsupported claims", "Hallucination rate on unanswerable queries"} <= set(
        shown
    )


def exemplar_targets() -> dict[str, str]:
    """where → PromQL of every target that asks for exemplars."""
    return {
        f"{board['uid']} / {p['title']} / {t['refId']}": substitute(t["expr"])
        for board in dashboards().values()
        for p in panels(board)
        for t in p["targets"]
        if t.get("exemplar")
    }


def exemplar_ids(prom: str, expr: str) -> list[str | None]:
    """The `trace_id` of every exemplar Prometheus holds for `expr`'s series (last hour)."""
    now = time.time()
    r = httpx.get(
        f"{prom}/api/v1/query_exemplars", params={"query": expr, "start": now - 3600, "end": now}, timeout=10
    )
    assert r.status_code == 200, f"{expr}: {r.text}"
    return [e["labels"].get("trace_id") for s in r.json()["data"] for e in s["exemplars"]]


def test_every_panel_has_a_description_and_a_unit() -> None:
    for board in dashboards().values():
        ids = [p["id"] for p in board["panels"]]
        assert len(set(ids)) == len(ids), board["uid"]
        for p in panels(board):
            where = f"{board['uid']} / {p['title']}"
            assert len(p["description"]) > 20, where
            assert p["fieldConfig"]["defaults"]["unit"], where
            assert p["targets"], where
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where


def test_every_query_parses_and_reads_only_exported_series() -> None:
    allowed = exported_series() | recording_rules() | {"ALERTS"}
    # The contract's metrics (docs/contract.md, Metrics) are there: this is not an empty set that
    # admits nothing.
    assert {
        "ragmon_records_total",
        "ragmon_judge_latency_seconds_bucket",
        "ragmon_golden_metric_ratio",
    } <= allowed
    seen: set[str] = set()
    for board in dashboards().values():
        for where, expr in queries(board):
            names = selectors(expr)  # raises on a parse error
            assert names, f"{where}: reads no series: {expr}"
            unknown = set(names) - allowed
            assert not unknown, f"{where}: {sorted(unknown)} is exported by nothing"
            seen.update(names)
    for board in dashboards().values():
        for p in panels(board):
            for t in p["targets"]:
                # Rates follow the scrape interval Grafana knows: no hard-coded window.
                for window in re.findall(
                    r"\b(?:rate|irate|increase)\((?:[^()]|\([^()]*\))*?\[([^\]]+)\]", t["expr"]
                ):
                    assert window in ("$__rate_interval", "$__range"), f"{p['title']}: [{window}]"
    # The quality panels read the recording rules; the judge panels the cost counters.
    assert "service_query_type_metric:ragmon_estimate_weighted_value:increase1h" in seen
    assert {"ragmon_judge_cost_usd_total", "ragmon_judge_tokens_total", "ALERTS"} <= seen
    # The service's own RED row reads its recording rules.
    assert {
        "service_query_type_release_stage_le:ragmon_request_duration_seconds_bucket:rate5m",
        "service_query_type_release:ragmon_request_errors:rate5m",
        "service_query_type_release_type:ragmon_generator_tokens:rate5m",
        "service_query_type_release:ragmon_generator_cost_usd:rate5m",
    } <= seen


def test_a_wrong_metric_name_would_be_caught() -> None:
    allowed = exported_series()
    assert set(selectors('rate(ragmon_record_total{service=~".*"}[1m])')) - allowed == {"ragmon_record_total"}
    with pytest.raises(ValueError):
        promql_parser.parse("sum by (query_type (rate(ragmon_records_total[1m]))")


# -- b2. the estimate is clamped to its metric's range wherever it is divided --------------------

# The range of each estimate's per-answer value y (monitor/contracts/estimate.py; the rules'
# header): faithfulness a share of claims, the flags 0/1, the relevance metrics 1-3.
VALUE_RANGE = {
    "faithfulness": (0.0, 1.0),
    "hallucination": (0.0, 1.0),
    "refusal": (0.0, 1.0),
    "false_refusal": (0.0, 1.0),
    "relevance": (1.0, 3.0),
    "context_relevance": (1.0, 3.0),
}
# Σw·y and Σw: the counters, or a recording rule's increase of them.
ESTIMATE_PAIR = re.compile(r"^(?:\w+:)?ragmon_estimate_(weighted_value|weight)(?:_total|:increase\w+)$")
CLAMPS = ("clamp", "clamp_min", "clamp_max")


def rule_expressions() -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every recording and alerting rule."""
    for path in (RULES, ALERTS):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                yield f"{path.name} / {rule.get('record') or rule['alert']}", rule["expr"]


def estimate_statistic(node: Any) -> tuple[str, Any] | None:
    """("weighted_value" or "weight", its selector) when `node` is the estimate's Σw·y or Σw:
    the counter or a rule's increase of it, in increase()/rate(), summed, parenthesised, or
    kept where positive (`> 0`, as a divisor is)."""
    while True:
        if isinstance(node, promql_parser.ParenExpr) or (
            isinstance(node, promql_parser.AggregateExpr) and str(node.op) == "sum"
        ):
            node = node.expr
        elif isinstance(node, promql_parser.Call) and node.func.name in ("increase", "rate"):
            node = node.args[0]
        elif isinstance(node, promql_parser.MatrixSelector):
            node = node.vector_selector
        elif (
            isinstance(node, promql_parser.BinaryExpr)
            and str(node.op) == ">"
            and isinstance(node.rhs, promql_parser.NumberLiteral)
        ):
            node = node.lhs
        else:
            break
    if isinstance(node, promql_parser.VectorSelector) and node.name:
        m = ESTIMATE_PAIR.match(node.name)
        if m:
            return m[1], node
    return None


def metrics_selected(*selectors: Any) -> set[str]:
    """The estimates' `metric` values every one of `selectors` admits (PromQL regexes anchored)."""
    out = set(VALUE_RANGE)
    for selector in selectors:
        for matcher in selector.matchers.matchers:
            if matcher.name != "metric":
                continue
            op = str(matcher.op).rsplit(".", 1)[-1]
            match = {
                "Equal": lambda v, x: x == v,
                "NotEqual": lambda v, x: x != v,
                "Re": lambda v, x: re.fullmatch(v, x) is not None,
                "NotRe": lambda v, x: re.fullmatch(v, x) is None,
            }[op]
            out = {m for m in out if match(matcher.value, m)}
    return out


def children(node: Any) -> list[Any]:
    if isinstance(node, promql_parser.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, promql_parser.Call):
        return list(node.args)
    if isinstance(node, promql_parser.AggregateExpr):
        return [node.expr] + ([node.param] if node.param is not None else [])
    if isinstance(node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr):
        return [node.expr]
    return []


def estimate_divisions(expr: str) -> list[tuple[set[str], tuple[float, float]]]:
    """For every Σw·y / Σw in `expr`: the metrics it divides for, and the range it is clamped to
    (the clamp, clamp_min and clamp_max applied directly to the quotient; ±inf where none)."""
    found: list[tuple[set[str], tuple[float, float]]] = []

    def visit(node: Any, clamped: tuple[float, float]) -> None:
        if isinstance(node, promql_parser.BinaryExpr) and str(node.op) == "/":
            top, bottom = estimate_statistic(node.lhs), estimate_statistic(node.rhs)
            if top and bottom and (top[0], bottom[0]) == ("weighted_value", "weight"):
                found.append((metrics_selected(top[1], bottom[1]), clamped))
        for i, child in enumerate(children(node)):
            inner = (-math.inf, math.inf)
            if isinstance(node, promql_parser.ParenExpr):
                inner = clamped
            elif isinstance(node, promql_parser.Call) and node.func.name in CLAMPS and i == 0:
                bounds = [a.val for a in node.args[1:]]
                lo, hi = clamped
                if node.func.name == "clamp":
                    lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
                elif node.func.name == "clamp_min":
                    lo = max(lo, bounds[0])
                else:
                    hi = min(hi, bounds[0])
                inner = (lo, hi)
            visit(child, inner)

    visit(promql_parser.parse(expr), (-math.inf, math.inf))
    return found


def unclamped_estimates(where: str, expr: str) -> list[str]:
    """What is wrong with each Σw·y / Σw of `expr`: one range of metrics per quotient, clamped to it."""
    problems = []
    for metrics, clamped in estimate_divisions(expr):
        ranges = {VALUE_RANGE[m] for m in metrics}
        if len(ranges) != 1:
            problems.append(f"{where}: Σw·y / Σw over metrics {sorted(metrics)} of ranges {sorted(ranges)}")
        elif clamped != (want := ranges.pop()):
            got = "unclamped" if clamped == (-math.inf, math.inf) else f"clamped to {clamped}"
            problems.append(f"{where}: Σw·y / Σw for {sorted(metrics)} {got}, not clamped to {want}")
    return problems


def test_every_estimate_is_clamped_to_its_metric_range() -> None:
    """`increase()` stretches a young Σw·y and Σw counter by different factors (the rules'
    header), so their ratio can leave the metric's range: every panel and every rule that divides
    the pair clamps the quotient to the range of the metrics it covers (one range per quotient:
    the rules split the relevance metrics off), the same in the panels as in the rules."""
    assert set(VALUE_RANGE) == set(ESTIMATE_METRICS), "a new estimate metric: give its range here"
    problems: list[str] = []
    panel_divisions = 0
    for board in dashboards().values():
        for where, expr in queries(board):
            divisions = estimate_divisions(expr)
            panel_divisions += len(divisions)
            if "ragmon_estimate_weighted_value" in expr:
                assert divisions, f"{where}: reads Σw·y, but no Σw·y / Σw was recognised: {expr}"
            problems += unclamped_estimates(where, expr)
    rule_divisions: dict[str, int] = {}
    for where, expr in rule_expressions():
        if divisions := estimate_divisions(expr):
            rule_divisions[where] = len(divisions)
        problems += unclamped_estimates(where, expr)
    assert not problems, "\n".join(problems)
    # Not vacuous: the estimate rules of both levels divide once per range, and the quality and
    # retrieval panels divide (the bands' bounds hold the estimate three times each).
    assert rule_divisions == {
        "rules.yml / service_query_type_metric:ragmon_estimate:ratio1h": 2,
        "rules.yml / release_query_type_metric:ragmon_estimate:ratio1h": 2,
    }
    assert panel_divisions >= 30


def test_an_unclamped_estimate_would_be_caught() -> None:
    def problems(expr: str) -> int:
        return len(unclamped_estimates("x", expr))

    wy = 'sum by (query_type) (increase(ragmon_estimate_weighted_value_total{metric="faithfulness"}[1h]))'
    w = 'sum by (query_type) (increase(ragmon_estimate_weight_total{metric="faithfulness"}[1h]))'
    rule = "service_query_type_metric:ragmon_estimate_{}:increase1h"
    rel = f'{rule.format("weighted_value")}{{metric=~".*relevance"}} / {rule.format("weight")}'
    both = f"{rule.format('weighted_value')} / {rule.format('weight')}"
    assert problems(f"clamp({wy} / ({w} > 0), 0, 1)") == 0
    assert problems(f"clamp_max(clamp_min(({wy} / {w}), 0), 1) + 0") == 0
    assert problems(f"clamp({rel}, 1, 3)") == 0
    # The quotient unclamped, the clamp around something larger, relevance clamped from 0 (as once
    # in a77f88b), both ranges under one clamp.
    assert problems(f"{wy} / ({w} > 0)") == 1
    assert problems(f"clamp({wy} / ({w} > 0) + 0, 0, 1)") == 1
    assert problems(f"clamp({rel}, 0, 3)") == 1
    assert problems(f"clamp({both}, 0, 3)") == 1
    # Other quotients of the statistics are not the estimate: the effective sample size, a variance.
    ess = f"{w} ^ 2 / sum(increase(ragmon_estimate_weight_squared_total[1h]))"
    assert estimate_divisions(ess) == [] and estimate_divisions(f"clamp_min({wy}, 0) / {w} ^ 2") == []


# -- c. a real Prometheus, scraping a live sidecar, has data for every panel -----------------------


class LexicalMessagesAPI:
    """The fake Messages API answering with the lexical judge's verdicts on the record in the
    prompt, so that what the sidecar concludes follows the traffic (a degraded workload really
    lowers faithfulness). Like a sampled LLM it is not fully stable: every second time it sees a
    prompt, it rates relevance one step differently, which repeated judgements expose."""

    def __init__(self) -> None:
        self.judge = LexicalJudge()
        self.seen: dict[str, int] = {}

    def __call__(self, path: str, body: dict[str, Any]) -> Reply:
        user = body["messages"][0]["content"]
        text = user if isinstance(user, str) else user[0]["text"]
        record = record_of(text)
        verdict = self.judge.judge_sync(record)
        count = self.seen[text] = self.seen.get(text, 0) + 1
        relevance = verdict.answer_relevance or 1
        if count % 2 == 0:
            relevance = 2 if relevance != 2 else 3
        output = {
            "claims": [
                {"text": c.text, "supported": c.supported, "chunk_id": c.chunk_id} for c in verdict.claims
            ],
            "answerable_from_context": bool(verdict.answerable_from_context),
            "answer_admits_uncertainty": bool(verdict.answer_admits_uncertainty),
            "answer_relevance": relevance,
            # Chunks its claims rest on are relevant, the others on topic.
            "context_relevance": [
                {"chunk_id": c.id, "relevance": 3 if any(c.id in v.chunk_ids for v in verdict.claims) else 2}
                for c in record.chunks
            ],
        }
        return Reply(body=anthropic_message(output))


def record_of(prompt: str) -> RagRecord:
    """The record `build_prompt` fenced into `prompt`."""

    def one(tag: str) -> str:
        m = re.search(rf"<{tag}>(.*?)</{tag}>", prompt, re.S)
        return html.unescape(m[1]) if m else ""

    chunks = [
        Chunk(html.unescape(cid), html.unescape(body))
        for cid, body in re.findall(r'<chunk id="([^"]*)">(.*?)</chunk>', prompt, re.S)
    ]
    return RagRecord(
        trace_id="0" * 32,
        span_id="0" * 16,
        service="",
        query=one("query"),
        query_type="other",
        chunks=chunks,
        answer=one("answer"),
    )


@pytest.fixture
def api(_server: FakeAPI) -> FakeAPI:
    _server.reset("sk-ant-FAKEKEY-dashboards")
    _server.default = LexicalMessagesAPI()
    return _server


def fast_rules(source: Path, target: Path) -> Path:
    """The rule file as deployed, evaluated every second instead of every minute."""
    doc = yaml.safe_load(source.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    return target


def golden_file(path: Path) -> Path:
    """Five rows of each query type of the example golden set: a replay takes a second or two."""
    per_type: dict[str, int] = {}
    rows = []
    for line in (REPO / "examples" / "golden.jsonl").read_text().splitlines():
        row = json.loads(line)
        if per_type.get(row["query_type"], 0) < 5:
            per_type[row["query_type"]] = per_type.get(row["query_type"], 0) + 1
            rows.append(line)
    path.write_text("\n".join(rows) + "\n")
    return path


CALIBRATION_SERIES = (
    "ragmon_judge_agreement_kappa",
    "ragmon_judge_labels",
    "ragmon_judge_last_review_timestamp_seconds",
)


class TextfileCollector:
    """Serves the `ragmon_judge_agreement_kappa`, `ragmon_judge_labels` and
    `ragmon_judge_last_review_timestamp_seconds` lines of a file written by `rag-monitor calibrate
    --metrics-file`, as node_exporter's textfile collector would (only those lines, so nothing
    else in the file can stand in for the sidecar's own series)."""

    def __init__(self, path: Path) -> None:
        source = path

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                lines = [
                    ln for ln in source.read_text().splitlines() if any(n in ln for n in CALIBRATION_SERIES)
                ]
                body = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def prometheus_config(path: Path, sidecar_port: int, textfile_port: int, rules: list[Path]) -> Path:
    scrape = {"scrape_interval": "1s", "scrape_timeout": "900ms"}
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(r) for r in rules],
        "scrape_configs": [
            {
                "job_name": "rag-monitor",
                **scrape,
                "static_configs": [{"targets": [f"127.0.0.1:{sidecar_port}"]}],
            },
            {"job_name": "node", **scrape, "static_configs": [{"targets": [f"127.0.0.1:{textfile_port}"]}]},
        ],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def query(url: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"query": expr}
    if at is not None:
        params["time"] = at
    r = httpx.get(f"{url}/api/v1/query", params=params, timeout=10)
    assert r.status_code == 200, f"{expr}: {r.text}"
    result: list[dict[str, Any]] = r.json()["data"]["result"]
    return result


def has_data(result: list[dict[str, Any]]) -> bool:
    """At least one series with a number Grafana draws (NaN is drawn as nothing)."""
    return any(math.isfinite(float(s["value"][1])) for s in result)


def uncontented_trace() -> bytes:
    """A trace whose retriever reported chunk ids but not their text: judging it would call every
    claim unsupported, so the judge stage skips it (reason no_context_content)."""
    _, value = sdk_trace(
        [
            (
                "rag",
                {
                    "openinference.span.kind": "CHAIN",
                    "input.value": "Who wrote it?",
                    "rag.query_type": "lookup",
                },
            ),
            ("retrieve", {"openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.id": "c1"}),
            (
                "generate",
                {
                    "openinference.span.kind": "LLM",
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": "Somebody wrote it.",
                },
            ),
        ],
        service="rag-demo",
    )
    return value


def cited_trace() -> bytes:
    """A trace whose answer cites its chunks, one right ([1]), one wrong ([2]) and one that names no
    retrieved chunk ([9]), written by the judge's own model: citations and a self-evaluation to
    show."""
    _, value = sdk_trace(
        [
            (
                "rag",
                {
                    "openinference.span.kind": "CHAIN",
                    "input.value": "Where is the Eiffel Tower?",
                    "rag.query_type": "lookup",
                },
            ),
            (
                "retrieve",
                {
                    "openinference.span.kind": "RETRIEVER",
                    "retrieval.documents.0.document.id": "eiffel",
                    "retrieval.documents.0.document.content": "The Eiffel Tower stands in Paris. It is iron.",
                    "retrieval.documents.1.document.id": "louvre",
                    "retrieval.documents.1.document.content": "The Louvre is the world's largest museum.",
                },
            ),
            (
                "generate",
                {
                    "openinference.span.kind": "LLM",
                    "llm.model_name": "claude-haiku-4-5-20251001",
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": "The Eiffel Tower stands in Paris [1]. "
                    "It is in France [2]. It opened in 1889 [9].",
                },
            ),
        ],
        service="rag-demo",
    )
    return value


async def test_every_panel_has_data_from_a_live_sidecar(
    api: FakeAPI, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    t0 = time.monotonic()
    bs = broker.bootstrap_servers
    dlq = f"{topic}-dlq"
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [dlq], partitions=1)
    # Judge agreement with humans: `rag-monitor calibrate` writes it for the textfile collector.
    kappa_file = tmp_path / "kappa.prom"
    kappa_file.write_text("")
    labels = workload_labels(tmp_path / "labels.jsonl", 60, seed=5)
    calibrate = await asyncio.create_subprocess_exec(
        *(
            sys.executable,
            "-m",
            "monitor",
            "calibrate",
            "--labels",
            str(labels),
            "--metrics-file",
            str(kappa_file),
        ),
        cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    textfile = TextfileCollector(kappa_file)
    metrics_port = free_port()
    rules = [fast_rules(RULES, tmp_path / "rules.yml"), fast_rules(ALERTS, tmp_path / "alerts.yml")]
    config = prometheus_config(tmp_path / "prometheus.yml", metrics_port, textfile.port, rules)
    replay_secret = tmp_path / "replay-secret"  # shared: the service honours the replay's mark
    replay_secret.write_text("dashboards-replay-secret-0123")
    service_args = ("--flush-interval-ms", "100", "--cite", "--replay-secret-file", str(replay_secret))
    with (
        prometheus_process(config, tmp_path / "tsdb", "--enable-feature=exemplar-storage") as prom,
        example_service("--kafka", bs, "--topic", topic, *service_args) as (service_url, _),
    ):
        options = {"api_key": api.key, "base_url": api.url, "max_retries": 0, "timeout_seconds": 5.0}
        settings = settings_for(
            bs,
            topic,
            tmp_path / "results.jsonl",
            kafka={"dead_letter_topic": dlq, "fetch_watchdog_seconds": 2.0, "session_timeout_ms": 6000},
            judge={
                "backend": "anthropic",
                "options": options,
                "repeat_fraction": 0.3,
                "budget": {"calls_per_minute": 100_000, "tokens_per_hour": 10**10, "usd_per_day": 10_000.0},
            },
            golden={
                "file": str(golden_file(tmp_path / "golden.jsonl")),
                "target": f"{service_url}/query",
                "interval_seconds": 3.0,
                "k": 4,
                "concurrency": 4,
                "replay_secret_file": str(replay_secret),
            },
            alerts={
                "drift": {
                    "reference_records": 50,
                    "min_records": 5,
                    "arl0": 100,
                    # Frozen and computed within this test's traffic (~100 lookup records).
                    "retrieval": {
                        "reference_records": 20,
                        "window_records": 20,
                        "min_records": 10,
                        "check_every": 5,
                    },
                }
            },
        )
        async with running(settings) as sidecar:
            server = MetricsServer(sidecar.metrics.registry, "127.0.0.1", metrics_port)
            server.start()
            try:
                await drive(sidecar, bs, topic, dlq)
                assert await asyncio.wait_for(calibrate.wait(), 60) in (0, 1)  # 1: a kappa below 0.6
                # Live traffic goes on while the dashboards are read, as it would in production.
                # Every tenth trace cites its chunks, so the citation rates have increases to show.
                traffic: list[tuple[bytes | None, bytes]] = []
                for i, pair in enumerate(generate(400, seed=84).pairs()):
                    traffic += [pair] if i % 10 else [pair, (None, cited_trace())]
                trickle = asyncio.create_task(produce(bs, topic, traffic, rate=5))
                try:
                    await check_panels(prom)
                finally:
                    trickle.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await trickle
            finally:
                server.stop()
                textfile.close()
    took = time.monotonic() - t0
    print(f"live dashboard check took {took:.0f}s")


async def drive(sidecar: Sidecar, bs: str, topic: str, dlq: str) -> None:
    """Traffic and rare events, each waited for in the sidecar's own registry."""
    ingest = sidecar.ingest
    assert ingest is not None
    # A consumer whose fetch never returns (seen once with aiokafka): the watchdog restarts it.
    source = ingest.source
    real_fetch, hung = source.fetch, asyncio.Event()

    async def hangs_once(timeout_ms: int) -> Any:
        if not hung.is_set():
            hung.set()
            await asyncio.Event().wait()
        return await real_fetch(timeout_ms)

    source.fetch = hangs_once
    good = generate(150, seed=81)
    lookups = generate(
        60, seed=82, config=WorkloadConfig(ungrounded_rate=0.0, query_type_weights={"lookup": 1})
    )
    await produce(
        bs, topic, [*good.pairs(), *lookups.pairs(), (None, uncontented_trace()), (None, cited_trace())]
    )
    await eventually(
        lambda: sample(sidecar, "ragmon_consumer_restarts_total", topic=topic) >= 1, what="restart"
    )
    await eventually(lambda: ingest.records_seen >= 212, within=60, what="records")

    def judged_lookups() -> float:
        return sample(
            sidecar,
            "ragmon_judged_total",
            service="rag-demo",
            query_type="lookup",
            check="unanswerable",
            judge="anthropic",
        )

    n_lookups = 60 + sum(t.query_type == "lookup" for t in good.traces)
    await eventually(lambda: judged_lookups() >= n_lookups, within=60, what="the lookup reference judged")
    # Degraded: every lookup answer gains an invented sentence; the faithfulness detector alarms.
    # The degradation is a release: the new version's annotation marks it on the quality board.
    degraded = WorkloadConfig(
        ungrounded_rate=1.0, query_type_weights={"lookup": 1}, service_version=DEGRADED_RELEASE
    )
    await produce(bs, topic, generate(40, seed=83, config=degraded).pairs())
    await eventually(
        lambda: sample(sidecar, "ragmon_drift_alarms_total", query_type="lookup", metric="faithfulness") >= 1,
        within=60,
        what="a drift alarm",
    )
    await eventually(
        lambda: (
            sample(sidecar, "ragmon_golden_last_run_timestamp_seconds") > 0
            and sample(sidecar, "ragmon_replay_records_total") > 0
        ),
        within=60,
        what="a golden replay through the example service",
    )
    producer = AIOKafkaProducer(bootstrap_servers=bs)
    await producer.start()
    try:
        # Bad input: not a span message (rejected, copied to the dead-letter topic), not a sample.
        for value in (b"\x00\x01 not otlp", b"{not json"):
            await producer.send_and_wait(topic, value)
        await producer.send_and_wait(sidecar.settings.pipeline.samples_topic, b"not a sample")
    finally:
        await producer.stop()
    await eventually(lambda: sample(sidecar, "ragmon_bad_samples_total") == 1, what="the bad sample read")
    await eventually(
        lambda: sample(sidecar, "ragmon_rejected_total", reason="decode_error") >= 1, what="rejects"
    )
    copies = await read_topic(bs, dlq, count=2, within=10)
    assert sorted(m.value for m in copies) == [b"\x00\x01 not otlp", b"{not json"]
    disagreements = sum(
        s.value
        for family in sidecar.metrics.registry.collect()
        for s in family.samples
        if s.name == "ragmon_judge_disagreements_total"
    )
    assert disagreements > 0
    assert (
        sample(
            sidecar,
            "ragmon_judge_skipped_total",
            service="rag-demo",
            query_type="lookup",
            reason="no_context_content",
        )
        == 1
    )


async def check_panels(prom: str) -> None:
    """Every target of every panel (and each annotation and variable) returns data; then a few
    values a user reads off the dashboards."""
    todo = {where: expr for board in dashboards().values() for where, expr in queries(board)}
    deadline = time.monotonic() + 40
    while True:
        results = await asyncio.gather(*(asyncio.to_thread(query, prom, expr) for expr in todo.values()))
        todo = {
            where: expr for (where, expr), r in zip(todo.items(), results, strict=True) if not has_data(r)
        }
        if not todo or time.monotonic() > deadline:
            break
        await asyncio.sleep(1.0)
    assert not todo, "panels without data:\n" + "\n".join(f"{w}: {e}" for w, e in todo.items())

    # The panels that show exemplars have some: trace ids Grafana draws as points and links.
    for where, expr in exemplar_targets().items():
        ids = await asyncio.to_thread(exemplar_ids, prom, expr)
        assert ids and all(ids), f"{where}: no exemplar with a trace_id"

    quality = {p["title"]: p for p in panels(dashboards()["rag-monitor-quality.json"])}

    # The quality board's annotations: the degraded release where it first appeared (the only
    # version the traffic carries; records without one are `unknown`, which has no mark), and
    # the golden change markers (every kind exported from the start, at 0 until a change).
    marks = {a["name"]: a for a in dashboards()["rag-monitor-quality.json"]["annotations"]["list"]}
    releases = {
        s["metric"]["release"]: float(s["value"][1]) / 1000
        for s in query(prom, substitute(marks["Release first seen"]["expr"]))
    }
    assert list(releases) == [DEGRADED_RELEASE]
    assert time.time() - 600 < releases[DEGRADED_RELEASE] <= time.time()
    changes = query(prom, substitute(marks["Change (golden replay)"]["expr"]))
    assert {s["metric"]["kind"] for s in changes} >= {"deploy", "reindex", "prompt", "model"}

    def read(panel: dict[str, Any], ref: str = "A", at: float | None = None) -> list[dict[str, Any]]:
        expr = next(t["expr"] for t in panel["targets"] if t["refId"] == ref)
        return query(prom, substitute(expr), at)

    # $release narrows what is per release to the chosen ones (All: every release).
    first_seen = marks["Release first seen"]["expr"]
    for chosen, expected in ((DEGRADED_RELEASE, [DEGRADED_RELEASE]), ("v0.0.0-none", [])):
        shown = [s["metric"]["release"] for s in query(prom, substitute(first_seen, release=chosen))]
        assert shown == expected, chosen

    def drift_shown() -> tuple[set[tuple[str, str]], set[str]]:
        """(slices the drift panel shows drifting, alerts the alerts panel shows firing)."""
        drifting = {
            (s["metric"]["query_type"], s["metric"]["metric"])
            for s in read(quality["Drift active"])
            if s["value"][1] == "1"
        }
        return drifting, {s["metric"]["alertname"] for s in read(quality["Alerts firing"])}

    # The alarm raised in the sidecar reaches the drift panel, then (one rule evaluation later)
    # the alerts panel.
    deadline = time.monotonic() + 20
    while True:
        drifting, firing = await asyncio.to_thread(drift_shown)
        if ("lookup", "faithfulness") in drifting and "RagmonDriftActive" in firing:
            break
        assert time.monotonic() < deadline, f"drifting {drifting}, firing {firing}"
        await asyncio.sleep(1.0)

    # Armed slices: every slice is listed from the start; lookup's faithfulness reference froze at
    # this test's 50 records, and a slice without traffic still needs all 50.
    table, at = quality["Armed slices / records to go"], time.time() - 1  # one scrape for the three
    armed, records, to_go = (
        {(s["metric"]["query_type"], s["metric"]["metric"]): float(s["value"][1]) for s in read(table, r, at)}
        for r in "ABC"
    )
    assert set(armed) == {(qt, m) for qt in DEFAULT_QUERY_TYPES for m in DRIFT_METRICS}
    assert (armed[LOOKUP_FAITH], records[LOOKUP_FAITH], to_go[LOOKUP_FAITH]) == (1, 50, 0)
    assert (armed[("other", "faithfulness")], records[("other", "faithfulness")]) == (0, 0)
    assert to_go[("other", "faithfulness")] == 50
    for key, value in armed.items():
        assert to_go[key] == (0 if value else 50 - records[key]), key

    # The band's estimate is the recording rule's, and it lies within its bounds.
    at = time.time() - 2  # one instant for every read: the rules' outputs of one evaluation
    band = quality["Faithfulness — $query_type"]
    estimate, lower, upper = (
        {s["metric"]["query_type"]: float(s["value"][1]) for s in read(band, r, at)} for r in "ABC"
    )
    rule = {
        s["metric"]["query_type"]: float(s["value"][1])
        for s in query(prom, 'service_query_type_metric:ragmon_estimate:ratio1h{metric="faithfulness"}', at)
    }
    assert estimate.keys() == rule.keys() and "lookup" in estimate
    for qt, value in estimate.items():
        assert value == pytest.approx(rule[qt], rel=1e-9)
        assert 0 <= lower[qt] <= value <= upper[qt] <= 1

    # "faithfulness 0.91 on 72 % of records, 28 % undecided": the table's faithfulness is the
    # band's estimate, and its decided and undecided shares add up to the records judged for it.
    table = quality["Faithfulness and the share of records it rests on (1 h)"]
    faith, decided, undecided = (
        {s["metric"]["query_type"]: float(s["value"][1]) for s in read(table, r, at)} for r in "ABC"
    )
    assert faith.keys() == estimate.keys() and "lookup" in decided
    for qt, value in faith.items():
        assert value == pytest.approx(estimate[qt], rel=1e-9)
    for qt, share in decided.items():
        assert 0 <= share <= 1 and share + undecided[qt] == pytest.approx(1.0)
