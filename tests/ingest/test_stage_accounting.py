"""The ingest stage's compiled record accounting (`_accounting.RecordAccounting`) against the
reference (`accounting.RecordAccounting`, through `IngestStage._finish`).

`IngestStage._finish_all` hands runs of finished traces to the twin's `account`, which counts those on
`_finish`'s common path (labels known and allowed, a drift slice collecting its reference or frozen
and not due a check, a record the sampler's decision leaves unsampled: past the window's bound, or
below it with the signals, length and floor worked out) and stops at the first it leaves to
`_finish`.
Two stages — one with it, one without — given the same finished traces must end in the same
state: every exported sample, the sampler's and the drift monitor's slices, the samples queued for
the judge, and every message's holds. The traces mix the common path with each way off it: no
record, replay traffic, no query type, one outside the allow-list, too many services, no chunks or
no score, late and future start times, windows rolling, drift slices freezing and checking.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
from typing import Any

import pytest
from aiokafka import TopicPartition
from prometheus_client import generate_latest

from monitor.app.config import load_settings
from monitor.app.sidecar import ingest_stage
from monitor.contracts.metrics import Metrics
from monitor.contracts.model import Chunk, RagRecord, Reject
from monitor.drift.retrieval import RetrievalDriftMonitor, SliceDrift
from monitor.ingest.accounting import ACCOUNTING, RecordAccounting
from monitor.ingest.assemble import Finished
from monitor.ingest.sampler import trace_fraction
from monitor.ingest.stage import IngestStage
from monitor.kafka.offsets import MessageRef
from monitor.kafka.producer import KafkaOutput

REQUIRED = os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0")
PURE = os.environ.get("RAGMON_PURE_PYTHON", "") not in ("", "0")
COMPILED = ACCOUNTING == "compiled"
pytestmark = pytest.mark.skipif(
    not COMPILED and (PURE or not REQUIRED), reason="compiled record accounting unused"
)

TP = TopicPartition("spans", 0)
T0 = 1_800_000_000.0
TYPES = ("lookup", "comparison", "multi_hop", "summary", "out_of_corpus")
ANSWERS = (
    "The Rhine discharges 2,330 cubic metres per second at the border.",
    "I don't know based on the provided documents.",
    "Yes.",
    "Paris " * 80,
)


def test_the_compiled_accounting_was_built() -> None:
    if REQUIRED and not PURE:
        assert COMPILED, "monitor.ingest._accounting was not built"


def make_stage(account: bool) -> tuple[IngestStage, KafkaOutput, list[int]]:
    settings = load_settings(
        None,
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:9"},
            "sampling": {
                "rate": 0.05,
                "rates": {"comparison": 0.0},
                "min_per_window": 1,
                "window_seconds": 20.0,
                "low_score_threshold": 0.5,
            },
            "slices": {"max_services": 3},
            "alerts": {
                "drift": {
                    "retrieval": {
                        "reference_records": 12,
                        "window_records": 15,
                        "min_records": 10,
                        "check_every": 7,
                    }
                }
            },
            "judge": {"backend": "none"},
            "pipeline": {"role": "ingest"},
        },
    )
    output = KafkaOutput(settings.kafka)  # never started: samples stay queued
    st = ingest_stage(settings, Metrics(), output)
    assert type(st.accounting) is not RecordAccounting  # the compiled twin
    handled = [0]
    if not account:  # the reference: every record through `_finish` and the pure-Python `count`
        st.accounting = RecordAccounting(
            st.sampler, st.retrieval_drift, st.accounting.lag, st.accounting.prices
        )
        st._account = None
    else:
        compiled = st._account
        assert compiled is not None

        def counting(finished: list[Finished], start: int, *args: Any) -> int:
            end = compiled(finished, start, *args)
            handled[0] += end - start
            return end

        st._account = counting
    return st, output, handled


def traffic(seed: int, batches: int) -> list[tuple[float, list[Finished], list[MessageRef]]]:
    """Batches of finished traces with their wall clock; the same seed gives equal, separate objects."""
    rng = random.Random(seed)
    now = T0
    out = []
    for _ in range(batches):
        now += rng.choice((0.0, 0.5, 3.0, 9.0))
        finished: list[Finished] = []
        refs: list[MessageRef] = []
        for _ in range(rng.randint(1, 40)):
            tid = f"{rng.getrandbits(128):032x}"
            own = [MessageRef(TP, len(refs) + k) for k in range(rng.randint(1, 3))]
            if refs and rng.random() < 0.2:  # a message feeding several traces
                shared = refs[-1]
                shared.holds += 1
                own.append(shared)
            refs.extend(r for r in own if r.holds == 1 and r not in refs)
            kind = rng.random()
            if kind < 0.04:
                reason = rng.choice((Reject.EVICTED, Reject.MISSING_QUERY, None))
                finished.append(Finished(tid, None, reason, own))
                continue
            n_chunks = rng.choice((0, 1, 3, 5))
            # Scores from a few values half the time: ties with the drift bins' edges.
            scores = [None, 0.3, 0.5, 0.7, round(rng.uniform(0.2, 0.95), 4), round(rng.uniform(0.2, 0.95), 4)]
            chunks = [Chunk(f"c{k}", f"text {k}", rng.choice(scores)) for k in range(n_chunks)]
            start = 0
            if rng.random() < 0.9:
                start = int((now - rng.choice((0.0, 1.0, 15.0, 30.0, 60.0, -5.0)) - rng.random()) * 1e9)
            end = start + int(rng.uniform(0, 3e9)) if start and rng.random() < 0.9 else 0
            qt = rng.choice((*TYPES, *TYPES, "", "not-a-type"))
            service = rng.choice(("svc-a", "svc-a", "svc-b", f"svc-{rng.randint(0, 9)}"))
            # The RED figures: stage times known or not, errors, tokens reported or not, a model
            # with a price, a dated one priced by its prefix, one without, none; and releases.
            tokens = rng.choice((None, 0, 1, 1234, 10_000_000))
            red = {
                "retrieval_ns": rng.choice((-1, 0, int(rng.uniform(0, 2e9)))),
                "generation_ns": rng.choice((-1, int(rng.uniform(0, 90e9)))),
                "error": rng.random() < 0.1,
                "input_tokens": tokens,
                "output_tokens": rng.choice((None, tokens, 57)),
                "model": rng.choice((None, "gpt-4o-mini", "claude-haiku-4-5-20251001", "in-house-llm")),
                "release": rng.choice(("", "v1.4.1", "v1.4.2", f"build-{rng.randint(0, 40)}")),
            }
            record = RagRecord(
                trace_id=tid,
                span_id="0" * 16,
                service=service,
                query="how much water does the Rhine carry",
                query_type=qt,
                chunks=chunks,
                answer=rng.choice(ANSWERS),
                start_ns=start,
                end_ns=end,
                replay=kind < 0.07,
                **red,
            )
            finished.append(Finished(tid, record, None, own))
        out.append((now, finished, refs))
    return out


def state(st: IngestStage, output: KafkaOutput) -> dict[str, Any]:
    st._flush_counts()
    sampler = {
        qt: (
            s.window,
            s.window_end,
            s.seen,
            s.count_from,
            s.median,
            s.sampled,
            list(s.extra),
            [(f.floor_p, f.median, f.bound, f.mults) for f in (s.cur, s.prev, s.unknown)],
        )
        for qt, s in st.sampler.slices.items()
    }
    drift = {
        qt: (
            d.frozen,
            d.counts_seen,
            d.scores_seen,
            d.count_bins,
            d.score_bins,
            d.count_ring,
            d.score_ring,
            d.pos,
            d.until_check,
        )
        for qt, d in st.retrieval_drift.windows.items()
    }
    queued = [(key, value, [r.offset for r in refs]) for key, value, refs in st.samples._queued]
    exposition = "\n".join(  # every sample but the series' creation times
        line
        for line in generate_latest(st.metrics.registry).decode().splitlines()
        if not re.match(r"\w+_created[{ ]", line)
    )
    return {
        "records_seen": st.records_seen,
        "sampler": sampler,
        "drift": drift,
        "queued": queued,
        "metrics": exposition,
    }


@pytest.mark.parametrize("seed", range(6))
async def test_compiled_accounting_ends_where_finish_ends(seed: int) -> None:
    runs = {}
    for account in (True, False):
        st, output, handled = make_stage(account)
        holds = []
        for now, finished, refs in traffic(seed, 60):
            st._finish_all(finished, now)
            holds.extend(r.holds for r in refs)
        runs[account] = (state(st, output), holds, handled[0], st.records_seen)
        await output.close()
    (fast, fast_holds, handled, seen), (slow, slow_holds, _, _) = runs[True], runs[False]
    assert fast == slow
    assert fast_holds == slow_holds
    # Every message released but those of sampled records, queued for the samples topic.
    assert sum(fast_holds) == sum(len(refs) for _, _, refs in fast["queued"])
    # The comparison covered both paths: most records counted in C, the rest by `_finish`.
    assert seen > 1000
    assert 0.3 * seen < handled < seen
    assert fast["queued"], "nothing was sampled: the sampled path went untested"
    assert "\nragmon_retrieval_drift_psi{" in fast["metrics"]  # drift slices froze and were checked
    # The RED series were counted on both paths: durations, errors, tokens, USD and unpriced.
    for pattern in (
        r'ragmon_request_duration_seconds_count\{.*stage="generation"\} [1-9]',
        r'ragmon_request_duration_seconds_count\{.*stage="retrieval"\} [1-9]',
        r"ragmon_request_errors_total\{.*\} [1-9]",
        r'ragmon_generator_tokens_total\{.*type="output"\} [1-9]',
        r"ragmon_generator_cost_usd_total\{.*\} [1-9]",
        r"ragmon_generator_unpriced_total\{.*\} [1-9]",
    ):
        assert re.search(pattern, fast["metrics"]), pattern


@pytest.mark.parametrize("collecting", [False, True], ids=["drift frozen", "drift collecting"])
async def test_a_record_off_the_common_path_is_left_untouched(collecting: bool) -> None:
    """`account` stops at the first record it does not take having written nothing for it, even
    when it finds out last: a draw the window may sample, after the labels, tallies and drift
    window (or the reference being collected, whose lists grew by one) were worked out."""
    st, output, _ = make_stage(True)
    batches = traffic(11, 40)
    for now, finished, _ in batches[:-1]:
        st._finish_all(finished, now)
    now = batches[-1][0]
    if collecting:
        drift = st.retrieval_drift
        assert isinstance(drift, RetrievalDriftMonitor)
        d = SliceDrift(drift.policy)
        d.window.counts_seen[:], d.window.scores_seen[:] = [3, 1, 2], [0.5, None, 0.7]
        drift.slices["lookup"], drift.windows["lookup"] = d, d.window
    tid = next(t for t in (f"{i:032x}" for i in range(10_000)) if trace_fraction(t) < 0.01)
    chunks = [Chunk("c1", "x", 0.8)]
    record = RagRecord(tid, "0" * 16, "svc-a", "q", "lookup", chunks, "a", start_ns=int(now * 1e9))
    ref = MessageRef(TP, 0)
    assert st._account is not None and ("svc-a", "lookup", "") in st.accounting.labels
    before = state(st, output)
    assert st._account([Finished(tid, record, None, [ref])], 0, now) == 0
    assert state(st, output) == before
    assert record.query_type == "lookup" and ref.holds == 1
    st._finish_all([Finished(tid, record, None, [ref])], now)  # `_finish` samples it
    assert st.samples._queued[-1][0] == tid.encode()
    await output.close()


@pytest.mark.parametrize("seed", range(4))
def test_compiled_holds_are_the_references(seed: int) -> None:
    """`_accounting.new_refs` (the ingest stage's `track_run`) against `offsets.new_refs`: the same
    refs, partition, offset and one hold each, up to the same re-delivery, over random runs with
    gaps, repeats and a bound or none; a run stops at a message whose offset is not an int."""
    from types import SimpleNamespace

    from monitor.ingest.accounting import NEW_REFS
    from monitor.kafka.offsets import new_refs

    assert NEW_REFS is not new_refs
    rng = random.Random(seed)
    for _ in range(300):
        offsets, at = [], rng.randrange(0, 2**40)
        for _ in range(rng.randrange(0, 12)):
            at += rng.choice((1, 1, 1, 2, 7, 0, -1, -5))  # mostly consecutive, some re-delivered
            offsets.append(max(at, 0))
        messages = [SimpleNamespace(offset=o) for o in offsets]
        last = rng.choice((None, offsets[0] if offsets else 0, rng.randrange(0, 2**40 + 20)))
        partition = TopicPartition("spans", rng.randrange(3))
        expected, got = new_refs(partition, messages, last), NEW_REFS(partition, messages, last)
        assert [type(r) for r in got] == [MessageRef] * len(expected)
        assert [(r.partition, r.offset, r.holds) for r in got] == [
            (r.partition, r.offset, r.holds) for r in expected
        ]
    with pytest.raises(TypeError, match="not an int"):
        NEW_REFS(TP, [SimpleNamespace(offset=1), SimpleNamespace(offset="2")], None)


def test_init_takes_named_arguments_and_the_window_seam_is_declared() -> None:
    """`_accounting.init` takes the classes by keyword (a missing one named in the error, before
    anything is changed), and the drift stage's `RecordWindow` declares every field the compiled
    accounting uses in its `C_SEAM`, all slots."""
    from monitor.drift.retrieval import RecordWindow
    from monitor.ingest import _accounting

    with pytest.raises(TypeError, match="missing required keyword argument 'chunk'"):
        _accounting.init(record=RagRecord)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _accounting.init(RagRecord)  # type: ignore[misc]
    assert RecordWindow.__slots__ == RecordWindow.C_SEAM
    assert {"frozen", "need", "counts_seen", "count_ring", "count_bins", "pos", "until_check"} <= set(
        RecordWindow.C_SEAM
    )


def test_a_caught_up_stage_sends_its_queued_samples_at_once() -> None:
    """A turn with messages leaves a few samples queued for a fuller produce request (500, or
    a quarter second); a turn with nothing fetched (caught up: the traces the grace period just
    finished are the last for now) hands them to the producer at once."""

    async def run() -> tuple[int, int, int, int]:
        st, output, _ = make_stage(account=True)
        refs: list[Any] = []
        st.samples.add(b"trace", b"{}", refs)
        await st._flush(force=False)  # what a turn with messages does: too few to send yet
        queued_after_busy_turn, in_flight_after_busy_turn = len(st.samples._queued), st.samples.in_flight
        await st._process({})
        queued, in_flight = len(st.samples._queued), st.samples.in_flight
        await st.samples.cancel()  # the producer was never started: its send would retry
        await output.close()  # nor left for the garbage collector to find unclosed
        return queued_after_busy_turn, in_flight_after_busy_turn, queued, in_flight

    assert asyncio.run(run()) == (1, 0, 0, 1)
