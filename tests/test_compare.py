"""`rag-monitor compare --results F --by release`: each metric per release with its interval and
sample count, and a verdict against the release before it, the test named in the output."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from support import eventually, prometheus_process, result_lines, running, settings_for

from monitor.compare import compare, group
from monitor.contracts.results import ResultLine
from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.demo.workload import WorkloadConfig, generate, produce
from monitor.outputs.http import MetricsServer

REPO = Path(__file__).resolve().parent.parent
T0 = 1_800_000_000.0


def line(
    release: str | None, faithful: bool, when: float, weight: float = 2.0, **extra: Any
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "v": 1,
        "trace_id": f"{random.getrandbits(128):032x}",
        "query_type": "lookup",
        "end": when,
        "sampling_weight": weight,
        "faithfulness": 1.0 if faithful else 0.5,
        "hallucinated": not faithful,
        "answer_relevance": 3 if faithful else 2,
        "judge": {"backend": "lexical", "outcome": "ok"},
    }
    if release is not None:
        doc["release"] = release
    return doc | extra


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )


def write(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def test_a_worse_release_is_named_worse_and_an_equal_one_no_detectable_change(tmp_path: Path) -> None:
    random.seed(4)
    docs = [line("v1.4.1", i % 20 != 0, T0 + i) for i in range(200)]  # 95 % faithful
    docs += [line("v1.4.2", i % 3 != 0, T0 + 1000 + i) for i in range(200)]  # 67 %
    docs += [line("v1.4.3", i % 3 != 0, T0 + 2000 + i) for i in range(200)]  # 67 % again
    docs += [line(None, True, T0 + 3000 + i) for i in range(30)]  # older lines: unknown
    docs += [line("v1.4.2", False, T0 + 1000, judge={"outcome": "timeout"}) for _ in range(5)]
    docs += [line("v1.4.2", False, T0 + 1000, replay=True) for _ in range(5)]
    out = cli("compare", "--results", str(write(tmp_path / "r.jsonl", docs)), "--by", "release", "--json")
    assert out.returncode == 0, out.stderr
    rows = {(r["release"], r["metric"]): r for r in map(json.loads, out.stdout.splitlines())}
    first = rows["v1.4.1", "faithfulness"]
    assert first["samples"] == 200 and first["verdict"] == "" and first["baseline"] is None
    assert first["lower"] < 0.975 < first["upper"]
    assert rows["v1.4.2", "faithfulness"]["baseline"] == "v1.4.1"
    assert rows["v1.4.2", "faithfulness"]["verdict"] == "worse"
    assert rows["v1.4.2", "hallucination"]["verdict"] == "worse"  # a rate: up is worse
    assert rows["v1.4.2", "relevance"]["verdict"] == "worse"
    assert rows["v1.4.3", "faithfulness"]["baseline"] == "v1.4.2"
    assert rows["v1.4.3", "faithfulness"]["verdict"] == "no detectable change"
    assert rows["unknown", "faithfulness"]["verdict"] == ""  # pooled: shown, never compared
    assert "10 lines left out" in out.stderr
    assert all("unpaired" in r["test"] for r in rows.values())
    # Against a named baseline, and as a table that states the test.
    table = cli("compare", "--results", str(tmp_path / "r.jsonl"), "--baseline", "v1.4.1")
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("test: unpaired: difference of two weighted")
    v143 = [t for t in table.stdout.splitlines() if t.startswith("v1.4.3") and " faithfulness " in t]
    assert len(v143) == 1 and v143[0].rstrip().endswith("worse") and "v1.4.1" in v143[0]


def test_fewer_refusals_bought_with_invented_answers_are_worse_not_better(tmp_path: Path) -> None:
    """The demo's faulty release: where the healthy one refused an out-of-corpus question, it
    answers with an invented fact. Its refusal rate falls; that is not an improvement."""
    random.seed(5)
    docs = [line("v1.4.1", True, T0 + i, refuses=i % 5 == 0) for i in range(300)]  # 20 % refusals
    docs += [
        line("v1.4.2", i % 5 != 0 or i % 10 == 0, T0 + 1000 + i, refuses=i % 10 == 0) for i in range(300)
    ]  # 10 % refusals, the other 10 % invented answers
    out = cli("compare", "--results", str(write(tmp_path / "r.jsonl", docs)), "--json")
    assert out.returncode == 0, out.stderr
    rows = {(r["release"], r["metric"]): r for r in map(json.loads, out.stdout.splitlines())}
    assert rows["v1.4.2", "hallucination"]["verdict"] == "worse"
    refusal = rows["v1.4.2", "refusal"]
    assert refusal["difference"] < 0 and refusal["verdict"] == "worse"
    assert "refusals traded for invented answers" in refusal["note"]
    table = cli("compare", "--results", str(tmp_path / "r.jsonl")).stdout
    [shown] = [t for t in table.splitlines() if t.startswith("v1.4.2") and " refusal " in t]
    assert "worse" in shown and "traded for invented answers" in shown

    # Fewer refusals with grounded answers: only "lower", the rate says nothing better by itself.
    docs = [line("a", True, T0 + i, refuses=i % 5 == 0) for i in range(300)]
    docs += [line("b", True, T0 + 1000 + i, refuses=i % 10 == 0) for i in range(300)]
    groups, _ = group(ResultLine.model_validate(d) for d in docs)
    rows_b = {r.metric: r for r in compare(groups) if r.release == "b"}
    assert rows_b["refusal"].verdict == "lower" and "better only if" in rows_b["refusal"].note


def test_weights_count_and_few_samples_give_no_verdict() -> None:
    docs = [line("a", True, T0 + i, weight=1.0) for i in range(20)]
    docs += [line("a", False, T0 + 20 + i, weight=9.0) for i in range(20)]  # weighted: 10 % faithful
    docs += [line("b", False, T0 + 100 + i) for i in range(3)]
    groups, left_out = group(ResultLine.model_validate(d) for d in docs)
    assert left_out == 0
    rows = {(r.release, r.metric): r for r in compare(groups)}
    assert abs(rows["a", "hallucination"].estimate - 0.9) < 1e-9
    assert rows["b", "faithfulness"].verdict == "too few samples"


def test_an_unknown_baseline_is_an_error(tmp_path: Path) -> None:
    out = cli(
        "compare", "--results", str(write(tmp_path / "r.jsonl", [line("v1", True, T0)])), "--baseline", "v9"
    )
    assert out.returncode == 2 and "v9" in out.stderr


def prometheus_config(path: Path, sidecar_port: int) -> Path:
    scrape = {"job_name": "rag-monitor", "static_configs": [{"targets": [f"127.0.0.1:{sidecar_port}"]}]}
    path.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [scrape]}))
    return path


def scraped_samples(prom: str) -> float:
    r = httpx.get(f"{prom}/api/v1/query", params={"query": "sum(ragmon_estimate_samples_total)"}, timeout=10)
    result = r.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


async def judged_and_scraped(
    bs: str, spans: str, results: Path, batches: list[list[tuple[bytes, bytes]]], port: int, prom: str
) -> float:
    """Each batch of spans judged by a sidecar on `port` (one batch after the other), and its
    estimate counters' final values scraped by Prometheus at `prom`; the time of that scrape.
    After it the sidecar is gone and its series stale: read the window up to that time."""
    async with running(settings_for(bs, spans, results)) as sidecar:
        server = MetricsServer(sidecar.metrics.registry, "127.0.0.1", port)
        server.start()
        try:
            done = 0
            for pairs in batches:
                done += len(pairs)
                await produce(bs, spans, pairs)
                await eventually(
                    lambda n=done: len(result_lines(results)) == n, within=60, what=f"{done} results"
                )
            total = sum(
                s.value
                for m in sidecar.metrics.registry.collect()
                for s in m.samples
                if s.name == "ragmon_estimate_samples_total"
            )
            await eventually(lambda: scraped_samples(prom) == total, within=30, what="final scrape")
            return time.time()
        finally:
            server.stop()


async def test_compare_from_prometheus_gives_what_the_results_file_gives(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Two releases through a live sidecar scraped by a real Prometheus: `compare --prometheus`
    reads the estimate counters and gives each release's n, estimate, interval and verdict as
    `compare --results` does from the same sidecar's results file."""
    results = tmp_path / "results.jsonl"
    old = generate(150, seed=31, config=WorkloadConfig(service_version="v1.4.1", ungrounded_rate=0.05))
    new = generate(150, seed=32, config=WorkloadConfig(service_version="v1.4.2", ungrounded_rate=0.6))
    port = free_port()
    config = prometheus_config(tmp_path / "prometheus.yml", port)
    with prometheus_process(config, tmp_path / "tsdb") as prom:
        batches = [old.pairs(), new.pairs()]
        at = await judged_and_scraped(broker.bootstrap_servers, topic, results, batches, port, prom)
        from_prom = cli("compare", "--prometheus", prom, "--range", "1h", "--at", str(at), "--json")
        from_file = cli("compare", "--results", str(results), "--json")
    assert from_prom.returncode == 0 and from_file.returncode == 0, from_prom.stderr + from_file.stderr
    prom_rows = {(r["release"], r["metric"]): r for r in map(json.loads, from_prom.stdout.splitlines())}
    file_rows = {(r["release"], r["metric"]): r for r in map(json.loads, from_file.stdout.splitlines())}
    assert prom_rows.keys() == file_rows.keys() and ("v1.4.2", "faithfulness") in prom_rows
    for key, want in file_rows.items():
        got = prom_rows[key]
        assert got["samples"] == want["samples"] and got["baseline"] == want["baseline"], key
        assert got["verdict"] == want["verdict"], key
        for field in ("estimate", "lower", "upper"):
            assert abs(got[field] - want[field]) < 1e-9, (key, field)
    assert prom_rows["v1.4.2", "faithfulness"]["verdict"] == "worse"


async def test_compare_from_prometheus_names_a_release_whose_counters_restarted(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """A sidecar restart inside the window resets the counters: the end-minus-start sums then
    undercount, and the command says so for the release it touches."""
    port = free_port()
    config = prometheus_config(tmp_path / "prometheus.yml", port)
    with prometheus_process(config, tmp_path / "tsdb") as prom:
        for run, n in enumerate((60, 20)):
            work = generate(n, seed=40 + run, config=WorkloadConfig(service_version="v2"))
            spans = f"{topic}-{run}"  # a fresh consumer group: no wait for the last one to leave
            results = tmp_path / f"results-{run}.jsonl"
            bs = broker.bootstrap_servers
            at = await judged_and_scraped(bs, spans, results, [work.pairs()], port, prom)
        out = cli("compare", "--prometheus", prom, "--range", "1h", "--at", str(at), "--json")
    assert out.returncode == 0, out.stderr
    assert "the counters of v2 restarted in the window" in out.stderr


def test_compare_needs_one_source_and_says_when_prometheus_cannot_answer(tmp_path: Path) -> None:
    neither = cli("compare")
    assert neither.returncode == 2 and "one of --results FILE or --prometheus URL" in neither.stderr
    down = cli("compare", "--prometheus", f"http://127.0.0.1:{free_port()}", "--range", "2h")
    assert down.returncode == 2 and "cannot reach Prometheus" in down.stderr
    bad = cli("compare", "--prometheus", "http://127.0.0.1:1", "--range", "soon")
    assert bad.returncode == 2 and "not a duration" in bad.stderr


def test_session_and_user_narrow_a_results_file_and_are_refused_with_prometheus(tmp_path: Path) -> None:
    """One user's conversation on v2 went badly while everyone else's was fine: `--user` and
    `--session` compare only their records (they ride on results lines, never on metric labels)."""
    random.seed(9)
    docs = [line("v1", True, T0 + i, session_id=f"s{i % 7}", user_id=f"u{i % 5}") for i in range(100)]
    docs += [line("v2", True, T0 + 1000 + i, session_id="s-other", user_id="u-other") for i in range(100)]
    docs += [line("v2", False, T0 + 2000 + i, session_id="s-bad", user_id="u-bad") for i in range(30)]
    path = write(tmp_path / "r.jsonl", docs)

    def faithfulness(*args: str) -> dict[str, Any]:
        out = cli("compare", "--results", str(path), "--json", *args)
        assert out.returncode == 0, out.stderr
        return {
            r["release"]: r for r in map(json.loads, out.stdout.splitlines()) if r["metric"] == "faithfulness"
        }

    every = faithfulness()
    assert every["v2"]["samples"] == 130
    bad_user = faithfulness("--user", "u-bad")
    assert set(bad_user) == {"v2"} and bad_user["v2"]["samples"] == 30 and bad_user["v2"]["estimate"] == 0.5
    one_session = faithfulness("--session", "s3")
    assert set(one_session) == {"v1"} and one_session["v1"]["samples"] == 14
    refused = cli("compare", "--prometheus", "http://127.0.0.1:9", "--session", "s3")
    assert refused.returncode == 2 and "need --results" in refused.stderr
