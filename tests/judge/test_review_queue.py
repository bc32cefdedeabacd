"""The review queue through the real broker: the sidecar judges traffic with repeat disagreements,
undecided claims and a uniform share, and the review topic and file hold the right lines, each
trace once, within the hourly bound; a drift alert's examples are queued; a flood or a dead review
sink never holds the judge stage up."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable
from hashlib import blake2b
from pathlib import Path
from typing import Any

import pytest
from support import Webhook, eventually, read_topic, result_ids, result_lines, running, sample, settings_for

from monitor.app.config import Settings
from monitor.app.sidecar import build_judge
from monitor.contracts.model import Judgement, RagRecord, Verdict
from monitor.contracts.results import ReviewLine
from monitor.demo.workload import WorkloadConfig, generate, produce
from monitor.judge import Judge

pytestmark = pytest.mark.kafka


class Scripted:
    """The configured (lexical) judge, with chosen records made hard: for `flaky` traces every
    second judgement rates the answer's relevance otherwise (a repeat disagreement); for `unsure`
    traces the first claim is left undecided (`uncertain`)."""

    def __init__(self, real: Judge | None, flaky: Iterable[str] = (), unsure: Iterable[str] = ()) -> None:
        assert real is not None
        self.real, self.name, self.model = real, real.name, real.model
        self.flaky, self.unsure = set(flaky), set(unsure)
        self.calls: collections.Counter[str] = collections.Counter()

    async def judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        j = await self.real.judge(record, sampling_weight=sampling_weight)
        self.calls[record.trace_id] += 1
        if record.trace_id in self.flaky and self.calls[record.trace_id] % 2 == 0:
            j.answer_relevance = 1 if j.answer_relevance != 1 else 3
        if record.trace_id in self.unsure and j.claims:
            j.claims[0].verdict = Verdict.UNCERTAIN
        return j

    async def aclose(self) -> None:
        await self.real.aclose()


def drawn(trace_id: str) -> float:
    """The documented uniform draw: BLAKE2b-64 of "<trace id>:review" over 2**64."""
    return int.from_bytes(blake2b(f"{trace_id}:review".encode(), digest_size=8).digest(), "big") / 2.0**64


def review_settings(bs: str, topic: str, tmp: Path, review: dict[str, Any], **sections: Any) -> Settings:
    review = {"enabled": True, "file": str(tmp / "review.jsonl"), **review}
    return settings_for(bs, topic, tmp / "results.jsonl", review=review, **sections)


def queue_lines(path: Path) -> list[dict[str, Any]]:
    """The review file's complete lines, each read through `ReviewLine` as the review UI does."""
    return result_lines(path, ReviewLine)


def by_reason(lines: list[dict[str, Any]]) -> dict[str, int]:
    return dict(collections.Counter(r for line in lines for r in line["review"]["reasons"]))


async def test_the_queue_holds_each_selected_trace_once_with_its_reasons(
    broker: Any, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    work = generate(240, seed=11)
    answered = [t.trace_id for t in work.traces if t.outcome != "refusal"]
    flaky, unsure = set(answered[:15]), set(answered[15:40])
    settings = review_settings(
        bs, topic, tmp_path, {"uniform_share": 0.2, "max_per_hour": 1000}, judge={"repeat_fraction": 1.0}
    )
    judge = Scripted(build_judge(settings), flaky, unsure)
    review_file, results = tmp_path / "review.jsonl", tmp_path / "results.jsonl"
    async with running(settings, judge) as sidecar:
        await produce(bs, topic, work.pairs())
        await eventually(lambda: result_ids(results) >= {t.trace_id for t in work.traces}, what="results")
        stage = sidecar.judge_stage
        assert stage is not None and stage.review is not None
        review = stage.review
        await eventually(lambda: review.written == review.queued > 0, what="the queue written")
        reasons = ("disagreement", "boundary", "alert", "uniform")
        counted = {r: sample(sidecar, "ragmon_review_queued_total", reason=r) for r in reasons}
    lines = queue_lines(review_file)
    ids = [line["trace_id"] for line in lines]
    assert len(ids) == len(set(ids))  # each trace once
    got = {line["trace_id"]: line for line in lines}
    judged = {r["trace_id"]: r for r in result_lines(results) if r.get("judge", {}).get("outcome") == "ok"}
    uniform = {t for t in judged if drawn(t) < 0.2}
    assert 25 < len(uniform) < 75
    # Every hard case made so is there, with its reason; the uniform share exactly as drawn.
    assert all("disagreement" in got[t]["review"]["reasons"] for t in flaky)
    assert all("boundary" in got[t]["review"]["reasons"] for t in unsure)
    assert {t for t, line in got.items() if line["review"]["uniform"]} == uniform
    for t, line in got.items():
        meta = line.pop("review")
        assert ("uniform" in meta["reasons"]) == meta["uniform"] == (t in uniform)
        assert meta.get("weight") == (pytest.approx(1.0 / 0.2) if meta["uniform"] else None)  # rate 1
        assert ("disagreement" in meta["reasons"]) == (t in flaky)  # the lexical judge agrees with itself
        # The whole results line: the record and the judge's verdicts, as the results file has it.
        assert line == judged[t]
    # Nothing selected is missing: a judged trace not queued has no reason to be.
    for t, r in judged.items():
        if t not in got:
            assert t not in uniform and t not in flaky and t not in unsure
            assert not r.get("repeat_disagreements")
    # The topic holds the same lines, keyed by trace id.
    topic_lines = await read_topic(bs, settings.review.topic or "", count=len(lines), within=10.0)
    assert sorted((m.key or b"").decode() for m in topic_lines) == sorted(ids)
    assert {json.loads(m.value)["trace_id"]: json.loads(m.value) for m in topic_lines} == {
        line["trace_id"]: line for line in queue_lines(review_file)
    }
    # Share by reason, as counted.
    assert counted == {r: float(by_reason(queue_lines(review_file)).get(r, 0)) for r in counted}
    share = {r: round(n / len(lines), 2) for r, n in by_reason(queue_lines(review_file)).items()}
    print(f"{len(lines)} queued of {len(judged)} judged; share by reason: {share}")


async def test_the_hourly_bound_holds_and_hard_cases_never_starve_the_uniform_share(
    broker: Any, topic: str, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    work = generate(300, seed=12)
    answered = [t.trace_id for t in work.traces if t.outcome != "refusal"]
    unsure = set(answered[:150])  # a flood of boundary cases, first in the topic
    settings = review_settings(bs, topic, tmp_path, {"uniform_share": 0.08, "max_per_hour": 60})
    judge = Scripted(build_judge(settings), unsure=unsure)
    results = tmp_path / "results.jsonl"
    async with running(settings, judge) as sidecar:
        await produce(bs, topic, work.pairs())
        await eventually(lambda: result_ids(results) >= {t.trace_id for t in work.traces}, what="results")
        stage = sidecar.judge_stage
        assert stage is not None and stage.review is not None
        review = stage.review
        await eventually(lambda: review.written == review.queued > 0, what="the queue written")
        dropped = {
            u: sample(sidecar, "ragmon_review_dropped_total", reason="rate_limited", uniform=u)
            for u in ("true", "false")
        }
    lines = queue_lines(tmp_path / "review.jsonl")
    judged = {r["trace_id"] for r in result_lines(results) if r.get("judge", {}).get("outcome") == "ok"}
    uniform = {t for t in judged if drawn(t) < 0.08}
    assert 0 < len(uniform) <= 30  # within the uniform part: 60 × 0.5
    assert len(lines) <= 60
    assert {line["trace_id"] for line in lines if line["review"]["uniform"]} == uniform
    # The rest: alert 10, disagreement 10, boundary 10. No alert nor disagreement here, and the
    # flood of boundary cases fills the boundary part only.
    hard = [line for line in lines if not line["review"]["uniform"]]
    assert len(hard) == 10 and all("boundary" in line["review"]["reasons"] for line in hard)
    assert dropped["true"] == 0 and dropped["false"] >= len(unsure - uniform) - 10


async def test_a_drift_alert_queues_its_example_traces(
    broker: Any, topic: str, tmp_path: Path, webhook: Webhook
) -> None:
    """Both stages in one process: the records an alert names are queued, reason `alert`."""
    bs = broker.bootstrap_servers
    lookups = {"lookup": 1.0}
    fine = WorkloadConfig(ungrounded_rate=0.0, hallucination_rate=0.0, query_type_weights=lookups)
    bad = WorkloadConfig(ungrounded_rate=1.0, hallucination_rate=1.0, query_type_weights=lookups)
    healthy, broken = generate(120, seed=21, config=fine), generate(60, seed=22, config=bad)
    settings = review_settings(
        bs,
        topic,
        tmp_path,
        {"reasons": ["alert"]},
        alerts={"webhook_url": webhook.url, "drift": {"reference_records": 100, "min_records": 10}},
    )
    results = tmp_path / "results.jsonl"
    async with running(settings) as sidecar:
        await produce(bs, topic, healthy.pairs())
        await eventually(lambda: result_ids(results) >= {t.trace_id for t in healthy.traces}, what="healthy")
        await produce(bs, topic, broken.pairs())
        await eventually(
            lambda: any(b["status"] == "firing" for b in webhook.bodies), what="a drift alert", within=60
        )
        stage = sidecar.judge_stage
        assert stage is not None and stage.review is not None
        review = stage.review
        await eventually(lambda: review.written == review.queued > 0, what="the queue written")
    firing = [b for b in webhook.bodies if b["status"] == "firing"]
    examples = {e["trace_id"] for b in firing for e in b["examples"]}
    lines = queue_lines(tmp_path / "review.jsonl")
    assert examples and {line["trace_id"] for line in lines} == examples
    assert all(line["review"]["reasons"] == ["alert"] and not line["review"]["uniform"] for line in lines)
    assert examples <= {t.trace_id for t in broken.traces}


@pytest.mark.timeout(240)
async def test_a_flood_of_judged_records_neither_stalls_the_stage_nor_grows_the_queue(
    broker: Any, topic: str, tmp_path: Path
) -> None:
    """10,000 judged records, every one drawn for review: the stage writes every result and is
    never stalled, the queue takes its 200 an hour and forgets the rest (counted), and what it
    holds stays at the bound, not at the flood."""
    bs = broker.bootstrap_servers
    work = generate(10_000, seed=13)
    settings = review_settings(bs, topic, tmp_path, {"uniform_share": 1.0, "reasons": ["uniform"]})
    async with running(settings) as sidecar:
        stage = sidecar.judge_stage
        assert stage is not None and stage.review is not None
        review = stage.review
        await produce(bs, topic, work.pairs())
        await eventually(lambda: stage.written == 10_000, within=180, what="every result written")
        await eventually(lambda: review.written == review.queued == 200, what="the hour's 200 written")
        assert sample(sidecar, "ragmon_stage_stalled", stage="judge") == 0
        dropped = sample(sidecar, "ragmon_review_dropped_total", reason="rate_limited", uniform="true")
        held = (len(review.seen), len(review.budget))
    assert dropped == stage.judged_seen - 200 and stage.judged_seen > 9_000
    assert held == (200, 200)  # the ids queued and their times: the hour's, not the flood's
    lines = queue_lines(tmp_path / "review.jsonl")
    assert len(lines) == len({line["trace_id"] for line in lines}) == 200


async def test_a_dead_review_file_costs_review_lines_never_results(
    broker: Any, topic: str, tmp_path: Path
) -> None:
    """The review file's path turns into a directory under the sidecar: writes fail (counted,
    retried), the queue fills and then drops (counted), and every result is still written. Once
    the path is a file again, what waited is written."""
    bs = broker.bootstrap_servers
    work = generate(150, seed=14)
    review_file = tmp_path / "review.jsonl"
    settings = review_settings(
        bs, topic, tmp_path, {"uniform_share": 1.0, "reasons": ["uniform"], "queue_size": 20}
    )
    async with running(settings) as sidecar:
        stage = sidecar.judge_stage
        assert stage is not None and stage.review is not None
        review = stage.review
        review_file.unlink()
        review_file.mkdir()
        await produce(bs, topic, work.pairs())
        await eventually(lambda: stage.written == 150, what="every result written")
        judged = stage.judged_seen
        assert sample(sidecar, "ragmon_review_write_errors_total", reason="io_error") > 0
        full = sample(sidecar, "ragmon_review_dropped_total", reason="queue_full", uniform="true")
        assert review.written == 0 and full == judged - review.queued
        review_file.rmdir()
        await eventually(lambda: review.written == review.queued, within=40, what="the queue written")
    lines = queue_lines(review_file)
    assert 20 <= len(lines) == review.queued <= 20 + 256  # the queue, and the batch being retried
