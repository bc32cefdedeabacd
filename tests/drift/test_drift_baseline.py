"""Pinned drift baselines: `rag-monitor baseline pin` from a window of production judgements or a
golden baseline, versioned; a pinned reference watches from the first record and never moves; a
bad file is a one-line start-up error; alerts say which baseline they are measured against. The
retrieval drift references are pinned in the same file, from the same results lines (weighted),
and the sidecar reads the file once for the drift stage and the ingest stage's monitor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support import REPO, Webhook, eventually, running, settings_for
from test_drift_stage import drifted, line

from monitor.app.sidecar import Sidecar
from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Chunk, Judgement, RagRecord
from monitor.contracts.results import ResultLine
from monitor.demo.workload import produce
from monitor.drift import DriftMonitor, DriftPolicy, RetrievalDriftMonitor
from monitor.drift.reference import BaselineFileError, load_baseline, retrieval_values
from monitor.kafka.client import ensure_topics
from monitor.kafka.config import KafkaConfig

T0 = 1_800_000_000.0


def result(qt: str, hallucinated: bool, end: float, **extra: Any) -> dict[str, Any]:
    body = json.loads(line(qt, hallucinated)[1])
    body["end"] = end
    body.update(extra)
    return body


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )


def test_pin_takes_the_window_and_says_what_it_left_out(tmp_path: Path) -> None:
    lines = [result("lookup", i % 10 == 0, T0 + i) for i in range(300)]  # 10 % in the window
    lines += [result("lookup", True, T0 - 50 - i) for i in range(50)]  # before it
    lines += [result("lookup", True, T0 + 10 + i, replay=True) for i in range(20)]  # golden replays
    lines += [result("lookup", True, T0 + i, judge={"outcome": "timeout"}) for i in range(7)]
    lines += [result("comparison", False, T0 + i) for i in range(30)]  # too few to pin
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    out = tmp_path / "baseline.json"
    since = "2027-01-15T08:00:00+00:00"  # T0
    done = cli("baseline", "pin", "--results", str(results), "--since", since, "--out", str(out))
    assert done.returncode == 0, done.stderr
    baseline = load_baseline(out)
    ref = baseline.slices["lookup"]["hallucination"]
    assert ref.records == 300 and ref.mean == pytest.approx(0.1)
    assert "comparison" not in baseline.slices
    assert baseline.version.startswith("sha256:") and baseline.source["kind"] == "results"
    for reason in (
        "outside the window (50)",
        "golden replay (20)",
        "not judged (7)",
        "not a JSON object (1)",
    ):
        assert reason in done.stdout, reason
    assert "comparison/hallucination: 30 < --min-records" in done.stdout
    # Same input, same version: the name is the content.
    again = cli("baseline", "pin", "--results", str(results), "--since", since, "--out", str(tmp_path / "b2"))
    assert load_baseline(tmp_path / "b2").version == baseline.version and again.returncode == 0
    shown = cli("baseline", "show", str(out))
    assert baseline.version in shown.stdout and "0.1000" in shown.stdout


def test_pin_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(result("lookup", False, T0)) + "\n")
    few = cli("baseline", "pin", "--results", str(results), "--out", str(tmp_path / "b.json"))
    assert few.returncode == 2 and "nothing pinned" in few.stderr and not (tmp_path / "b.json").exists()
    naive = cli("baseline", "pin", "--results", str(results), "--since", "2027-01-15T08:00", "--out", "x")
    assert naive.returncode == 2 and "time zone" in naive.stderr


def test_pin_from_a_golden_baseline_takes_faithfulness_only(tmp_path: Path) -> None:
    rows = {
        f"r{i}": {"query_type": "lookup" if i % 2 else "comparison", "faithfulness": 0.9, "refused": False}
        for i in range(40)
    }
    rows["u"] = {"query_type": "lookup", "faithfulness": None, "refused": True}
    golden = tmp_path / "golden-baseline.json"
    golden.write_text(json.dumps({"kind": "rag-monitor-golden-baseline", "rows": rows}))
    out = tmp_path / "b.json"
    done = cli(
        "baseline",
        "pin",
        "--golden-baseline",
        str(golden),
        "--min-records",
        "10",
        "--out",
        str(out),
        "--version",
        "g1",
    )
    assert done.returncode == 0, done.stderr
    baseline = load_baseline(out)
    assert baseline.version == "g1"
    assert {m for ms in baseline.slices.values() for m in ms} == {"faithfulness"}
    assert baseline.slices["lookup"]["faithfulness"].records == 20


def test_a_pinned_reference_watches_at_once_and_never_moves(tmp_path: Path) -> None:
    """Pinned at 5 %: a sustained 20 % is found within a few dozen records and the alarm holds
    for as long as it lasts (a reference taken from the slice itself would have absorbed it)."""
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(result("lookup", i % 20 == 0, T0 + i)) for i in range(1000)))
    out = tmp_path / "b.json"
    assert cli("baseline", "pin", "--results", str(results), "--out", str(out)).returncode == 0
    metrics = Metrics(CollectorRegistry())
    monitor = DriftMonitor(DriftPolicy(), metrics.drift, load_baseline(out).references())
    raised_at = None
    for i in range(3000):
        for _, _, up in monitor.observe("lookup", 1.0, [("hallucination", 1.0 if i % 5 == 0 else 0.0)]):
            if up and raised_at is None:
                raised_at = i
    assert raised_at is not None and raised_at < 300
    detector = monitor.detectors[("lookup", "hallucination")]
    assert detector.active and detector.reference.mean == pytest.approx(0.05)


async def test_a_bad_baseline_file_stops_the_start_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "b.json"
    bad.write_text(json.dumps({"kind": "rag-monitor-drift-baseline", "schema_version": 1, "version": "x"}))
    settings = settings_for("127.0.0.1:1", "t", None, alerts={"drift": {"baseline_file": str(bad)}})
    with pytest.raises(BaselineFileError, match=r"b\.json: created_at: Field required"):
        Sidecar(settings)
    config = tmp_path / "c.yaml"
    config.write_text(
        f"alerts:\n  drift:\n    baseline_file: {bad}\nkafka:\n  bootstrap_servers: 127.0.0.1:1\n"
    )
    done = cli("run", "--config", str(config), "--metrics-port", "0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: drift baseline {bad}: created_at: Field required"]


@pytest.mark.kafka
async def test_alerts_name_the_pinned_baseline(
    broker: Any, topic: str, webhook: Webhook, tmp_path: Path
) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(result("lookup", i % 20 == 0, T0 + i)) for i in range(500)))
    out = tmp_path / "b.json"
    assert (
        cli(
            "baseline", "pin", "--results", str(results), "--out", str(out), "--version", "prod-2027-01"
        ).returncode
        == 0
    )
    bs = broker.bootstrap_servers
    settings = settings_for(
        bs,
        topic,
        None,
        pipeline={"role": "drift"},
        alerts={"webhook_url": webhook.url, "drift": {"baseline_file": str(out), "min_records": 10}},
    )
    assert settings.results.topic is not None
    await ensure_topics(KafkaConfig(bootstrap_servers=bs), [settings.results.topic], partitions=1)
    async with running(settings) as sidecar:
        # Armed from start-up, before any record: the pinned slice at its 500 records, an unpinned
        # one collecting from 0.
        hall, other = {"query_type": "lookup", "metric": "hallucination"}, {"query_type": "comparison"}
        armed = sidecar.metrics.registry.get_sample_value
        assert armed("ragmon_drift_armed", hall) == 1
        assert armed("ragmon_drift_reference_records", hall) == 500
        assert armed("ragmon_drift_reference_required_records", hall) == 500
        assert armed("ragmon_drift_armed", {**other, "metric": "hallucination"}) == 0
        await produce(bs, settings.results.topic, drifted("lookup", 80))
        await eventually(lambda: bool(webhook.bodies), what="an alert")
        assert (
            sidecar.metrics.registry.get_sample_value(
                "ragmon_drift_baseline_info", {"version": "prod-2027-01"}
            )
            == 1
        )
    first = webhook.bodies[0]
    assert first["labels"]["metric"] == "hallucination"
    assert first["annotations"]["baseline_version"] == "prod-2027-01"
    assert first["annotations"]["baseline"] == "0.0500"
    assert "baseline prod-2027-01" in first["annotations"]["description"]


# -- retrieval drift references ------------------------------------------------------------------


def retrieved(
    qt: str, count: int, score: float | None, weight: float, end: float, **extra: Any
) -> dict[str, Any]:
    """A results line with its record's chunks, as the judge stage writes every sampled record."""
    body = result(qt, False, end, sampling_weight=weight)
    body["chunks"] = [
        {"id": f"c{i}", "content": "text", "score": None if score is None else score - 0.01 * i}
        for i in range(count)
    ]
    body.update(extra)
    return body


def lookup_lines(n: int = 400) -> list[dict[str, Any]]:
    """Half the lines without chunks at weight 1 (suspicious records: all sampled), half with five
    chunks at weight 19 (top score 0.6-0.9): in production 5 % of records have no chunks, in the
    sample 50 %."""
    return [
        retrieved("lookup", 0, None, 1.0, T0 + i)
        if i % 2
        else retrieved("lookup", 5, 0.6 + 0.3 * (i % 100) / 100, 19.0, T0 + i)
        for i in range(n)
    ]


def pinned_file(tmp_path: Path, *args: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    lines = lookup_lines()
    # Skipped by the judge (a budget), still sampled records: retrieval references, no CUSUM ones.
    lines += [
        {k: v for k, v in retrieved("comparison", 3, 0.5, 1.0, T0 + i).items() if k != "judge"}
        | {"judge_skipped": "budget"}
        for i in range(250)
    ]
    # Relabelled by the judge: watched by ingest under the rules' label, which newer lines keep.
    lines += [retrieved("lookup", 0, None, 1.0, T0 + i, query_type_source="judge") for i in range(20)]
    lines += [
        retrieved("lookup", 3, 0.5, 1.0, T0 + i, query_type_source="judge", record_query_type="comparison")
        for i in range(30)
    ]
    lines += [retrieved("lookup", 0, None, 1.0, T0 + i, replay=True) for i in range(20)]
    lines += [retrieved("lookup", 0, None, 1.0, T0 - 100 - i) for i in range(10)]
    lines += [result("lookup", False, T0 + i) for i in range(5)]  # written before chunks were kept
    tmp_path.mkdir(exist_ok=True)
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "baseline.json"
    since = "2027-01-15T08:00:00+00:00"  # T0
    done = cli("baseline", "pin", "--results", str(results), "--since", since, "--out", str(out), *args)
    return out, done


def test_pin_takes_retrieval_references_from_results_lines_weighted(tmp_path: Path) -> None:
    out, done = pinned_file(tmp_path)
    assert done.returncode == 0, done.stderr
    baseline = load_baseline(out)
    lookup = baseline.retrieval["lookup"]
    # Weighted: 200 / (200 + 200 x 19) = 5 % without chunks (unweighted it would be 50 %).
    assert lookup.chunk_count.shares == pytest.approx([0.05, 0, 0, 0, 0, 0.95, 0])
    assert lookup.top_score.shares[0] == pytest.approx(0.05)  # "no score": the records without chunks
    assert (
        len(lookup.top_score.edges) == 9
        and 0.6 < lookup.top_score.edges[0] < lookup.top_score.edges[-1] < 0.9
    )
    assert lookup.top_score.shares[1:] == pytest.approx([0.095] * 10, abs=0.02)  # deciles
    assert lookup.records == 400
    assert lookup.effective_records == pytest.approx(4000**2 / (200 + 200 * 19**2))  # ~221
    # Lines the judge skipped count: the retriever served those records too.
    assert "comparison" in baseline.retrieval and "comparison" not in baseline.slices
    assert baseline.retrieval["comparison"].chunk_count.shares == pytest.approx([0, 0, 0, 1, 0])
    assert baseline.retrieval["comparison"].records == 250 + 30
    for reason in (
        "left out of retrieval: query type set by the judge (20)",
        "left out of retrieval: golden replay (20)",
        "left out of retrieval: outside the window (10)",
        "left out of retrieval: no chunks list (5)",
    ):
        assert reason in done.stdout, reason
    assert "not judged (250)" in done.stdout  # the CUSUM references still want judgements
    shown = cli("baseline", "show", str(out))
    assert shown.returncode == 0, shown.stderr
    for text in (
        "chunk_count",
        "0:0.050",
        "5:0.950 more:0.000",
        "top_score",
        "none:0.050",
        "400 results lines",
    ):
        assert text in shown.stdout, text
    # Its own hash names it; a pin without retrieval is named and written as before.
    plain, done = pinned_file(tmp_path / "plain", "--no-retrieval")
    assert done.returncode == 0, done.stderr
    assert "retrieval" not in json.loads(plain.read_text()) and load_baseline(plain).retrieval == {}
    assert load_baseline(plain).version != baseline.version
    assert "retrieval: none pinned" in cli("baseline", "show", str(plain)).stdout
    # --min-records counts effective records for these (the weights' design effect is paid).
    _, strict = pinned_file(tmp_path / "strict", "--min-records", "240")
    assert "lookup: 221 effective records (of 400 lines) < --min-records" in strict.stdout


def test_a_results_line_as_the_judge_stage_writes_it_carries_the_record_s_retrieval() -> None:
    """`retrieval_values` reads a line merged as monitor/judge/stage.py merges it (the record's
    fields, the sample's, then the judgement's; a skipped record's line has no judgement): the
    record's ranked `chunks` survive the merge. That the stage writes such lines is checked end to
    end: `record_query_type` in test_judge_query_type.py, `chunks` in test_bad_input.py."""
    record = RagRecord(
        trace_id="a" * 32,
        span_id="b" * 16,
        service="shop",
        query="q",
        query_type="lookup",
        chunks=[Chunk("c1", "text", 0.83), Chunk("c2", "more", 0.5)],
        answer="a",
    )
    judgement = Judgement.from_verdicts(
        [],
        answerable_from_context=True,
        answer_relevance=3,
        trace_id=record.trace_id,
        query_type="lookup",
        service="shop",
        backend="lexical",
        model="lexical",
        sampling_weight=4.0,
    )
    skipped = record.to_json_dict() | {"sampling_weight": 4.0, "query_type_source": "span"}
    judged = skipped | judgement.to_json_dict()
    for written in (skipped, judged):
        line = ResultLine.model_validate_json(json.dumps(written))
        assert retrieval_values(line) == ("lookup", 4.0, 2, 0.83)
    record.chunks = []
    no_chunks = ResultLine.model_validate(record.to_json_dict() | {"sampling_weight": 1})
    assert retrieval_values(no_chunks) == ("lookup", 1.0, 0, None)


async def ingest_monitor(baseline_file: Path | None) -> tuple[RetrievalDriftMonitor, Metrics]:
    """The ingest stage's retrieval monitor as the sidecar starts it with `baseline_file` (its
    producer, never started, closed)."""
    drift = {"baseline_file": str(baseline_file)} if baseline_file is not None else {}
    settings = settings_for("127.0.0.1:1", "t", None, pipeline={"role": "ingest"}, alerts={"drift": drift})
    sidecar = Sidecar(settings, Metrics(CollectorRegistry()))
    await sidecar.output.close()
    assert sidecar.ingest is not None and sidecar.drift is None
    return sidecar.ingest.retrieval_drift, sidecar.metrics


async def test_retrieval_monitor_watches_pinned_slices_from_the_first_record(tmp_path: Path) -> None:
    """The ingest stage's monitor from `alerts.drift.baseline_file`: a retriever broken at start-up
    alarms once the window has its minimum, where an unpinned one takes the broken state as its
    reference (a restart during an incident does not adopt it)."""
    out, done = pinned_file(tmp_path, "--version", "prod-2027-02")
    assert done.returncode == 0, done.stderr
    policy = DriftPolicy(baseline_file=out)
    monitor, metrics = await ingest_monitor(out)
    assert set(monitor.pinned) == {"lookup", "comparison"}
    assert metrics.registry.get_sample_value("ragmon_drift_baseline_info", {"version": "prod-2027-02"}) == 1
    labels = {"query_type": "lookup", "feature": "chunk_count"}
    minimum = policy.retrieval.min_records
    for k in range(1, minimum + 1):
        monitor.observe("lookup", 0, None)
        if k < minimum:
            assert metrics.registry.get_sample_value("ragmon_retrieval_drift_active", labels) == 0
    assert metrics.registry.get_sample_value("ragmon_retrieval_drift_active", labels) == 1
    assert metrics.registry.get_sample_value("ragmon_retrieval_drift_alarms_total", labels) == 1
    # Traffic like the pinned window's stays silent.
    same = [(0, None) if i % 20 == 0 else (5, 0.6 + 0.3 * (i * 7 % 100) / 100) for i in range(3000)]
    calm, _ = await ingest_monitor(out)
    for count, score in same:
        calm.observe("lookup", count, score)
    psi = [f.psi for f in calm.slices["lookup"].features]
    assert max(psi) < 0.1 and not any(f.alarms for f in calm.slices["lookup"].features)
    # A restart while the retriever is broken: pinned, it alarms; without the file the slice
    # freezes the broken records as its reference and stays silent.
    restarted, _ = await ingest_monitor(out)
    unpinned, fresh = await ingest_monitor(None)
    broken = policy.retrieval.reference_records + policy.retrieval.window_records
    for m in (restarted, unpinned):
        for _ in range(broken):
            m.observe("lookup", 0, None)
    assert [f.alarms for f in restarted.slices["lookup"].features] == [1, 1]
    assert unpinned.slices["lookup"].frozen
    assert [f.alarms for f in unpinned.slices["lookup"].features] == [0, 0]
    # No file: nothing pinned, the slices collect their first records, version "none".
    assert unpinned.pinned == {}
    assert fresh.registry.get_sample_value("ragmon_drift_baseline_info", {"version": "none"}) == 1


async def test_the_sidecar_reads_the_baseline_file_once_for_both_stages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Role `all`: the drift stage's CUSUM references and the ingest stage's retrieval ones come
    from one read of the file, and `ragmon_drift_baseline_info` has one series."""
    out, done = pinned_file(tmp_path, "--version", "prod-2027-03")
    assert done.returncode == 0, done.stderr
    reads: list[Path] = []
    read_text = Path.read_text

    def counting(path: Path, *args: Any, **kwargs: Any) -> str:
        if path == out:
            reads.append(path)
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting)
    settings = settings_for(
        "127.0.0.1:1", "t", None, judge={"backend": "none"}, alerts={"drift": {"baseline_file": str(out)}}
    )
    sidecar = Sidecar(settings, Metrics(CollectorRegistry()))
    await sidecar.output.close()
    assert len(reads) == 1
    assert sidecar.drift is not None and sidecar.ingest is not None
    assert sidecar.drift.baseline is not None and sidecar.drift.baseline.version == "prod-2027-03"
    drift = sidecar.drift.monitor
    drift.observe("lookup", 1.0, [("hallucination", 0.0)])
    assert drift.detectors[("lookup", "hallucination")].reference.frozen  # pinned: no records collected
    assert set(sidecar.ingest.retrieval_drift.pinned) == {"lookup", "comparison"}
    info = [
        s.labels
        for family in sidecar.metrics.registry.collect()
        if family.name == "ragmon_drift_baseline_info"
        for s in family.samples
    ]
    assert info == [{"version": "prod-2027-03"}]


OLD_FILE = {  # as `baseline pin` wrote it before the retrieval section existed
    "kind": "rag-monitor-drift-baseline",
    "schema_version": 1,
    "version": "sha256:0123456789ab",
    "created_at": "2027-01-15T08:00:00+00:00",
    "source": {"kind": "results", "path": "results.jsonl", "since": None, "until": None},
    "slices": {
        "lookup": {
            "hallucination": {
                "records": 300,
                "sum_w": 300.0,
                "sum_w2": 300.0,
                "sum_wy": 30.0,
                "sum_wy2": 30.0,
            }
        }
    },
}


async def test_old_baseline_files_still_load(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps(OLD_FILE))
    baseline = load_baseline(old)
    assert baseline.retrieval == {} and baseline.references()[("lookup", "hallucination")].mean == 0.1
    assert (await ingest_monitor(old))[0].pinned == {}
    shown = cli("baseline", "show", str(old))
    assert shown.returncode == 0 and "retrieval: none pinned" in shown.stdout


GOOD_SECTION = {
    "records": 400,
    "effective_records": 221.0,
    "chunk_count": {"shares": [0.05, 0.0, 0.95]},
    "top_score": {"edges": [0.6, 0.8], "shares": [0.05, 0.3, 0.35, 0.3]},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"chunk_count": {"shares": [0.05, 0.9]}},
            "chunk_count.shares: Value error, shares must add up to 1, not 0.95",
        ),
        (
            {"chunk_count": {"shares": [-0.05, 0.1, 0.95]}},
            r"chunk_count.shares.0: Input should be greater than or equal to 0",
        ),
        (
            {"top_score": {"edges": [0.8, 0.6], "shares": [0.05, 0.3, 0.35, 0.3]}},
            "top_score: Value error, edges must be strictly ascending",
        ),
        (
            {"top_score": {"edges": [0.6], "shares": [0.05, 0.3, 0.35, 0.3]}},
            r"top_score: Value error, 4 shares for 1 edges: need 3",
        ),
        ({"effective_records": 500.0}, r"Value error, effective_records \(500.0\) exceeds records \(400\)"),
        ({"top_score": None}, "top_score: Input should be a valid dictionary"),
        ({"psi": 0.2}, "psi: Extra inputs are not permitted"),
    ],
)
async def test_a_bad_retrieval_section_is_a_one_line_start_up_error(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    bad = tmp_path / "b.json"
    bad.write_text(json.dumps(OLD_FILE | {"retrieval": {"lookup": GOOD_SECTION | change}}))
    with pytest.raises(BaselineFileError, match=r"b\.json: retrieval\.lookup\.?.*" + message) as caught:
        await ingest_monitor(bad)
    assert "\n" not in str(caught.value)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(OLD_FILE | {"retrieval": {"lookup": GOOD_SECTION}}))
    assert set(load_baseline(good).retrieval_references()) == {"lookup"}


def test_a_bad_retrieval_section_stops_the_sidecar_and_show_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "b.json"
    bad.write_text(json.dumps(OLD_FILE | {"retrieval": {"lookup": GOOD_SECTION | {"records": 0}}}))
    expected = (
        f"error: drift baseline {bad}: retrieval.lookup.records: Input should be greater than or equal to 1"
    )
    shown = cli("baseline", "show", str(bad))
    assert shown.returncode == 2 and shown.stderr.strip().splitlines() == [expected]
    config = tmp_path / "c.yaml"
    config.write_text(
        f"alerts:\n  drift:\n    baseline_file: {bad}\nkafka:\n  bootstrap_servers: 127.0.0.1:1\n"
    )
    done = cli("run", "--config", str(config), "--metrics-port", "0")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [expected]
