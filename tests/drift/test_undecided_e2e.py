"""Abstention end to end through the embedded broker: traffic → ingest → samples topic → a judge
that decides some records and not others → results lines, estimate counters, decided/undecided
counters → the drift stage, which fires on a rise in the share of undecided records of one slice
and stays silent on the slice whose share holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import Webhook, eventually, running, settings_for

from monitor.contracts.model import Claim, Judgement, RagRecord, Verdict
from monitor.contracts.results import ResultLine, encode_result
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import WorkloadConfig, generate, produce

pytestmark = pytest.mark.kafka

SLICES = ("lookup", "comparison")


class AbstainingJudge:
    """Decides a record or abstains on it by its slice's running count: `undecided[query type]`
    of every ten records undecided (all claims uncertain, answerability unknown, as the offline
    judge leaves them), the others one supported claim. The share is changed between phases."""

    name, model = "lexical", "abstaining-test"

    def __init__(self) -> None:
        self.undecided = dict.fromkeys(SLICES, 1)
        self.seen = dict.fromkeys(SLICES, 0)
        self.decided_ids: set[str] = set()

    async def judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement:
        n = self.seen.get(record.query_type, 0)
        self.seen[record.query_type] = n + 1
        abstain = n % 10 < self.undecided.get(record.query_type, 0)
        verdict = Verdict.UNCERTAIN if abstain else Verdict.SUPPORTED
        chunk = record.chunks[0].id if record.chunks else None
        if not abstain:
            self.decided_ids.add(record.trace_id)
        return Judgement.from_verdicts(
            [Claim(record.answer[:200], verdict, chunk)],
            answerable_from_context=None if abstain else True,
            answer_relevance=2,
            trace_id=record.trace_id,
            query_type=record.query_type,
            service=record.service,
            backend=self.name,
            model=self.model,
            sampling_weight=sampling_weight,
        )

    async def aclose(self) -> None:
        return None


def value(sidecar: Any, name: str, **labels: str) -> float:
    got = sidecar.metrics.registry.get_sample_value(name, labels)
    return 0.0 if got is None else float(got)


def total(sidecar: Any, name: str, **match: str) -> float:
    """Sum of a metric's samples whose labels include `match`."""
    return sum(
        s.value
        for m in sidecar.metrics.registry.collect()
        for s in m.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in match.items())
    )


async def test_undecided_records_are_counted_apart_and_a_rise_in_their_share_is_drift(
    broker: EmbeddedBroker, topic: str, tmp_path: Path, webhook: Webhook
) -> None:
    bs = broker.bootstrap_servers
    results = tmp_path / "results.jsonl"
    weights = {"lookup": 0.5, "comparison": 0.5}
    config = WorkloadConfig(query_type_weights=weights, hallucination_rate=0.0, false_refusal_rate=0.0)
    settings = settings_for(
        bs,
        topic,
        results,
        alerts={"drift": {"reference_records": 100, "min_records": 10}, "webhook_url": webhook.url},
    )
    judge = AbstainingJudge()
    async with running(settings, judge=judge) as sidecar:

        def judged(qt: str) -> float:
            return total(sidecar, "ragmon_judge_decided_total", query_type=qt, check="unanswerable") + total(
                sidecar, "ragmon_judge_undecided_total", query_type=qt, check="unanswerable"
            )

        # Phase 1: one in ten undecided in both slices, past each slice's reference.
        first = generate(360, seed=11, config=config)
        await produce(bs, topic, first.pairs())
        await eventually(lambda: all(judged(qt) >= 150 for qt in SLICES), within=90, what="phase 1 judged")
        await eventually(
            lambda: all(
                sidecar.metrics.registry.get_sample_value(
                    "ragmon_drift_threshold", {"query_type": qt, "metric": "undecided"}
                )
                for qt in SLICES
            ),
            within=30,
            what="the undecided detectors frozen",
        )
        assert all(
            value(sidecar, "ragmon_drift_active", query_type=qt, metric="undecided") == 0 for qt in SLICES
        )

        # Phase 2: lookup's answers change style: seven in ten undecided; comparison's hold.
        judge.undecided["lookup"] = 7
        before = {qt: judged(qt) for qt in SLICES}
        second = generate(240, seed=12, config=config)
        await produce(bs, topic, second.pairs())
        await eventually(
            lambda: value(sidecar, "ragmon_drift_active", query_type="lookup", metric="undecided") == 1,
            within=90,
            what="lookup's undecided share drifts",
        )
        await eventually(
            lambda: all(judged(qt) - before[qt] >= 80 for qt in SLICES), within=90, what="phase 2 judged"
        )
        # The stable slice's detector saw the same number of records and stays silent.
        assert value(sidecar, "ragmon_drift_active", query_type="comparison", metric="undecided") == 0
        await eventually(
            lambda: any(b["labels"].get("metric") == "undecided" for b in webhook.bodies), what="the alert"
        )
        alert = next(b for b in webhook.bodies if b["labels"].get("metric") == "undecided")
        assert alert["labels"]["query_type"] == "lookup"
        assert "could not decide" in alert["annotations"]["summary"]
        # Its examples are undecided records, with the judge's reason.
        assert alert["examples"] and all(e["trace_id"] not in judge.decided_ids for e in alert["examples"])
        assert all(e["reason"].startswith("undecided (faithfulness uncertain") for e in alert["examples"])

        # Counters: per slice, decided + undecided = judged; estimates count decided records only.
        for qt in SLICES:
            decided = value(
                sidecar, "ragmon_judge_decided_total", judge="lexical", query_type=qt, check="faithfulness"
            )
            undecided = value(
                sidecar,
                "ragmon_judge_undecided_total",
                judge="lexical",
                query_type=qt,
                check="faithfulness",
                reason="uncertain",
            )
            assert decided + undecided == judged(qt) and undecided > 0
            for metric in ("faithfulness", "hallucination"):
                n = total(sidecar, "ragmon_estimate_samples_total", query_type=qt, metric=metric)
                assert n == decided, (qt, metric)
            # Refusal is decided whatever the claims: every judged record counts.
            assert total(sidecar, "ragmon_estimate_samples_total", query_type=qt, metric="refusal") == judged(
                qt
            )
        # The faithfulness estimate is the decided records' (all supported): undecided ones add no 0.
        for qt in SLICES:
            swy = total(sidecar, "ragmon_estimate_weighted_value_total", query_type=qt, metric="faithfulness")
            sw = total(sidecar, "ragmon_estimate_weight_total", query_type=qt, metric="faithfulness")
            assert swy == sw > 0

    # Results lines: every one carries `decided`, and reads back to the same bytes.
    raw_lines = [ln for ln in results.read_bytes().splitlines(keepends=True) if ln.strip()]
    assert len(raw_lines) == 600
    for raw in raw_lines:
        line = ResultLine.model_validate_json(raw)
        assert encode_result(line) == raw and line.judged, raw[:200]
        assert line.decided is (line.trace_id in judge.decided_ids)
        assert line.undecided == (
            {} if line.decided else {"faithfulness": "uncertain", "unanswerable": "uncertain"}
        )
