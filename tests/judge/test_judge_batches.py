"""The Anthropic judge through the Message Batches API, against a local HTTP server speaking it:
``POST /v1/messages/batches``, ``GET /v1/messages/batches/{id}``, ``GET .../results`` (JSONL) and
``POST .../cancel``. Nothing is mocked below HTTP: the real `anthropic` SDK sends the requests.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from fake_llm import (
    DEFAULT_ANSWER,
    USAGE,
    FakeAPI,
    Reply,
    anthropic,
    anthropic_message,
    good_output,
    record,
)
from prometheus_client import CollectorRegistry

from monitor.contracts.metrics import JudgeMetrics
from monitor.contracts.model import Judgement
from monitor.judge.anthropic_judge import AnthropicJudge, AnthropicJudgeConfig
from monitor.judge.batches import BatchCollector
from monitor.judge.budget import BudgetPolicy, JudgeBudget, cost_bound
from monitor.judge.metered import MeteredJudge
from monitor.judge.prompt import TOOL_NAME
from monitor.judge.stage import JudgeStage
from monitor.llm.batches import BATCH_DEADLINE_SECONDS
from monitor.llm.outcome import JudgeOutcome

# An entry's result, as the server builds it: (custom_id, params, how many entries with the same
# first user turn it has seen before) -> the ``result`` object of the results line.
Entry = Callable[[str, dict[str, Any], int], dict[str, Any]]


def succeeded(custom_id: str, params: dict[str, Any], seen: int) -> dict[str, Any]:
    return {"type": "succeeded", "message": anthropic_message(good_output(params))}


def errored(kind: str, message: str = "nope") -> dict[str, Any]:
    return {"type": "errored", "error": {"type": "error", "error": {"type": kind, "message": message}}}


class Batches:
    """The batch endpoints on the fake API. Each batch ends after `polls` retrieves; results are
    computed when it is created (by `entry`) and served in reverse order (the API promises none).
    Tracks the requests in batches not yet ended (`max_open`)."""

    def __init__(self, api: FakeAPI, polls: int = 1, entry: Entry = succeeded) -> None:
        self.api = api
        self.polls = polls
        self.entry = entry
        self.lock = threading.Lock()
        self.batches: dict[str, dict[str, Any]] = {}
        self.sizes: list[int] = []
        self.entries: list[dict[str, Any]] = []  # every request submitted, in order
        self.canceled: list[str] = []
        self.seen: dict[str, int] = {}
        self.open = self.max_open = 0
        self.drop: set[str] = set()  # custom ids left out of the results file
        api.default = self.reply

    def reply(self, path: str, body: dict[str, Any]) -> Reply:
        base = "/v1/messages/batches"
        if path == base:
            return Reply(body=self._create(body["requests"]))
        if path.startswith(base + "/"):
            rest = path[len(base) + 1 :].split("/")
            batch = self.batches.get(rest[0])
            if batch is None:
                err = {"type": "error", "error": {"type": "not_found_error", "message": "no such batch"}}
                return Reply(404, err)
            if rest[1:] == ["results"]:
                lines = [
                    json.dumps({"custom_id": cid, "result": res})
                    for cid, res in reversed(batch["results"])
                    if cid not in self.drop
                ]
                return Reply(body="\n".join(lines) + "\n")
            if rest[1:] == ["cancel"]:
                with self.lock:
                    self.canceled.append(rest[0])
                    if batch["status"] != "ended":
                        batch["status"] = "ended"
                        batch["results"] = [(cid, {"type": "canceled"}) for cid, _ in batch["results"]]
                        self.open -= len(batch["results"])
                return Reply(body=self._view(rest[0]))
            with self.lock:  # retrieve: one poll closer to the end
                batch["polls"] += 1
                if batch["status"] != "ended" and batch["polls"] >= self.polls:
                    batch["status"] = "ended"
                    self.open -= len(batch["results"])
            return Reply(body=self._view(rest[0]))
        if path == "/v1/messages":
            return Reply(body=anthropic_message(good_output(body)))
        return Reply(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})

    def _create(self, requests: list[dict[str, Any]]) -> dict[str, Any]:
        batch_id = f"msgbatch_{uuid.uuid4().hex[:16]}"
        results = []
        with self.lock:
            for r in requests:
                key = json.dumps(r["params"]["messages"][0])
                seen = self.seen.get(key, 0)
                self.seen[key] = seen + 1
                self.entries.append(r)
                results.append((r["custom_id"], self.entry(r["custom_id"], r["params"], seen)))
            self.batches[batch_id] = {"status": "in_progress", "polls": 0, "results": results}
            self.sizes.append(len(requests))
            self.open += len(requests)
            self.max_open = max(self.max_open, self.open)
        return self._view(batch_id)

    def _view(self, batch_id: str) -> dict[str, Any]:
        b = self.batches[batch_id]
        ended = b["status"] == "ended"
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        for _, res in b["results"]:
            counts[res["type"] if ended else "processing"] += 1
        now = datetime.now(UTC)
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": b["status"],
            "request_counts": counts,
            "created_at": now.isoformat(),
            "expires_at": (now + timedelta(hours=24)).isoformat(),
            "ended_at": now.isoformat() if ended else None,
            "results_url": f"{self.api.url}/v1/messages/batches/{batch_id}/results" if ended else None,
        }


FAST = {"enabled": True, "max_wait_seconds": 0.05, "poll_seconds": 0.02}


def batched(api: FakeAPI, batch: dict[str, Any] | None = None, **overrides: Any) -> AnthropicJudge:
    return anthropic(api, batch={**FAST, **(batch or {})}, **overrides)


def verdict(j: Judgement) -> dict[str, Any]:
    """What a judgement says, without what differs between two runs (ids, timing, price)."""
    out = j.to_json_dict()
    out.pop("trace_id")
    out["judge"] = {k: v for k, v in out["judge"].items() if k not in ("latency_s", "cost_usd")}
    return out


def answers(n: int) -> list[str]:
    more = (f"Paris is the capital and largest city of France. Item {i}." for i in range(n - 1))
    return [DEFAULT_ANSWER, *more]


# -- the happy path: same verdicts, half the price ---------------------------------------------------


async def test_batched_verdicts_equal_direct_ones_at_half_price(api: FakeAPI) -> None:
    fake = Batches(api, polls=2)
    recs = [record(a) for a in answers(6)]
    judge = batched(api, {"max_requests": 3})
    got = await asyncio.gather(*(judge.judge(r, sampling_weight=2.0) for r in recs))
    stats = judge.batch_stats
    await judge.aclose()
    direct = anthropic(api)
    want = [await direct.judge(r, sampling_weight=2.0) for r in recs]
    await direct.aclose()

    assert all(j.ok for j in got), [j.error for j in got]
    for g, w, r in zip(got, want, recs, strict=True):
        assert g.trace_id == r.trace_id  # each caller got its own result (served out of order)
        assert verdict(g) == verdict(w)
        assert g.tokens == w.tokens and g.tokens.input == USAGE["input_tokens"]
        assert g.requests == 1
        assert g.cost_usd == pytest.approx(w.cost_usd * 0.5)
    assert fake.sizes == [3, 3]
    assert stats is not None and (stats.batches, stats.entries, stats.succeeded) == (2, 6, 6)
    # Each entry is the direct call's request body, as the SDK would have sent it.
    direct_bodies = [s.body for s in api.requests if s.path == "/v1/messages"]
    entry_params = sorted((e["params"] for e in fake.entries), key=json.dumps)
    assert entry_params == sorted(direct_bodies, key=json.dumps)
    assert all(p["tool_choice"] == {"type": "tool", "name": TOOL_NAME} for p in entry_params)
    polls = [s for s in api.requests if s.path.startswith("/v1/messages/batches/")]
    assert any(s.path.endswith("/results") for s in polls)


async def test_budget_reserves_and_charges_batch_prices(api: FakeAPI) -> None:
    Batches(api)
    spent = {}
    for name, make in (("direct", anthropic), ("batch", batched)):
        judge = make(api)
        budget = JudgeBudget(BudgetPolicy(usd_per_day=10.0, tokens_per_hour=10**9))
        metered = MeteredJudge(judge, budget, JudgeMetrics(CollectorRegistry()))
        rec = record()
        bound = cost_bound(rec, judge)
        j = await metered.judge(rec)
        await judge.aclose()
        assert j.ok, j.error
        spent[name] = (bound, 10.0 - budget.remaining()["usd"], j.cost_usd)
    (d_bound, d_spent, _), (b_bound, b_spent, b_cost) = spent["direct"], spent["batch"]
    assert b_bound.usd == pytest.approx(d_bound.usd * 0.5)
    assert b_bound.calls == d_bound.calls and b_bound.tokens == d_bound.tokens
    assert b_spent == pytest.approx(d_spent * 0.5) and b_spent == pytest.approx(b_cost)
    assert b_cost == pytest.approx((1200 * 1.0 + 150 * 5.0 + 900 * 0.10) / 1e6 * 0.5)


async def test_in_flight_is_bounded_across_batches(api: FakeAPI) -> None:
    fake = Batches(api, polls=3)
    judge = batched(api, {"max_requests": 3}, max_concurrency=4)
    results = await asyncio.gather(*(judge.judge(record()) for _ in range(11)))
    stats = judge.batch_stats
    await judge.aclose()
    assert all(j.ok for j in results)
    assert fake.max_open <= 4 and stats is not None and stats.max_in_flight <= 4
    assert max(fake.sizes) <= 3 and sum(fake.sizes) == 11


# -- failures: the same accounting as direct calls ---------------------------------------------------


async def test_overloaded_entries_are_resubmitted_then_succeed(api: FakeAPI) -> None:
    def first_overloaded(cid: str, params: dict[str, Any], seen: int) -> dict[str, Any]:
        return errored("overloaded_error", "busy") if seen == 0 else succeeded(cid, params, seen)

    fake = Batches(api, entry=first_overloaded)
    judge = batched(api)
    registry = CollectorRegistry()
    assert judge.batch_stats is not None
    registry.register(BatchCollector(judge.batch_stats))
    j = await judge.judge(record())
    await judge.aclose()
    assert j.ok, j.error
    assert j.requests == 2 and len(fake.sizes) == 2  # resubmitted in a second batch
    assert j.tokens.input == USAGE["input_tokens"]  # the errored entry is not billed
    g = registry.get_sample_value
    assert g("ragmon_judge_batches_total", {"outcome": "ended"}) == 2
    assert g("ragmon_judge_batch_entries_total", {"result": "errored"}) == 1
    assert g("ragmon_judge_batch_entries_total", {"result": "succeeded"}) == 1


@pytest.mark.parametrize(
    ("result", "outcome", "entries"),
    [
        (errored("overloaded_error"), JudgeOutcome.OVERLOADED, 3),  # 1 + max_retries
        (errored("rate_limit_error"), JudgeOutcome.RATE_LIMITED, 3),
        (errored("api_error"), JudgeOutcome.SERVER_ERROR, 3),
        (errored("invalid_request_error", "max_tokens: too large"), JudgeOutcome.CLIENT_ERROR, 1),
        ({"type": "expired"}, JudgeOutcome.TIMEOUT, 1),
        ({"type": "canceled"}, JudgeOutcome.CONNECTION_ERROR, 1),
    ],
)
async def test_failed_entries_fail_the_judgement_like_direct_calls(
    api: FakeAPI, result: dict[str, Any], outcome: JudgeOutcome, entries: int
) -> None:
    fake = Batches(api, entry=lambda cid, params, seen: result)
    judge = batched(api, max_retries=2)
    j = await judge.judge(record())
    await judge.aclose()
    assert j.outcome is outcome, j.error
    assert j.error and j.claims == [] and j.faithfulness is None
    assert j.requests == entries == len(fake.entries)
    assert j.tokens.as_dict() == {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
    assert j.cost_usd == 0.0
    if result["type"] == "errored":
        assert result["error"]["error"]["type"] in (j.error or "")


async def test_invalid_output_is_repaired_once_in_the_next_batch(api: FakeAPI) -> None:
    def bad_then_good(cid: str, params: dict[str, Any], seen: int) -> dict[str, Any]:
        out = good_output(params)
        if len(params["messages"]) == 1:  # the judgement: cite a chunk that was not given
            out["claims"][0]["quotes"][0]["chunk"] = "doc-404"
        return {"type": "succeeded", "message": anthropic_message(out)}

    fake = Batches(api, entry=bad_then_good)
    judge = batched(api)
    j = await judge.judge(record())
    await judge.aclose()
    assert j.ok, j.error
    assert j.requests == 2 and fake.sizes == [1, 1]
    assert j.tokens.input == 2 * USAGE["input_tokens"]  # both billed, at batch prices
    repair = fake.entries[1]["params"]["messages"]
    assert [m["role"] for m in repair] == ["user", "assistant", "user"]
    assert repair[2]["content"][0]["is_error"] is True and "doc-404" in repair[2]["content"][0]["content"]


async def test_invalid_twice_is_invalid_output(api: FakeAPI) -> None:
    bad = {"type": "succeeded", "message": anthropic_message({"claims": "many"})}
    Batches(api, entry=lambda cid, params, seen: bad)
    judge = batched(api)
    j = await judge.judge(record())
    await judge.aclose()
    assert j.outcome is JudgeOutcome.INVALID_OUTPUT and j.requests == 2
    assert j.tokens.output == 2 * USAGE["output_tokens"] and (j.cost_usd or 0) > 0


async def test_a_batch_that_cannot_be_created_fails_each_judgement(api: FakeAPI) -> None:
    Batches(api)
    err = {"type": "error", "error": {"type": "invalid_request_error", "message": "too many requests"}}
    api.script(Reply(400, err))
    judge = batched(api)
    registry = CollectorRegistry()
    assert judge.batch_stats is not None
    registry.register(BatchCollector(judge.batch_stats))
    results = await asyncio.gather(*(judge.judge(record()) for _ in range(3)))
    await judge.aclose()
    assert [j.outcome for j in results] == [JudgeOutcome.CLIENT_ERROR] * 3
    assert all("HTTP 400" in (j.error or "") and j.requests == 1 for j in results)
    g = registry.get_sample_value  # a batch never created is failed, not "-1 ended"
    assert g("ragmon_judge_batches_total", {"outcome": "failed"}) == 1
    assert g("ragmon_judge_batches_total", {"outcome": "ended"}) == 0


async def test_a_transient_create_error_is_retried_by_the_sdk(api: FakeAPI) -> None:
    fake = Batches(api)
    busy = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    api.script(Reply(529, busy, {"retry-after-ms": "10"}))
    judge = batched(api)
    j = await judge.judge(record())
    await judge.aclose()
    assert j.ok, j.error
    assert j.requests == 1 and fake.sizes == [1]  # the SDK's retry of the create is not an entry


async def test_a_result_missing_from_the_file_is_a_server_error(api: FakeAPI) -> None:
    fake = Batches(api)
    judge = batched(api)
    fake.drop = {"j1"}
    results = await asyncio.gather(*(judge.judge(record()) for _ in range(2)))
    await judge.aclose()
    assert sorted(j.outcome for j in results) == [JudgeOutcome.OK, JudgeOutcome.SERVER_ERROR]


async def test_a_batch_every_caller_gave_up_on_is_canceled(api: FakeAPI) -> None:
    fake = Batches(api, polls=10**6)
    judge = batched(api, deadline_seconds=0.3)
    t0 = time.monotonic()
    j = await judge.judge(record())
    assert j.outcome is JudgeOutcome.TIMEOUT and "deadline" in (j.error or "")
    assert time.monotonic() - t0 < 2.0
    for _ in range(100):
        if fake.canceled:
            break
        await asyncio.sleep(0.02)
    await judge.aclose()
    assert len(fake.canceled) == 1


async def test_close_cancels_batches_in_flight(api: FakeAPI) -> None:
    fake = Batches(api, polls=10**6)
    judge = batched(api)
    task = asyncio.create_task(judge.judge(record()))
    for _ in range(100):
        if fake.sizes:
            break
        await asyncio.sleep(0.02)
    await judge.aclose()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(fake.canceled) == 1


# -- configuration -----------------------------------------------------------------------------------


def test_batch_mode_defaults() -> None:
    base = {"api_key": "sk-ant-x", "batch": {"enabled": True, "max_requests": 500}}
    c = AnthropicJudgeConfig.model_validate(base)
    assert c.deadline_seconds == BATCH_DEADLINE_SECONDS and c.max_concurrency == 500
    c = AnthropicJudgeConfig.model_validate({**base, "deadline_seconds": 600, "max_concurrency": 2000})
    assert c.deadline_seconds == 600 and c.max_concurrency == 2000
    off = AnthropicJudgeConfig.model_validate({"api_key": "sk-ant-x"})
    assert not off.batch.enabled and off.deadline_seconds == 120.0 and off.max_concurrency == 4
    with pytest.raises(ValueError, match="max_requests"):
        AnthropicJudgeConfig.model_validate({"batch": {"enabled": True, "max_requests": 0}})


def test_settings_take_batch_options() -> None:
    from monitor.app.config import Settings

    s = Settings.model_validate(
        {"judge": {"backend": "anthropic", "options": {"batch": {"enabled": True, "poll_seconds": 60}}}}
    )
    assert s.judge.options["batch"]["enabled"] is True
    with pytest.raises(ValueError, match="max_wait"):
        Settings.model_validate({"judge": {"backend": "anthropic", "options": {"batch": {"max_wait": 1}}}})


def test_the_stage_raises_its_workers_to_fill_batches(api: FakeAPI) -> None:
    judge = batched(api, {"max_requests": 300})
    metered = MeteredJudge(judge, None, JudgeMetrics(CollectorRegistry()))
    assert metered.preferred_concurrency == 300
    assert MeteredJudge(anthropic(api), None, JudgeMetrics(CollectorRegistry())).preferred_concurrency is None

    def stage(workers: int, queue_size: int, judge: Any) -> Any:
        return SimpleNamespace(
            config=SimpleNamespace(workers=workers), queue=SimpleNamespace(queue_size=queue_size), judge=judge
        )

    assert JudgeStage.workers(stage(8, 1000, metered)) == 300
    assert JudgeStage.workers(stage(8, 100, metered)) == 100  # no more than the samples held
    assert JudgeStage.workers(stage(500, 1000, metered)) == 500
    assert JudgeStage.workers(stage(8, 1000, None)) == 8
