"""Replica-exact estimates in Prometheus: each judge replica exports the additive statistics of its
weighted estimates as counters, and the recording rules of deploy/prometheus/rules.yml turn the
sum over replicas into the estimate of the whole group, its interval and its effective sample
size. Checked with `promtool test rules` on the counters two real judge replicas exported, against
the estimate computed here, independently, from the union of their results files."""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import TopicPartition
from support import ESTIMATE_STATS, REPO, eventually, result_lines, running, settings_for
from test_dashboards import build, substitute

from monitor.app.sidecar import Sidecar
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce

RULES = REPO / "deploy" / "prometheus" / "rules.yml"
LEVEL = "service_query_type_metric"
Z = 1.96
pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool comes with `make test` (Debian prometheus)"
)


def test_the_rules_are_valid() -> None:
    check = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def values_of(line: dict[str, Any]) -> list[tuple[str, float]]:
    """(metric, y) of one results line, read from the line as a user would."""
    if "judge_skipped" in line or line["judge"]["outcome"] != "ok":
        return []
    out = []
    if line["faithfulness"] is not None:
        out.append(("faithfulness", float(line["faithfulness"])))
    for metric, key in (
        ("hallucination", "hallucinated"),
        ("refusal", "refuses"),  # no answer given: a hedged answer is not a refusal
        ("false_refusal", "false_refusal"),
    ):
        if line[key] is not None:
            out.append((metric, 1.0 if line[key] else 0.0))
    for metric, key in (("relevance", "answer_relevance"), ("context_relevance", "context_relevance")):
        if line[key] is not None:
            out.append((metric, float(line[key])))
    return out


Key = tuple[str, str, str, str]  # service, query_type, metric, judge


def expected_estimates(lines: list[dict[str, Any]]) -> dict[Key, dict[str, float]]:
    """Hájek estimate, linearised variance bounds and Kish effective sample size per slice and
    judge (the rules never pool two backends)."""
    pairs: dict[Key, list[tuple[float, float]]] = defaultdict(list)
    for line in lines:
        for metric, y in values_of(line):
            key = (line["service"], line["query_type"], metric, line["judge"]["backend"])
            pairs[key].append((line["sampling_weight"], y))
    out = {}
    for key, wy in pairs.items():
        sw = sum(w for w, _ in wy)
        est = sum(w * y for w, y in wy) / sw
        var = sum(w * w * (y - est) ** 2 for w, y in wy) / sw**2
        top = 3.0 if key[2].endswith("relevance") else 1.0
        out[key] = {
            "ratio1h": est,
            "effective_samples:ratio1h": sw**2 / sum(w * w for w, _ in wy),
            "lower:ratio1h": max(0.0, est - Z * math.sqrt(var)),
            "upper:ratio1h": min(top, est + Z * math.sqrt(var)),
        }
    return out


def exported(sidecar: Sidecar) -> dict[tuple[str, Key], float]:
    """(counter, (service, query_type, metric, judge)) -> value, from a replica's registry."""
    out = {}
    names = {f"ragmon_estimate_{name}_total" for name, _ in ESTIMATE_STATS}
    for family in sidecar.metrics.registry.collect():
        for s in family.samples:
            if s.name in names:
                key = (s.labels["service"], s.labels["query_type"], s.labels["metric"], s.labels["judge"])
                out[(s.name, key)] = s.value
    return out


def promtool_test(spec: Path, series: list[dict[str, Any]], tests: list[dict[str, Any]]) -> None:
    """`tests` against the rules over `series` (1-minute scrapes and evaluations), by promtool."""
    spec.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(RULES)],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}],
            }
        )
    )
    run = subprocess.run(["promtool", "test", "rules", str(spec)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def labels(key: Key, **more: str) -> str:
    pairs = {"service": key[0], "query_type": key[1], "metric": key[2], "judge": key[3], **more}
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


async def test_two_judge_replicas_add_up_to_the_estimate_of_their_union(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    files = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    # Priority signals make inclusion probabilities, and so weights, uneven.
    sampling = {"rate": 0.3, "min_per_window": 0}
    ingest = settings_for(bs, topic, None, sampling=sampling, pipeline={"role": "ingest"})
    judges = [settings_for(bs, topic, f, sampling=sampling, pipeline={"role": "judge"}) for f in files]
    work = generate(300, seed=71)
    async with contextlib.AsyncExitStack() as stack:
        feeder = await stack.enter_async_context(running(ingest))
        replicas = [await stack.enter_async_context(running(s)) for s in judges]
        samples = ingest.pipeline.samples_topic

        def owned() -> list[int]:
            return [sum(r.sources[0].owns(TopicPartition(samples, p)) for p in range(3)) for r in replicas]

        await eventually(lambda: min(owned()) >= 1, within=60, what="both judge replicas assigned")
        await produce(bs, topic, work.pairs())
        assert feeder.ingest is not None
        delivered = feeder.ingest.samples

        def written() -> int:
            return sum(len(result_lines(f)) for f in files)

        await eventually(lambda: feeder.ingest is not None and feeder.ingest.records_seen == 300)
        await eventually(lambda: delivered.delivered > 0 and written() == delivered.delivered, within=60)
        counters = [exported(r) for r in replicas]
    per_replica = [len({key for _, key in c}) for c in counters]
    assert min(per_replica) > 0, "both replicas judged"
    lines = [line for f in files for line in result_lines(f)]
    weights = {line["sampling_weight"] for line in lines}
    assert len(weights) > 1, "uneven weights, or the test proves little"
    expected = expected_estimates(lines)

    series = []
    for i, counter in enumerate(counters):
        for (name, key), value in counter.items():
            series.append(
                {"series": f"{name}{labels(key, instance=f'judge-{i}')}", "values": f"0 {value!r}x10"}
            )
    tests = [
        {
            "expr": f"count({LEVEL}:ragmon_estimate:ratio1h)",
            "eval_time": "10m",
            "exp_samples": [{"labels": "{}", "value": len(expected)}],
        }
    ]
    for key, values in expected.items():
        for rule, value in values.items():
            series.append(
                {"series": f"expected_{rule.replace(':', '_')}{labels(key)}", "values": f"{value!r}x10"}
            )
    for rule in ("ratio1h", "effective_samples:ratio1h", "lower:ratio1h", "upper:ratio1h"):
        got = f"{LEVEL}:ragmon_estimate:{rule}" if rule == "ratio1h" else f"{LEVEL}:ragmon_estimate_{rule}"
        want = f"expected_{rule.replace(':', '_')}"
        # Nothing off by more than 1e-9 relative, and every expected slice present. Absolutely, 1e-7:
        # a bound near 0 is the difference of two near-equal numbers (the variance is a difference of
        # sums of w²·y², so the rule's float64 keeps ~1e-8 there; seen: 3.2e-8 against 0).
        same = "on(service, query_type, metric, judge)"
        tests.append(
            {
                "expr": f"abs({got} - {same} {want}) > 1e-9 * abs({want}) + 1e-7",
                "eval_time": "10m",
                "exp_samples": [],
            }
        )
        tests.append(
            {
                "expr": f"{want} unless on(service, query_type, metric, judge) {got}",
                "eval_time": "10m",
                "exp_samples": [],
            }
        )
    await asyncio.to_thread(promtool_test, tmp_path / "estimates.test.yml", series, tests)


def test_the_release_rules_pool_services_and_keep_releases_apart(tmp_path: Path) -> None:
    """`release_query_type_metric:…`: per release, the estimate of every service's records
    together (their statistics summed), as `expected_estimates` computes it from the records."""
    records = {  # (service, release) -> [(w, faithfulness)]
        ("a", "v1"): [(2.0, 1.0), (2.0, 1.0), (4.0, 0.5)],
        ("b", "v1"): [(1.0, 1.0), (1.0, 0.0)],
        ("a", "v2"): [(2.0, 0.0), (2.0, 0.5), (8.0, 0.25)],
    }
    series = []
    for (service, release), wy in records.items():
        stats = {
            "samples": len(wy),
            "weight": sum(w for w, _ in wy),
            "weighted_value": sum(w * y for w, y in wy),
            "weight_squared": sum(w * w for w, _ in wy),
            "weight_squared_value": sum(w * w * y for w, y in wy),
            "weight_squared_value_squared": sum(w * w * y * y for w, y in wy),
        }
        for name, value in stats.items():
            lab = (
                f'{{service="{service}",query_type="lookup",release="{release}",'
                'metric="faithfulness",judge="x"}'
            )
            series.append({"series": f"ragmon_estimate_{name}_total{lab}", "values": f"0 {value!r}x10"})
    tests = []
    for release in ("v1", "v2"):
        lines = [
            {
                "service": "all",
                "query_type": "lookup",
                "judge": {"backend": "x", "outcome": "ok"},
                "sampling_weight": w,
            }
            | {"faithfulness": y, "hallucinated": None, "refuses": None, "false_refusal": None}
            | {"answer_relevance": None, "context_relevance": None}
            for (_, r), wy in records.items()
            if r == release
            for w, y in wy
        ]
        (want,) = expected_estimates(lines).values()
        for rule, value in want.items():
            name = "ragmon_estimate:ratio1h" if rule == "ratio1h" else f"ragmon_estimate_{rule}"
            sel = f'release_query_type_metric:{name}{{release="{release}"}}'
            tests.append(
                {
                    "expr": f"abs({sel} - {value!r}) < bool 1e-9",
                    "eval_time": "10m",
                    "exp_samples": [
                        {
                            "labels": f'{{release="{release}",query_type="lookup",'
                            'metric="faithfulness",judge="x"}',
                            "value": 1,
                        }
                    ],
                }
            )
    promtool_test(tmp_path / "release.test.yml", series, tests)


def test_a_young_pair_of_counters_keeps_the_estimate_in_its_range(tmp_path: Path) -> None:
    """`increase()` extrapolates a counter first seen inside the window back no further than to
    where its own first value and increase put its zero (and half a scrape interval when that is
    further than 1.1 of one): a young Σw·y and Σw are stretched by different factors and their
    ratio leaves the metric's range. The rules clamp the estimate to it; an ordinary pair is
    unchanged. Each slice has its own service and release: both levels read the same, and so
    does the dashboards' estimate (which divides the pooled statistics itself) for that service."""
    # (service, metric, Σw values, Σw·y values, the true ratio, the estimate recorded): the young
    # pairs appear at minute 80, scraped every minute to the evaluation at 90.
    young = "_x80 "
    slices = [
        # Σw: first 20 of an increase of 100 (zero 120 s before: too far, 30 s added, ×1.05 = 105);
        # Σw·y: first 8 (48 s: ×1.08 = 108): 108 / 105 = 1.029 for a true 108 / 120 = 0.9.
        ("young-faith", "faithfulness", young + "20+10x10", young + "8+10x10", 0.9, 1.0),
        # Σw 105 as above, Σw·y: first 30 of 300 (60 s: ×1.1 = 330): 3.14 for a true 2.75.
        ("young-rel-high", "relevance", young + "20+10x10", young + "30+30x10", 2.75, 3.0),
        # Σw: first 8 of 100 (×1.08 = 108), Σw·y: first 24 of 100 (×1.05 = 105): 0.97 for 1.15.
        ("young-rel-low", "context_relevance", young + "8+10x10", young + "24+10x10", 124 / 108, 1.0),
        # Counters older than the window: exact increases, the estimate unclamped.
        ("old-faith", "faithfulness", "0+10x100", "0+7x100", 0.7, 0.7),
        ("old-rel", "relevance", "0+10x100", "0+22x100", 2.2, 2.2),
    ]
    series, tests = [], []
    for service, metric, weight, weighted_value, truth, want in slices:
        key = (service, "lookup", metric, "x")
        for name, values in (("weight", weight), ("weighted_value", weighted_value)):
            series.append(
                {
                    "series": f"ragmon_estimate_{name}_total{labels(key, release=f'r-{service}')}",
                    "values": values,
                }
            )
        tests.append(
            {
                "expr": f'{LEVEL}:ragmon_estimate:ratio1h{{service="{service}"}}',
                "eval_time": "90m",
                "exp_samples": [{"labels": f"{LEVEL}:ragmon_estimate:ratio1h{labels(key)}", "value": want}],
            }
        )
        level = "release_query_type_metric"
        rkey = {"release": f"r-{service}", "query_type": "lookup", "metric": metric, "judge": "x"}
        rlabels = "{" + ",".join(f'{k}="{v}"' for k, v in rkey.items()) + "}"
        tests.append(
            {
                "expr": f'{level}:ragmon_estimate:ratio1h{{release="r-{service}"}}',
                "eval_time": "90m",
                "exp_samples": [{"labels": f"{level}:ragmon_estimate:ratio1h{rlabels}", "value": want}],
            }
        )
        tests.append(
            {
                "expr": substitute(build.estimate(metric)["estimate"], service=service),
                "eval_time": "90m",
                "exp_samples": [{"labels": '{query_type="lookup"}', "value": want}],
            }
        )
        # The premise: the true ratio (everything the counters gathered, a young one's since it
        # appeared) is in range, and the unclamped quotient of the increases is out for the young.
        tests.append(
            {
                "expr": f'ragmon_estimate_weighted_value_total{{service="{service}"}}'
                f' / ragmon_estimate_weight_total{{service="{service}"}}',
                "eval_time": "90m",
                "exp_samples": [{"labels": labels(key, release=f"r-{service}"), "value": truth}],
            }
        )
        low, top = (1.0, 3.0) if metric.endswith("relevance") else (0.0, 1.0)
        quotient = (
            f'{LEVEL}:ragmon_estimate_weighted_value:increase1h{{service="{service}"}}'
            f' / {LEVEL}:ragmon_estimate_weight:increase1h{{service="{service}"}}'
        )
        out = service.startswith("young")
        tests.append(
            {
                "expr": f"({quotient} < bool {low}) + ({quotient} > bool {top})",
                "eval_time": "90m",
                "exp_samples": [{"labels": labels(key), "value": 1 if out else 0}],
            }
        )
    promtool_test(tmp_path / "young.test.yml", series, tests)
