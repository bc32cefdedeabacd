"""Ingest benchmark: raw `aiokafka` vs the sidecar, and the sidecar with sampling off vs on, one run.

Fills a topic on the embedded broker with the workload's OpenInference traces (three spans each,
~2 KB of retrieved chunk text per trace, OTLP protobuf as the Collector writes it) in one of three
shapes (`--workload`):

  rag3   one trace a message: its three RAG spans (root CHAIN, RETRIEVER, LLM);
  span1  one span a message: each trace's spans in three messages keyed by its trace id;
  mix    the production mix: 20 spans a trace in one message, of which 3 are RAG. The other 17
         are what OpenTelemetry's Python instrumentations write around a RAG endpoint, with their
         attributes and instrumentation scopes: the FastAPI/ASGI server span (now the trace's
         root, the CHAIN its child) with its receive/send spans, SQLAlchemy/PostgreSQL queries,
         Redis cache commands, httpx calls to an embedding and an auth service, Jinja2 template
         spans (`ProductionMix`).

By default 1,000,002 spans are drained (`--quick`: 90,000), then

  (a) raw: an `AIOKafkaConsumer` in a fresh group, `getmany` until every message is in, no
      processing, with the consumer settings `monitor.kafka.consumer.KafkaSource` uses;
  (b) sidecar: `monitor.app.sidecar.Sidecar` in a fresh group, every span decoded and assembled and
      every record counted, in one of three sampling variants (`--sampling`, default all three):
      off     `sampling.rate` 0, `min_per_window` 0, judge `none`. `Sampler.decide` still runs: with
              rate 0 the bound is 0, so it returns None after the trace-id hash (its common path),
              never reaching the signals or the floor. This is the earlier rate-0 sidecar (judge
              `none` now, so no judge is built) and the (b) of the (b)/(a) ratio;
      on      rate 0.05, floor 20 per query type, `low_score_threshold` 0.7 (the workload's top
              scores: 0.78-0.93 with the evidence retrieved, 0.55-0.75 without; 0.7 flags ~12 %),
              the other signals at their defaults, the ingest stage alone (`--role ingest`): the
              full decision per record, and each sampled record produced to the samples topic,
              its input offset held until the broker acknowledges (`IngestStage._finish`). on/off
              is the cost of sampling and of the stage split, the criterion: on/off >= 0.95;
      judged  the same policy with both stages in the process (`--role all`), the offline
              `lexical` judge and a results file: what judging and writing the ~6 % sample adds
              on top. Reported apart; not the criterion;
      aiokafka `on` with `RAGMON_KAFKA_READER=aiokafka`: records made by aiokafka's own
              per-record Python instead of the compiled record reader (monitor/kafka/records.py),
              to compare the reader with in the same run (on/aiokafka);
      streams `on` with `RAGMON_KAFKA_RESPONSES=aiokafka`: fetch responses read by asyncio's own
              stream reader instead of the chunked one (monitor/kafka/responses.py), to compare
              with in the same run (on/streams);
      python  `off` with `RAGMON_PURE_PYTHON=1`: the pure-Python decoder and assembler, to compare
              the compiled ones with in the same run (off/python).

All figures are Kafka messages per second. The clock starts when the first non-empty fetch
returns, so the group join (~15 s with tansu) is excluded, and that first batch is not counted.
(b) stops when `ragmon_records_total`, read from the sidecar's registry, holds every trace and every
message is done — its offset committable, so for `judged` every sampled record has been judged and
written too —, with `assembly.grace_seconds` = 0.05: the tail wait is included, not subtracted
("to last decode" is the rate up to the turn that processed the last message). That is checked at
each consumer-loop turn (a batch, possibly empty, handed to the ingest stage) and, once the last
message is decoded, every 5 ms: the last samples' acknowledgements come between turns, and turns
come every 0.2 s once the topic is drained (before issue 40's second step the check was at turns
only, which added up to 0.2 s to a drain with sampling on; before 088ebce at fetch calls only).
Every role runs in its own subprocess (this file with `--role raw|sidecar`), in a fresh consumer
group, so each peak RSS (`ru_maxrss`) is its own; the broker is a separate process and not counted. CPU µs/msg
is process CPU time over the same window, a figure CPU steal on shared machines disturbs less than
wall-clock rates; for the sidecar, "in the stage" is the part of it spent handling batches
(`IngestStage._process`), the rest is the consumer (aiokafka) and the event loop. Records sampled
are counted by wrapping `sidecar.sampler.decide` (non-None returns), in every variant so the
wrapper's cost is the same in each; `judged` also reports the judge's requests
(`ragmon_judge_requests_total`, one per judged record), skips and results lines.

Each repeat runs raw, then the variants in the order off, on, aiokafka, streams, judged, reversed
every other repeat (raw off on judged, raw judged on off, ...): `on` always runs next to `off`,
and a steady drift of the machine (seen: -20 % CPU per message over 15 minutes) cancels over two
repeats, so prefer an even `--repeat`. Ratios between variants are the medians of the per-repeat
ratios, whose two runs are neighbours in time; the ratio of the medians is printed too. (b)/(a) is
the ratio of the medians. A sidecar not done after `--timeout` prints where it stands (records,
open traces, messages in flight) to stderr; one still running a minute after being stopped also
prints its asyncio tasks and exits (seen once in ~60 runs: every message prefetched, but the fetch
never returned — likely aiokafka's `getmany` waiting on a group reassignment that never
completed).

`--workers K` runs each sidecar variant as K processes in one consumer group at once: K ingest
replicas, as the Helm chart's `ingest.replicas` runs them, the stage on K cores (use
`--partitions` a multiple of K). Each worker's records, messages handled and whether it has
settled are in a slot of a file every worker maps, and every worker stops when the group's add up: its own
share of the partitions is the group's to choose. The figures are the group's: messages over the
time from any worker's first non-empty fetch to the first worker to see the group done (one
monotonic clock), CPU µs per message over the CPU of all workers, peak RSS summed. (a) stays one
consumer: what reading the topic costs.

Goals (issue 12): sidecar/raw >= 0.5 for rag3, >= 0.6 for span1, >= 0.8 for mix, peak RSS < 250
MiB while 1M spans drain; and (the sampling issue) on/off >= 0.95. CPU µs are reported per message
and per span.

    python bench/ingest.py                            # rag3: 333,334 traces = 1,000,002 spans
    python bench/ingest.py --workload mix --sampling off,python --repeat 2
    python bench/ingest.py --quick --repeat 4 --json quick.json
    python bench/ingest.py --repeat 4 --sampling off,on           # the sampling A/B only

`--stage-only` skips Kafka: it feeds the workload's messages to `IngestStage._process` in this
process (sampling off, 2,000 messages a batch, as the consumer hands them over; the garbage
collector tuned as `Sidecar.run` tunes it) and prints its CPU µs per message, for profiling the
per-message path, e.g.
`py-spy record -r 500 -o mix.svg -- python bench/ingest.py --stage-only --workload mix --traces 12000`
(`--no-gc` disables the cyclic garbage collector for the pass, to see its share; `--gc-threshold`
tries other thresholds; `--batch` hands over that many messages a call; `--python-assembler` runs
the stage with the pure-Python assembler and everything else compiled, for that part's share).

`--stage-only --before DIR` compares two revisions in one run: DIR is a checkout of the earlier one
with its C extensions built in place (`git worktree add DIR REV && cd DIR && python setup.py
build_ext --inplace`, or `pip install -e DIR` in a second environment). Each of `--repeat` rounds
runs DIR's `--stage-only` and this tree's, each in its own process on the same workload, in
alternating order; it prints both CPU µs per message and the median of the rounds' after/before
ratios (a change that costs the ingest stage 5 % shows as 1.05), e.g.
`python bench/ingest.py --stage-only --quick --before ../before --repeat 10`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

FULL_SPANS = 1_000_002
QUICK_SPANS = 90_000
SPANS_PER_TRACE = {"rag3": 3, "span1": 3, "mix": 20}
SPANS_PER_MESSAGE = {"rag3": 3, "span1": 1, "mix": 20}
GOALS = {"rag3": 0.5, "span1": 0.6, "mix": 0.8}  # sidecar/raw msgs/s, issue 12
BATCH = 10  # traces per message in "batched" mode (the workload's default)
GRACE_SECONDS = 0.05
SHUTDOWN_SECONDS = 60.0  # a sidecar still running this long after `stop` dumps its tasks and exits
RSS_LIMIT_MIB = 250.0
GOAL_SAMPLING_RATIO = 0.95  # on/off msgs/s
GOALS_ON = {"span1": 0.8, "mix": 0.95}  # the sidecar with sampling on / raw msgs/s, issue 40
# The sidecar's variants; "off" is the baseline.
VARIANTS = ("off", "on", "aiokafka", "streams", "judged", "python")
# The `on` and `judged` policy; priority-signal multipliers stay at their defaults.
SAMPLING_ON: dict[str, Any] = {"rate": 0.05, "min_per_window": 20, "low_score_threshold": 0.7}


# --------------------------------------------------------------------------------------------
# Measurement, shared by both roles


@dataclass(slots=True)
class Clock:
    """Counts fetched messages; the clock runs from the first non-empty fetch."""

    expect: int
    started: float = field(default_factory=time.perf_counter)
    first: float | None = None  # when the first non-empty fetch returned
    first_cpu: float = 0.0  # process CPU time then
    first_batch: int = 0  # messages of that fetch: fetched before the clock started, not counted
    fetched: int = 0
    fetches: int = 0  # non-empty fetches after the first, up to the last expected message
    last_fetch: float | None = None  # when the fetch holding the last expected message returned
    waited: float = 0.0  # seconds spent awaiting fetches between the first and the last

    def batch(self, n: int) -> None:
        if not n:
            return
        now = time.perf_counter()
        if self.first is None:
            self.first, self.first_batch, self.first_cpu = now, n, time.process_time()
        elif self.last_fetch is None:
            self.fetches += 1
        self.fetched += n
        if self.fetched >= self.expect and self.last_fetch is None:
            self.last_fetch = now

    @property
    def join_seconds(self) -> float:
        return (self.first or self.started) - self.started

    def rate(self, end: float | None) -> float:
        """Messages per second from the first fetch to `end`."""
        if self.first is None or end is None or end <= self.first:
            return 0.0
        return (self.fetched - self.first_batch) / (end - self.first)

    def msgs_per_fetch(self) -> float:
        return (self.fetched - self.first_batch) / self.fetches if self.fetches else 0.0

    def cpu_us_per_msg(self) -> float:
        """Process CPU time per counted message since the first fetch."""
        n = self.fetched - self.first_batch
        return (time.process_time() - self.first_cpu) / n * 1e6 if n > 0 else 0.0


class Peers:
    """`--workers`: each sidecar worker's progress in a slot of a file all of them map (records
    counted, messages handled, settled), so that every worker sees when the group has drained the
    topic; its own share of the partitions is the group's to choose. The orchestrator makes the
    file in its temporary directory, which removes it."""

    FIELDS = 3

    def __init__(self, path: str, workers: int) -> None:
        import mmap

        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), workers * self.FIELDS * 8)
        self.workers = workers
        self.slots = memoryview(self._map).cast("d")  # worker i's at [i * FIELDS, (i + 1) * FIELDS)

    @classmethod
    def create(cls, path: str, workers: int) -> None:
        with open(path, "wb") as f:
            f.write(bytes(workers * cls.FIELDS * 8))  # zeros: nothing counted, none settled

    def post(self, worker: int, records: int, handled: int, settled: bool) -> None:
        at = worker * self.FIELDS
        self.slots[at], self.slots[at + 1], self.slots[at + 2] = records, handled, float(settled)

    def totals(self) -> tuple[float, float, bool]:
        """Records counted, messages handled, and whether every worker has settled."""
        s, f = self.slots, self.FIELDS
        rows = range(0, self.workers * f, f)
        return sum(s[i] for i in rows), sum(s[i + 1] for i in rows), all(s[i + 2] > 0 for i in rows)

    def close(self) -> None:
        self.slots.release()
        self._map.close()


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# --------------------------------------------------------------------------------------------
# (a) raw aiokafka


async def run_raw(args: argparse.Namespace) -> dict[str, Any]:
    """Drain the topic with a bare consumer. Only `aiokafka` is imported, so the RSS is its own."""
    from aiokafka import AIOKafkaConsumer

    kwargs: dict[str, Any] = json.loads(args.consumer)
    max_records = kwargs["max_poll_records"]
    consumer = AIOKafkaConsumer(
        group_id=args.group, bootstrap_servers=args.bootstrap, client_id="ingest-bench-raw", **kwargs
    )
    clock = Clock(args.expect_messages)
    deadline = time.monotonic() + args.timeout
    await consumer.start()
    try:
        consumer.subscribe([args.topic])
        while clock.fetched < clock.expect and time.monotonic() < deadline:
            t0 = time.perf_counter()
            batch = await consumer.getmany(timeout_ms=100, max_records=max_records)
            if clock.first is not None:
                clock.waited += time.perf_counter() - t0
            clock.batch(sum(len(msgs) for msgs in batch.values()))
        cpu = clock.cpu_us_per_msg()
    finally:
        await consumer.stop()
    return {
        "role": "raw",
        "fetched": clock.fetched,
        "complete": clock.fetched >= clock.expect,
        "join_seconds": clock.join_seconds,
        "drain_seconds": (clock.last_fetch or 0.0) - (clock.first or 0.0),
        "msgs_per_s": clock.rate(clock.last_fetch),
        "cpu_us_per_msg": cpu,
        "fetch_wait_seconds": clock.waited,
        "msgs_per_fetch": clock.msgs_per_fetch(),
        "peak_rss_mib": peak_rss_mib(),
    }


# --------------------------------------------------------------------------------------------
# (b) the sidecar


def sidecar_overrides(args: argparse.Namespace, results: str | None = None) -> dict[str, Any]:
    """The sidecar's settings for `args.variant`; `results` is the `judged` variant's results file."""
    if args.variant in ("off", "python"):
        sampling: dict[str, Any] = {"rate": 0.0, "min_per_window": 0}
    else:
        sampling = dict(SAMPLING_ON)
    judged = args.variant == "judged"
    return {
        "kafka": {
            "bootstrap_servers": args.bootstrap,
            "topic": args.topic,
            "group_id": args.group,
            "client_id": f"ingest-bench-{args.variant}",
            "encoding": args.encoding,
            "auto_offset_reset": "earliest",  # the topic is filled before the group joins
        },
        "assembly": {"grace_seconds": GRACE_SECONDS},
        "sampling": sampling,
        "judge": {"backend": "lexical" if judged else "none"},
        "results": {"file": results if judged else None, "topic": None},
        "pipeline": {
            "role": "all" if judged else "ingest",
            "samples_topic": f"{args.group}-samples",
            "judge_group_id": f"{args.group}-judge",
        },
    }


def metric_total(registry: Any, sample: str) -> float:
    """Sum of one sample name (e.g. `ragmon_records_total`) over all its label sets."""
    return float(sum(s.value for m in registry.collect() for s in m.samples if s.name == sample))


def run_sidecar(args: argparse.Namespace) -> dict[str, Any]:
    """`drain_sidecar`, with a results file (used by `judged` only) whose lines are then counted."""
    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as tmp:
        results = os.path.join(tmp, "results.jsonl")
        out = asyncio.run(drain_sidecar(args, results))
        if os.path.exists(results):  # closed by now: `Sidecar.run` closes its sinks on the way out
            with open(results, "rb") as f:
                out["results_lines"] = sum(1 for _ in f)
    return out


async def drain_sidecar(args: argparse.Namespace, results: str) -> dict[str, Any]:
    """Run the real pipeline in this process, timed through its own `source.fetch` calls and
    checked at each batch its consume loop hands to the ingest stage."""
    import logging

    from monitor.app.config import load_settings
    from monitor.app.sidecar import Sidecar
    from monitor.contracts.model import RagRecord

    logging.basicConfig(level=logging.WARNING)
    sidecar = Sidecar(load_settings(None, sidecar_overrides(args, results)))
    registry = sidecar.metrics.registry
    ingest = sidecar.ingest
    assert ingest is not None
    judge = sidecar.judge_stage
    tracker = ingest.tracker
    clock = Clock(args.expect_messages)
    stop = asyncio.Event()
    marks: dict[str, float] = {}
    inner = ingest.source.fetch
    decide = ingest.sampler.decide
    sampled = 0

    def counted_decide(record: RagRecord, now: float) -> float | None:
        nonlocal sampled
        p = decide(record, now)
        if p is not None:
            sampled += 1
        return p

    def settled() -> bool:
        """Every tracked message done: its traces emitted and, if sampled, produced to the
        samples topic — and, with the judge stage here (`judged`), judged and written."""
        tracker.committable()
        return tracker.in_flight() == 0 and (judge is None or judge.written >= ingest.samples.delivered)

    process = ingest._process
    handled = 0
    stage_cpu = 0.0  # process CPU seconds inside the ingest stage, over the clock's window
    peers = Peers(args.peers, args.workers) if args.workers > 1 else None

    def done(now: float) -> None:
        """The clock stops once every record is counted and every message settled (with
        `--workers`, the group's: every worker's own share is unknown)."""
        if "records" in marks:
            return
        if peers is not None:
            # Settled is worked out (the tracker walked) only once the group's records add up.
            records, _, _ = peers.totals()
            peers.post(args.worker, ingest.records_seen, handled, records >= args.expect_traces and settled())
            records, decoded, all_settled = peers.totals()
            if decoded >= args.expect_messages:
                marks.setdefault("decoded", now)
            if records < args.expect_traces or not all_settled:
                return
        elif not (metric_total(registry, "ragmon_records_total") >= args.expect_traces and settled()):
            return
        marks["records"] = now
        marks["cpu"] = clock.cpu_us_per_msg()
        marks["stage_cpu"] = stage_cpu / max(1, clock.fetched - clock.first_batch) * 1e6
        stop.set()

    async def checked_process(batch: Any) -> None:
        # One call per consumer-loop turn (a batch, possibly empty, handed to the stage).
        nonlocal handled, stage_cpu
        cpu = time.process_time()
        await process(batch)
        if clock.first is not None and "cpu" not in marks:
            stage_cpu += time.process_time() - cpu
        handled += sum(len(msgs) for msgs in batch.values())
        if handled >= clock.expect:
            now = time.perf_counter()
            marks.setdefault("decoded", now)
            done(now)

    async def tail() -> None:
        """After the last message is decoded, whether the drain is done every 5 ms: the last
        samples are acknowledged between consumer-loop turns, which come only every 0.2 s once
        the topic is drained, and a check at turns only added up to that to every drain."""
        while not stop.is_set():
            if "decoded" in marks or peers is not None:
                done(time.perf_counter())
            await asyncio.sleep(0.005)

    async def timed_fetch(timeout_ms: int) -> Any:
        t0 = time.perf_counter()
        batch = await inner(timeout_ms=timeout_ms)
        if clock.first is not None and clock.last_fetch is None:
            clock.waited += time.perf_counter() - t0
        clock.batch(sum(len(msgs) for msgs in batch.values()))
        return batch

    def state() -> str:
        """Where a drain that never completed stands, for stderr."""
        rejected = {
            s.labels["reason"]: s.value
            for m in registry.collect()
            for s in m.samples
            if s.name == "ragmon_rejected_total" and s.value
        }
        return json.dumps(
            {
                "fetched": clock.fetched,
                "records": metric_total(registry, "ragmon_records_total"),
                "rejected": rejected,
                "open_traces": ingest.assembler.open_traces,
                "messages_in_flight": tracker.in_flight(),
                "sampled": sampled,
            }
        )

    ingest.source.fetch = timed_fetch  # type: ignore[method-assign]
    ingest._process = checked_process  # type: ignore[method-assign]
    ingest.sampler.decide = counted_decide  # type: ignore[method-assign]
    task = asyncio.create_task(sidecar.run(stop))
    watcher = asyncio.create_task(tail())
    try:
        await asyncio.wait_for(stop.wait(), timeout=args.timeout)
    except TimeoutError:
        print(f"not complete after {args.timeout:.0f} s: {state()}", file=sys.stderr, flush=True)
        stop.set()
    await watcher  # ends with `stop`
    await asyncio.wait({task}, timeout=SHUTDOWN_SECONDS)
    if not task.done():
        print(f"still running {SHUTDOWN_SECONDS:.0f} s after stop: {state()}", file=sys.stderr)
        for t in asyncio.all_tasks():
            t.print_stack(file=sys.stderr)
        sys.stderr.flush()
        os._exit(3)  # asyncio.run would wait for the stuck tasks again
    task.result()
    if peers is not None:
        peers.close()
    end = marks.get("records")
    return {
        "role": args.variant,
        "fetched": clock.fetched,
        "records": metric_total(registry, "ragmon_records_total"),
        "rejected": metric_total(registry, "ragmon_rejected_total"),
        "sampled": sampled,
        "judged": metric_total(registry, "ragmon_judge_requests_total"),
        "judge_skipped": metric_total(registry, "ragmon_judge_skipped_total"),
        "results_lines": 0,
        "complete": end is not None,
        "join_seconds": clock.join_seconds,
        "drain_seconds": (end or 0.0) - (clock.first or 0.0),
        "msgs_per_s": clock.rate(end),
        "msgs_per_s_decoded": clock.rate(marks.get("decoded")),
        "cpu_us_per_msg": marks.get("cpu", 0.0),
        "stage_cpu_us_per_msg": marks.get("stage_cpu", 0.0),
        "fetch_wait_seconds": clock.waited,
        "msgs_per_fetch": clock.msgs_per_fetch(),
        "peak_rss_mib": peak_rss_mib(),
        # For combining `--workers`' results: one monotonic clock for every process here.
        "first_at": clock.first,
        "end_at": end,
        "decoded_at": marks.get("decoded"),
        "counted": clock.fetched - clock.first_batch,
        "fetches": clock.fetches,
    }


# --------------------------------------------------------------------------------------------
# Orchestration: broker, fill, interleave the roles


@dataclass(slots=True)
class Fill:
    messages: int = 0
    bytes: int = 0
    seconds: float = 0.0


def _counted(pairs: Iterator[tuple[bytes | None, bytes]], fill: Fill) -> Iterator[tuple[bytes | None, bytes]]:
    for key, value in pairs:
        fill.messages += 1
        fill.bytes += len(value)
        yield key, value


async def fill_topic(bootstrap: str, topic: str, args: argparse.Namespace) -> Fill:
    """Create the topic and produce the workload into it, generating as it sends."""
    from monitor.demo.workload import produce
    from monitor.kafka.client import ensure_topics
    from monitor.kafka.config import KafkaConfig

    await ensure_topics(KafkaConfig(bootstrap_servers=bootstrap), [topic], partitions=args.partitions)
    fill = Fill()
    t0 = time.perf_counter()
    pairs = trace_messages_for(args)
    acked = await produce(bootstrap, topic, _counted(pairs, fill))
    fill.seconds = time.perf_counter() - t0
    if acked != fill.messages:
        raise RuntimeError(f"produced {fill.messages} messages but {acked} were acknowledged")
    return fill


def one_span_messages(pairs: Iterator[tuple[bytes | None, bytes]]) -> Iterator[tuple[bytes | None, bytes]]:
    """Each trace's spans one a message (same resource and scope), keyed by its trace id."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    for key, value in pairs:
        req = ExportTraceServiceRequest.FromString(value)
        rs = req.resource_spans[0]
        for span in list(rs.scope_spans[0].spans):
            one = ExportTraceServiceRequest()
            out = one.resource_spans.add()
            out.resource.CopyFrom(rs.resource)
            ss = out.scope_spans.add()
            ss.scope.CopyFrom(rs.scope_spans[0].scope)
            ss.spans.add().CopyFrom(span)
            yield key, one.SerializeToString()


_MS = 1_000_000
# (scope, span name, kind, parent "http"|"chain", start ms into the CHAIN span, duration ms, attributes),
# as opentelemetry-instrumentation-{fastapi,asgi,sqlalchemy,redis,httpx,jinja2} write them by default.
_SERVER = {
    "http.scheme": "http",
    "http.host": "10.0.3.21:8000",
    "net.host.port": 8000,
    "http.flavor": "1.1",
    "http.target": "/query",
    "http.url": "http://10.0.3.21:8000/query",
    "http.method": "POST",
    "http.server_name": "rag-api.prod.svc.cluster.local:8000",
    "http.user_agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0",
    "net.peer.ip": "10.0.7.4",
    "net.peer.port": 52814,
    "http.route": "/query",
    "http.status_code": 200,
}
_PG = {
    "db.system": "postgresql",
    "db.name": "rag",
    "db.user": "rag_api",
    "net.peer.name": "pg-main",
    "net.peer.port": 5432,
}
_REDIS = {
    "db.system": "redis",
    "db.redis.database_index": 0,
    "net.peer.name": "redis-cache",
    "net.peer.port": 6379,
}
_REDIS |= {"net.transport": "ip_tcp"}
_FASTAPI = ("opentelemetry.instrumentation.fastapi", "0.48b0")
_SQLA = ("opentelemetry.instrumentation.sqlalchemy", "0.48b0")
_REDIS_SCOPE = ("opentelemetry.instrumentation.redis", "0.48b0")
_HTTPX = ("opentelemetry.instrumentation.httpx", "0.48b0")
_JINJA = ("opentelemetry.instrumentation.jinja2", "0.48b0")
_MIX: list[tuple[tuple[str, str], str, int, str, float, float, dict[str, Any]]] = [
    (_FASTAPI, "POST /query http receive", 1, "http", -1.5, 0.05, {"asgi.event.type": "http.request"}),
    (
        _HTTPX,
        "GET",
        3,
        "chain",
        0.1,
        2.0,
        {
            "http.method": "GET",
            "http.url": "http://auth.prod.svc.cluster.local/v1/introspect",
            "http.status_code": 200,
        },
    ),
    (
        _SQLA,
        "SELECT rag",
        3,
        "chain",
        2.2,
        0.9,
        _PG
        | {
            "db.statement": "SELECT users.id, users.tenant_id, users.plan FROM users "
            "WHERE users.api_key_hash = %(hash)s",
        },
    ),
    (
        _REDIS_SCOPE,
        "GET",
        3,
        "chain",
        3.2,
        0.3,
        _REDIS | {"db.statement": "GET qcache:7f3a9c", "db.redis.args_length": 2},
    ),
    (
        _HTTPX,
        "POST",
        3,
        "chain",
        3.6,
        9.0,
        {
            "http.method": "POST",
            "http.url": "http://embeddings.prod.svc.cluster.local:8080/v1/embeddings",
            "http.status_code": 200,
        },
    ),
    (
        _REDIS_SCOPE,
        "GET",
        3,
        "chain",
        12.8,
        0.2,
        _REDIS | {"db.statement": "GET emb:7f3a9c", "db.redis.args_length": 2},
    ),
    (
        _SQLA,
        "SELECT rag",
        3,
        "chain",
        13.1,
        4.2,
        _PG
        | {
            "db.statement": "SELECT chunks.id, chunks.doc_id, chunks.body, "
            "chunks.embedding <=> %(q)s AS distance FROM chunks "
            "WHERE chunks.tenant_id = %(tenant)s ORDER BY distance LIMIT %(k)s",
        },
    ),
    (
        _SQLA,
        "SELECT rag",
        3,
        "chain",
        17.5,
        1.1,
        _PG
        | {
            "db.statement": "SELECT documents.id, documents.title, documents.url FROM documents "
            "WHERE documents.id IN (%(id_1)s, %(id_2)s, %(id_3)s, %(id_4)s)",
        },
    ),
    (_JINJA, "jinja2.load", 1, "chain", 18.7, 0.1, {"jinja2.template_name": "answer_prompt.j2"}),
    (_JINJA, "jinja2.compile", 1, "chain", 18.8, 0.4, {"jinja2.template_name": "answer_prompt.j2"}),
    (_JINJA, "jinja2.render", 1, "chain", 19.3, 0.3, {"jinja2.template_name": "answer_prompt.j2"}),
    (
        _REDIS_SCOPE,
        "SETEX",
        3,
        "chain",
        -0.4,
        0.2,
        _REDIS
        | {
            "db.statement": "SETEX qcache:7f3a9c 300 ?",
            "db.redis.args_length": 4,
        },
    ),
    (
        _SQLA,
        "INSERT rag",
        3,
        "chain",
        -0.2,
        1.3,
        _PG
        | {
            "db.statement": "INSERT INTO query_log (tenant_id, query_hash, latency_ms, created_at) "
            "VALUES (%(tenant_id)s, %(query_hash)s, %(latency_ms)s, now())",
        },
    ),
    (_SQLA, "COMMIT", 3, "chain", -0.05, 0.4, _PG | {"db.statement": "COMMIT"}),
    (
        _FASTAPI,
        "POST /query http send",
        1,
        "http",
        1.0,
        0.1,
        {
            "asgi.event.type": "http.response.start",
            "http.status_code": 200,
        },
    ),
    (_FASTAPI, "POST /query http send", 1, "http", 1.2, 0.1, {"asgi.event.type": "http.response.body"}),
]


class ProductionMix:
    """20 spans a trace, 3 of them RAG: each workload trace inside a FastAPI request (`_SERVER`,
    the trace's root; the CHAIN span its child) with the 16 `_MIX` spans around it. Times are
    placed inside the request (negative offsets count from the CHAIN span's end)."""

    def __init__(self, seed: int) -> None:
        from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
        from opentelemetry.proto.trace.v1.trace_pb2 import Span

        def kvs(attrs: dict[str, Any]) -> list[Any]:
            return [
                KeyValue(
                    key=k, value=AnyValue(int_value=v) if isinstance(v, int) else AnyValue(string_value=v)
                )
                for k, v in attrs.items()
            ]

        self.rng = random.Random(f"{seed}:mix")
        self.scope = {s: InstrumentationScope(name=s[0], version=s[1]) for s in {m[0] for m in _MIX}}
        self.server = Span(name="POST /query", kind=Span.SPAN_KIND_SERVER, attributes=kvs(_SERVER))
        self.spans = [
            (scope, parent, start, dur, Span(name=n, kind=k, attributes=kvs(a)))
            for scope, n, k, parent, start, dur, a in _MIX
        ]

    def messages(self, pairs: Iterator[tuple[bytes | None, bytes]]) -> Iterator[tuple[bytes | None, bytes]]:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        rng = self.rng
        for key, value in pairs:
            req = ExportTraceServiceRequest.FromString(value)
            rs = req.resource_spans[0]
            rag = rs.scope_spans[0].spans
            chain = next(s for s in rag if not s.parent_span_id)
            t0, t1 = chain.start_time_unix_nano, chain.end_time_unix_nano
            http_id = rng.getrandbits(64).to_bytes(8, "big")
            chain.parent_span_id = http_id
            by_scope: dict[tuple[str, str], Any] = {}
            for scope, parent, start, dur, tpl in self.spans:
                ss = by_scope.get(scope)
                if ss is None:
                    ss = by_scope[scope] = rs.scope_spans.add()
                    ss.scope.CopyFrom(self.scope[scope])
                s = ss.spans.add()
                s.CopyFrom(tpl)
                s.trace_id, s.flags = chain.trace_id, chain.flags
                s.span_id = rng.getrandbits(64).to_bytes(8, "big")
                s.parent_span_id = http_id if parent == "http" else chain.span_id
                begin = (t0 if start >= 0 else t1) + int(start * _MS)
                s.start_time_unix_nano, s.end_time_unix_nano = begin, begin + int(dur * _MS)
            server = by_scope[_FASTAPI].spans.add()
            server.CopyFrom(self.server)
            server.trace_id, server.flags, server.span_id = chain.trace_id, chain.flags, http_id
            server.start_time_unix_nano, server.end_time_unix_nano = t0 - 2 * _MS, t1 + 1 * _MS
            yield key, req.SerializeToString()


def stage_only(args: argparse.Namespace) -> dict[str, Any]:
    """`IngestStage._process` over the workload's messages, no broker: its CPU µs per message."""
    import gc
    from types import SimpleNamespace

    from aiokafka import TopicPartition

    from monitor.app.config import load_settings
    from monitor.app.sidecar import ingest_stage, tune_gc
    from monitor.contracts.metrics import Metrics
    from monitor.ingest.assemble import PyAssembler
    from monitor.kafka.producer import KafkaOutput

    pairs = trace_messages_for(args)
    msgs = [SimpleNamespace(offset=i, key=k, value=v) for i, (k, v) in enumerate(pairs)]
    args.variant, args.bootstrap, args.topic, args.group = "off", "127.0.0.1:9", "stage-only", "stage-only"

    async def run() -> dict[str, Any]:
        settings = load_settings(None, sidecar_overrides(args))
        output = KafkaOutput(settings.kafka)  # never started: sampling is off
        metrics = Metrics()
        # Built as the sidecar builds it: every record also into the retrieval-drift monitor.
        stage = ingest_stage(settings, metrics, output)
        if args.python_assembler:
            stage.assembler = PyAssembler(settings.assembly)
        tp = TopicPartition(args.topic, 0)
        stage.tracker.assign([tp])
        if args.no_gc:
            gc.disable()
        else:
            tune_gc()  # as `Sidecar.run` does
            if args.gc_threshold:
                gc.set_threshold(*(int(x) for x in args.gc_threshold.split(",")))
        before = [x["collections"] for x in gc.get_stats()]
        t0 = time.process_time()
        for i in range(0, len(msgs), args.batch):
            await stage._process({tp: msgs[i : i + args.batch]})
        await asyncio.sleep(GRACE_SECONDS)
        await stage._process({})
        cpu = time.process_time() - t0
        gc.enable()
        after = [x["collections"] for x in gc.get_stats()]
        await output.close()
        return {
            "workload": args.workload,
            "decoder": _decoder(),
            "assembler": type(stage.assembler).__module__ + "." + type(stage.assembler).__name__,
            "batch": args.batch,
            "messages": len(msgs),
            "records": stage.records_seen,
            "cpu_us_per_msg": cpu / len(msgs) * 1e6,
            "gc_collections": [b - a for a, b in zip(before, after, strict=True)],
        }

    return asyncio.run(run())


def trace_messages_for(args: argparse.Namespace) -> Iterator[tuple[bytes | None, bytes]]:
    """The (key, value) pairs of `args.workload`."""
    from monitor.demo.workload import trace_messages

    pairs = trace_messages(args.traces, seed=args.seed, mode=args.mode, batch=BATCH)
    if args.workload == "span1":
        return one_span_messages(pairs)
    if args.workload == "mix":
        return ProductionMix(args.seed).messages(pairs)
    return pairs


def context_bytes_per_trace(args: argparse.Namespace) -> float:
    """Mean UTF-8 bytes of retrieved chunk text per trace, over one cycle of the request pool."""
    from monitor.demo.workload import WorkloadConfig, iter_workload, load_corpus

    chunks = load_corpus().chunks
    n = min(args.traces, WorkloadConfig().pool_size)
    sizes = [
        sum(len(chunks[c].text.encode()) for c in t.chunk_ids)
        for truths, _ in iter_workload(n, seed=args.seed, mode="per_trace")
        for t in truths
    ]
    return statistics.fmean(sizes)


def raw_consumer_settings() -> dict[str, Any]:
    """The keyword arguments `KafkaSource.start` (monitor/kafka/consumer.py) gives `AIOKafkaConsumer`.

    Captured from the real code with a stand-in consumer class that records them and fails to
    connect, so (a) keeps matching (b) whatever source.py changes. The per-role identity
    (group, bootstrap, client id) is left out: the raw role sets its own.
    """
    import logging

    from aiokafka.errors import KafkaConnectionError

    from monitor.app.config import load_settings
    from monitor.contracts.metrics import Metrics
    from monitor.kafka import consumer as source
    from monitor.kafka.offsets import OffsetTracker

    captured: dict[str, Any] = {}
    stop = asyncio.Event()

    class Capture:
        def __init__(self, *topics: str, **kwargs: Any) -> None:
            captured.update(kwargs)

        async def start(self) -> None:
            stop.set()  # ends KafkaSource.start's retry loop
            raise KafkaConnectionError("settings captured")

        async def stop(self) -> None:
            pass

    async def no_revoke(revoked: set[Any]) -> None:
        pass

    kafka = load_settings(None, {"kafka": {"auto_offset_reset": "earliest"}}).kafka  # as sidecar_overrides
    spec = source.SourceSpec(kafka.topic, kafka.group_id, kafka.auto_offset_reset, kafka.max_poll_records)
    m = Metrics()
    src = source.KafkaSource(kafka, spec, OffsetTracker(), m.consumer, no_revoke)
    namespace = vars(source)
    real, namespace["AIOKafkaConsumer"] = namespace["AIOKafkaConsumer"], Capture
    quiet = logging.getLogger(source.__name__)
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the stand-in's refusal would be logged as a warning
    try:
        asyncio.run(src.start(stop))
    finally:
        namespace["AIOKafkaConsumer"] = real
        quiet.setLevel(level)
    if "max_poll_records" not in captured:
        raise RuntimeError("could not capture the sidecar's consumer settings from monitor/kafka/consumer.py")
    for key in ("group_id", "bootstrap_servers", "client_id"):
        captured.pop(key, None)
    return captured


def _role_command(role: str, argv: list[str]) -> tuple[list[str], list[str], dict[str, str]]:
    which = ["--role", "raw"] if role == "raw" else ["--role", "sidecar", "--variant", role]
    cmd = [sys.executable, os.path.abspath(__file__), *which, *argv]
    env = dict(os.environ)
    env.pop("RAGMON_PURE_PYTHON", None)
    env.pop("RAGMON_KAFKA_READER", None)
    env.pop("RAGMON_KAFKA_RESPONSES", None)
    if role == "python":
        env["RAGMON_PURE_PYTHON"] = "1"
    elif role == "aiokafka":
        env["RAGMON_KAFKA_READER"] = "aiokafka"
    elif role == "streams":
        env["RAGMON_KAFKA_RESPONSES"] = "aiokafka"
    return which, cmd, env


def run_role(role: str, argv: list[str], timeout: float, workers: int = 1) -> dict[str, Any]:
    """One side of the measurement (`raw` or a sampling variant) in a fresh interpreter, or
    `workers` of them in one consumer group at once (a sidecar variant); each one's last stdout
    line is its result."""
    which, cmd, env = _role_command(role, argv)
    tmp = tempfile.TemporaryDirectory(prefix="ingest-bench-peers-")
    peers = os.path.join(tmp.name, "peers")
    Peers.create(peers, workers)
    procs = []
    for i in range(workers):
        extra = ["--workers", str(workers), "--worker", str(i), "--peers", peers] if workers > 1 else []
        procs.append(
            subprocess.Popen(cmd + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        )
    results = []
    try:
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=timeout + 120)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                raise RuntimeError(f"{shlex.join(which)} timed out:\n{err[-4000:]}") from None
            if proc.returncode != 0 or not out.strip():
                raise RuntimeError(f"{shlex.join(which)} failed ({proc.returncode}):\n{err[-4000:]}")
            result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
            if not result["complete"]:
                raise RuntimeError(
                    f"{shlex.join(which)} did not drain the topic in {timeout:.0f}s: {result}\n{err[-4000:]}"
                )
            results.append(result)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        tmp.cleanup()
    return results[0] if workers == 1 else combine_workers(results)


def combine_workers(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The group's figures from its workers': messages over the span from the first worker's
    first fetch to the drain's end; CPU summed over every worker (what the user pays), and peak
    RSS too (the processes run side by side)."""
    fetching = [r for r in results if r["first_at"] is not None]
    first = min(r["first_at"] for r in fetching)
    end = min(r["end_at"] for r in results if r["end_at"] is not None)
    decoded = min((r["decoded_at"] for r in results if r["decoded_at"] is not None), default=None)
    counted = sum(r["counted"] for r in fetching)
    fetches = sum(r["fetches"] for r in fetching)

    def per_msg(key: str) -> float:
        return sum(r[key] * r["counted"] for r in fetching) / counted if counted else 0.0

    return {
        **{k: sum(r[k] for r in results) for k in ("sampled", "judged", "judge_skipped", "results_lines")},
        "role": results[0]["role"],
        "workers": len(results),
        "fetched": sum(r["fetched"] for r in results),
        "records": sum(r["records"] for r in results),
        "rejected": sum(r["rejected"] for r in results),
        "complete": True,
        "join_seconds": max(r["join_seconds"] for r in results),
        "drain_seconds": end - first,
        "msgs_per_s": counted / (end - first),
        "msgs_per_s_decoded": counted / (decoded - first) if decoded else 0.0,
        "cpu_us_per_msg": per_msg("cpu_us_per_msg"),
        "stage_cpu_us_per_msg": per_msg("stage_cpu_us_per_msg"),
        "fetch_wait_seconds": max(r["fetch_wait_seconds"] for r in fetching),
        "msgs_per_fetch": counted / fetches if fetches else 0.0,
        "peak_rss_mib": sum(r["peak_rss_mib"] for r in results),
        "per_worker_msgs": [r["counted"] for r in results],
    }


def machine() -> dict[str, Any]:
    import aiokafka
    from google.protobuf.internal import api_implementation

    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "aiokafka": aiokafka.__version__,
        "protobuf_backend": api_implementation.Type(),
        "otlp_proto_decoder": _decoder(),
    }


def _decoder() -> str:
    from monitor.ingest.decode import OTLP_PROTO_DECODER

    return str(OTLP_PROTO_DECODER)


def code_fingerprint() -> str:
    """SHA-256 (12 hex) over the `monitor` package's sources: which code the figures are for."""
    import hashlib
    from pathlib import Path

    import monitor

    digest = hashlib.sha256()
    for path in sorted(Path(monitor.__file__).parent.glob("**/*.[pc]*")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _say(text: str) -> None:
    print(text, flush=True)


def measure(
    args: argparse.Namespace, bootstrap: str, topic: str, fill: Fill
) -> dict[str, list[dict[str, Any]]]:
    """Run raw and every sampling variant once per repeat, each in a fresh consumer group, the
    variants in reverse order every other repeat (see the module docstring)."""
    common = ["--bootstrap", bootstrap, "--topic", topic, "--timeout", str(args.timeout)]
    common += ["--expect-messages", str(fill.messages), "--expect-traces", str(args.traces)]
    raw_args = ["--consumer", json.dumps(raw_consumer_settings())]
    sidecar_args = ["--encoding", args.encoding]
    runs: dict[str, list[dict[str, Any]]] = {role: [] for role in ("raw", *args.sampling)}
    for r in range(args.repeat):
        for role in ("raw", *(args.sampling if r % 2 == 0 else reversed(args.sampling))):
            group = ["--group", f"bench-{role}-{r}-{uuid.uuid4().hex[:6]}"]
            extra_args = raw_args if role == "raw" else sidecar_args
            workers = 1 if role == "raw" else args.workers
            res = run_role(role, common + group + extra_args, args.timeout, workers)
            runs[role].append(res)
            extra = ""
            if role != "raw":
                extra = f" (to last decode {res['msgs_per_s_decoded']:,.0f}), {res['sampled']:,} sampled"
            in_stage = f" ({res['stage_cpu_us_per_msg']:.1f} in the stage)" if role != "raw" else ""
            if "per_worker_msgs" in res:
                shares = "/".join(f"{n:,}" for n in res["per_worker_msgs"])
                extra += f", {res['workers']} workers: {shares} msgs"
            _say(
                f"  run {r + 1}/{args.repeat} {role:6s}: {res['msgs_per_s']:>8,.0f} msgs/s{extra}, "
                f"{res['cpu_us_per_msg']:.1f} CPU µs/msg{in_stage}, join {res['join_seconds']:.1f} s, "
                f"drain {res['drain_seconds']:.1f} s, fetch wait {res['fetch_wait_seconds']:.1f} s, "
                f"{res.get('msgs_per_fetch', 0):.0f} msgs/fetch, "
                f"peak RSS {res['peak_rss_mib']:.0f} MiB"
            )
    return runs


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(x[key] for x in runs))


def summarize(role: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repeats of one role (peak RSS: the largest)."""
    out: dict[str, Any] = {
        "msgs_per_s": _median(runs, "msgs_per_s"),
        "cpu_us_per_msg": _median(runs, "cpu_us_per_msg"),
        "peak_rss_mib": max(x["peak_rss_mib"] for x in runs),
    }
    if role != "raw":
        out["stage_cpu_us_per_msg"] = _median(runs, "stage_cpu_us_per_msg")
        records = _median(runs, "records")
        out["msgs_per_s_to_last_decode"] = _median(runs, "msgs_per_s_decoded")
        out["records"] = records
        out["sampled"] = _median(runs, "sampled")
        out["sampled_share"] = out["sampled"] / records if records else 0.0
    if role == "judged":
        for key in ("judged", "judge_skipped", "results_lines"):
            out[key] = _median(runs, key)
    return out


def compare(runs: dict[str, list[dict[str, Any]]], a: str, b: str) -> dict[str, Any]:
    """a/b: the median of the per-repeat ratios (the runs of one repeat are neighbours in time),
    each per-repeat ratio, and the ratio of the medians."""
    out: dict[str, Any] = {}
    for key in ("msgs_per_s", "cpu_us_per_msg"):
        paired = [x[key] / y[key] if y[key] else 0.0 for x, y in zip(runs[a], runs[b], strict=True)]
        den = _median(runs[b], key)
        out[key] = float(statistics.median(paired))
        out[f"{key}_per_repeat"] = paired
        out[f"{key}_of_medians"] = _median(runs[a], key) / den if den else 0.0
    return out


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    from monitor.demo.broker import EmbeddedBroker

    command = shlex.join([sys.executable, *sys.argv])
    info = machine()
    _say(
        f"machine: {info['nproc']} CPU ({info['cpu']}), Python {info['python']}, "
        f"aiokafka {info['aiokafka']}, protobuf backend {info['protobuf_backend']}, "
        f"otlp_proto decoder {info['otlp_proto_decoder']}"
    )
    context = context_bytes_per_trace(args)
    topic = f"bench_{uuid.uuid4().hex[:8]}"
    with EmbeddedBroker() as broker:
        _say(
            f"filling {topic} ({args.partitions} partitions): {args.traces:,} traces, "
            f"workload {args.workload}, mode {args.mode}"
        )
        fill = asyncio.run(fill_topic(broker.bootstrap_servers, topic, args))
        _say(
            f"filled: {fill.messages:,} messages, {fill.bytes / 1e6:,.1f} MB in {fill.seconds:.1f} s "
            f"({fill.messages / fill.seconds:,.0f} msgs/s, {fill.bytes / 1e6 / fill.seconds:.1f} MB/s)"
        )
        runs = measure(args, broker.bootstrap_servers, topic, fill)

    roles = {role: summarize(role, x) for role, x in runs.items()}
    raw, off = roles["raw"], roles["off"]
    report = {
        "command": command,
        "machine": info,
        "monitor_sha256": code_fingerprint(),
        "params": {k: v for k, v in vars(args).items() if v is not None and k not in {"json"}},
        "messages": fill.messages,
        "traces": args.traces,
        "spans": args.traces * SPANS_PER_TRACE[args.workload],
        "workload": args.workload,
        "goal": GOALS[args.workload],
        "mean_message_bytes": fill.bytes / fill.messages,
        "context_bytes_per_trace": context,
        "fill": {**asdict(fill), "msgs_per_s": fill.messages / fill.seconds},
        # (b) of the (b)/(a) ratio is the `off` variant.
        "raw_msgs_per_s": raw["msgs_per_s"],
        "sidecar_msgs_per_s": off["msgs_per_s"],
        "sidecar_msgs_per_s_to_last_decode": off["msgs_per_s_to_last_decode"],
        "ratio": off["msgs_per_s"] / raw["msgs_per_s"] if raw["msgs_per_s"] else 0.0,
        # issue 40's: the sidecar with sampling on over the raw consumer (the ratio of the medians)
        "ratio_on": roles["on"]["msgs_per_s"] / raw["msgs_per_s"] if "on" in roles else None,
        "goal_on": GOALS_ON.get(args.workload),
        "cpu_us_per_msg": {role: x["cpu_us_per_msg"] for role, x in roles.items()},
        "peak_rss_mib": {role: x["peak_rss_mib"] for role, x in roles.items()},
        "roles": roles,
        "sampling": {
            "policy_on": SAMPLING_ON,
            "goal_on_off": GOAL_SAMPLING_RATIO,
            "on_off": compare(runs, "on", "off") if "on" in runs else None,
            "judged_off": compare(runs, "judged", "off") if "judged" in runs else None,
            "off_python": compare(runs, "off", "python") if "python" in runs else None,
            "on_aiokafka": compare(runs, "on", "aiokafka") if "aiokafka" in runs else None,
            "on_streams": compare(runs, "on", "streams") if "streams" in runs else None,
        },
        "runs": runs,
    }
    print_table(report)
    return report


def _ab_rows(label: str, ab: dict[str, Any], goal: float | None) -> list[tuple[str, str]]:
    """Two table rows for a ratio of variants: msgs/s (against `goal`, if any) and CPU µs/msg."""

    def more(key: str) -> str:
        xs = ab[f"{key}_per_repeat"]
        return f"per repeat {min(xs):.3f}-{max(xs):.3f}, of medians {ab[f'{key}_of_medians']:.3f}"

    verdict = ""
    if goal is not None:
        verdict = "  [ok]" if ab["msgs_per_s"] >= goal else f"  [below the {goal} goal]"
    return [
        (f"{label} msgs/s", f"{ab['msgs_per_s']:.3f}{verdict}  {more('msgs_per_s')}"),
        (f"{label} CPU µs/msg", f"{ab['cpu_us_per_msg']:.3f}  {more('cpu_us_per_msg')}"),
    ]


def print_table(rep: dict[str, Any]) -> None:
    rss, cpu, m, roles = rep["peak_rss_mib"], rep["cpu_us_per_msg"], rep["machine"], rep["roles"]
    goal = rep["goal"]
    ratio_ok = "ok" if rep["ratio"] >= goal else f"below the {goal} goal"
    rss_ok = "ok" if max(rss.values()) < RSS_LIMIT_MIB else f"over {RSS_LIMIT_MIB:.0f} MiB"
    spans_per_s = rep["sidecar_msgs_per_s"] * rep["spans"] / rep["messages"]
    side = f"{rep['sidecar_msgs_per_s']:,.0f} msgs/s ({spans_per_s:,.0f} spans/s)"
    rows = [
        ("messages / spans", f"{rep['messages']:,} / {rep['spans']:,}"),
        ("workload", f"{rep['workload']}: {rep['spans'] / rep['messages']:.1f} spans a message"),
        ("mean message bytes", f"{rep['mean_message_bytes']:,.0f}"),
        ("chunk context bytes / trace", f"{rep['context_bytes_per_trace']:,.0f}"),
        ("fill", f"{rep['fill']['msgs_per_s']:,.0f} msgs/s"),
        ("(a) raw aiokafka", f"{rep['raw_msgs_per_s']:,.0f} msgs/s"),
        ("(b) sidecar, sampling off", side),
        ("(b) to last decode", f"{rep['sidecar_msgs_per_s_to_last_decode']:,.0f} msgs/s"),
        ("ratio (b)/(a)", f"{rep['ratio']:.2f}  [{ratio_ok}]"),
    ]
    if rep["ratio_on"] is not None:
        goal_on = rep["goal_on"]
        verdict = (
            "" if goal_on is None else "  [ok]" if rep["ratio_on"] >= goal_on else f"  [below {goal_on}]"
        )
        rows.append(("sampling on / (a)", f"{rep['ratio_on']:.2f}{verdict}"))
    labels = {
        "on": "sampling on, judge none",
        "aiokafka": "sampling on, aiokafka's records",
        "streams": "sampling on, asyncio's stream reader",
        "judged": "sampling on, lexical judge",
    }
    if "python" in roles:
        rows.append(("pure-Python decoder + assembler", f"{roles['python']['msgs_per_s']:,.0f} msgs/s"))
    for role, label in labels.items():
        if role in roles:
            x = roles[role]
            rows.append((label, f"{x['msgs_per_s']:,.0f} msgs/s, {x['sampled_share']:.1%} sampled"))
    ab = rep["sampling"]
    if ab["on_off"] is not None:
        rows += _ab_rows("on/off", ab["on_off"], GOAL_SAMPLING_RATIO)
    if ab["judged_off"] is not None:
        rows += _ab_rows("judged/off", ab["judged_off"], None)
        x = roles["judged"]
        done = f"{x['judged']:,.0f} / {x['judge_skipped']:,.0f} / {x['results_lines']:,.0f}"
        rows.append(("judged: requests / skipped / lines", done))
    if ab["off_python"] is not None:
        rows += _ab_rows("compiled/python", ab["off_python"], None)
    if ab["on_aiokafka"] is not None:
        rows += _ab_rows("record reader/aiokafka's", ab["on_aiokafka"], None)
    if ab.get("on_streams") is not None:
        rows += _ab_rows("chunked responses/asyncio's", ab["on_streams"], None)
    names = " / ".join(roles)
    rows.append((f"CPU µs/msg {names}", " / ".join(f"{cpu[r]:.1f}" for r in roles)))
    per_span = rep["messages"] / rep["spans"]
    rows.append((f"CPU µs/span {names}", " / ".join(f"{cpu[r] * per_span:.2f}" for r in roles)))
    rows.append((f"peak RSS {names}", " / ".join(f"{rss[r]:.0f}" for r in roles) + f" MiB  [{rss_ok}]"))
    width = max(len(k) for k, _ in rows)
    policy = ", ".join(f"{k} {v}" for k, v in SAMPLING_ON.items())
    _say(f"\nmedians of {rep['params']['repeat']} run(s); {m['nproc']} CPU, Python {m['python']}")
    _say(f"sampling on: {policy}, other signals at their defaults; judged/off is not the criterion")
    for key, value in rows:
        _say(f"  {key:<{width}}  {value}")
    _say(f"monitor sources sha256: {rep['monitor_sha256']}")
    _say(f"command: {rep['command']}")


# --------------------------------------------------------------------------------------------
# CLI


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", type=int, help=f"traces to produce (default: {FULL_SPANS:,} spans' worth)")
    p.add_argument("--quick", action="store_true", help=f"{QUICK_SPANS:,} spans' worth of traces")
    p.add_argument(
        "--workload", choices=tuple(GOALS), default="rag3", help="message shape (see above; default rag3)"
    )
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument(
        "--mode", choices=("per_trace", "batched"), default="per_trace", help=f"1 or {BATCH} traces a message"
    )
    p.add_argument(
        "--repeat", type=int, default=1, help="run (a) and every variant of (b) R times; report medians"
    )
    p.add_argument(
        "--sampling",
        default=",".join(VARIANTS),
        help=f"sidecar variants, comma-separated, 'off' included (default {','.join(VARIANTS)})",
    )
    p.add_argument("--json", metavar="FILE", help="write the figures to FILE")
    p.add_argument("--stage-only", action="store_true", help="no Kafka: time IngestStage._process (above)")
    p.add_argument("--no-gc", action="store_true", help="with --stage-only: garbage collector off")
    p.add_argument("--batch", type=int, default=2000, help="with --stage-only: messages per _process call")
    p.add_argument(
        "--python-assembler", action="store_true", help="with --stage-only: the pure-Python trace assembler"
    )
    p.add_argument(
        "--gc-threshold", metavar="G0,G1,G2", help="with --stage-only: gc.set_threshold after the sidecar's"
    )
    p.add_argument(
        "--before", metavar="DIR", help="with --stage-only: compare with the checkout in DIR (above)"
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--encoding", choices=("auto", "otlp_proto"), default="auto", help="sidecar decoder")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per drain")
    # Internal: one side of the measurement, in its own process.
    p.add_argument("--role", choices=("raw", "sidecar"), help=argparse.SUPPRESS)
    p.add_argument("--variant", choices=VARIANTS, default="off", help=argparse.SUPPRESS)
    for name in ("--bootstrap", "--topic", "--group", "--consumer"):
        p.add_argument(name, help=argparse.SUPPRESS)
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="sidecar processes a variant runs in one consumer group (the stage on more cores; default 1)",
    )
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--peers", help=argparse.SUPPRESS)
    p.add_argument("--expect-messages", type=int, help=argparse.SUPPRESS)
    p.add_argument("--expect-traces", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.traces is None:
        args.traces = (QUICK_SPANS if args.quick else FULL_SPANS) // SPANS_PER_TRACE[args.workload]
    if args.workload != "rag3" and args.mode != "per_trace":
        p.error("--mode batched applies to --workload rag3 only")
    if min(args.traces, args.partitions, args.repeat) < 1:
        p.error("--traces, --partitions and --repeat must be >= 1")
    variants = [v.strip() for v in args.sampling.split(",") if v.strip()]
    if "off" not in variants or not set(variants) <= set(VARIANTS) or len(set(variants)) < len(variants):
        p.error(f"--sampling: distinct names from {', '.join(VARIANTS)}, 'off' (the baseline) included")
    args.sampling = [v for v in VARIANTS if v in variants]  # off, on, judged: `on` next to `off`
    return args


def compare_trees(args: argparse.Namespace) -> dict[str, Any]:
    """`--stage-only` of the checkout `args.before` and of this tree, alternating, `args.repeat`
    rounds, each in a process of its own importing its own tree's package."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"before": os.path.abspath(args.before), "after": here}
    flags = [
        "--stage-only",
        "--traces",
        str(args.traces),
        "--workload",
        args.workload,
        "--seed",
        str(args.seed),
    ]
    flags += ["--batch", str(args.batch), "--mode", args.mode]
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(args.repeat):
        for name in ("before", "after") if i % 2 == 0 else ("after", "before"):
            root = trees[name]
            env = {**os.environ, "PYTHONPATH": root}
            cmd = [sys.executable, os.path.join(root, "bench", "ingest.py"), *flags]
            done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=True)
            cpu[name].append(json.loads(done.stdout.strip().splitlines()[-1])["cpu_us_per_msg"])
    ratios = [a / b for a, b in zip(cpu["after"], cpu["before"], strict=True)]
    return {
        "workload": args.workload,
        "messages_per_run": args.traces,
        "before": trees["before"],
        "cpu_us_per_msg_before": [round(x, 3) for x in cpu["before"]],
        "cpu_us_per_msg_after": [round(x, 3) for x in cpu["after"]],
        "after_over_before_per_round": [round(r, 4) for r in ratios],
        "after_over_before_median": round(statistics.median(ratios), 4),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.stage_only:
        print(json.dumps(compare_trees(args) if args.before else stage_only(args)))
        return 0
    if args.role is not None:
        result = asyncio.run(run_raw(args)) if args.role == "raw" else run_sidecar(args)
        print(json.dumps(result))
        return 0
    report = orchestrate(args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
