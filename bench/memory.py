"""Memory benchmark: peak RSS of the ingest stage against `assembly.max_open_bytes` under traffic
built to hold memory.

Fills a topic on the embedded broker with `--spans` spans in messages of ~`--message-bytes`
(OTLP protobuf), `--spans-per-message` spans each. Every trace is rootless, so none ever
completes: each is held until the byte bound evicts it (the timeout is an hour). Each span is an
OpenInference RETRIEVER with one retrieved document, whose text the compiled decoder leaves where
it lies in the message: one open trace keeps its whole message alive. One trace of
`--big-trace-spans` spans (default 50,000) is spread over the messages from the start: it takes
`assembly.max_spans_per_trace` (10,000) and the rest are dropped (`too_many_spans`), then it is
evicted (the oldest) and its later spans are late (`late_span`).

The sidecar (`--role ingest`, sampling off, no judge) runs in a subprocess of its own; it stops
once every message has been handed to the ingest stage, and reports its peak RSS (`ru_maxrss`),
the open traces and bytes, and the rejections by reason. The broker is a separate process and not
counted. Goal (issue 24): peak RSS <= bound + 150 MB.

    python bench/memory.py                                        # 1 M spans, 1 MB messages, 256 MiB
    python bench/memory.py --spans 300000 --bound-mb 64           # minutes on 2 cores

`--measure-costs` measures instead what the assembler's `TRACE_COST` and `SPAN_COST` stand for,
on the path in use (`RAGMON_PURE_PYTHON=1` for the pure-Python one), no broker: the bytes
tracemalloc sees held after 10,000 one-span and 1,000 ten-span open traces of this workload's
spans (the messages themselves not counted), solved for a cost per trace and per kept span.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def messages(args: argparse.Namespace) -> Iterator[tuple[bytes | None, bytes]]:
    """The workload: rootless one-span traces, with the big trace's spans spread among them."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

    rng = random.Random(args.seed)
    per = args.spans_per_message
    n_messages = -(-args.spans // per)
    big_per = -(-args.big_trace_spans // n_messages) if args.big_trace_spans else 0
    text_len = max(16, args.message_bytes // per - 320)  # a span's other fields: ~310 bytes
    words = ["pump", "valve", "seal", "flow", "pressure", "litre", "minute", "bearing", "motor", "housing"]
    big_tid = rng.randbytes(16)
    big_left = args.big_trace_spans
    left = args.spans

    def attr(key: str, value: str | float) -> KeyValue:
        kv = KeyValue(key=key)
        if isinstance(value, str):
            kv.value.string_value = value
        else:
            kv.value.double_value = value
        return kv

    for _ in range(n_messages):
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        rs.resource.attributes.append(attr("service.name", "rag-svc"))
        ss = rs.scope_spans.add()
        ss.scope.name = "openinference.instrumentation"
        n = min(per, left)
        big_here = min(big_per, big_left, n)
        for i in range(n):
            sp = ss.spans.add()
            sp.trace_id = big_tid if i < big_here else rng.randbytes(16)
            sp.span_id = rng.randbytes(8)
            sp.parent_span_id = rng.randbytes(8)  # rootless: never complete
            sp.name = "retrieve"
            sp.start_time_unix_nano = time.time_ns()
            sp.end_time_unix_nano = sp.start_time_unix_nano + 1_000_000
            text = " ".join(rng.choice(words) for _ in range(text_len // 6 + 1))[:text_len]
            sp.attributes.extend(
                [
                    attr("openinference.span.kind", "RETRIEVER"),
                    attr("input.value", "How much does the pump move?"),
                    attr("retrieval.documents.0.document.id", f"doc-{rng.randrange(10**9)}"),
                    attr("retrieval.documents.0.document.content", text),
                    attr("retrieval.documents.0.document.score", 0.8),
                ]
            )
        big_left -= big_here
        left -= n
        yield None, req.SerializeToString()


async def fill(args: argparse.Namespace) -> tuple[int, int]:
    from monitor.demo.workload import produce
    from monitor.kafka.client import ensure_topics
    from monitor.kafka.config import KafkaConfig

    await ensure_topics(
        KafkaConfig(bootstrap_servers=args.bootstrap), [args.topic], partitions=args.partitions
    )
    count = size = 0

    def counted() -> Iterator[tuple[bytes | None, bytes]]:
        nonlocal count, size
        for key, value in messages(args):
            count += 1
            size += len(value)
            yield key, value

    acked = await produce(args.bootstrap, args.topic, counted(), max_batch_size=4 << 20)
    if acked != count:
        raise RuntimeError(f"produced {count} messages but {acked} were acknowledged")
    return count, size


async def drain(args: argparse.Namespace) -> dict[str, Any]:
    """The ingest stage in this process until it has been handed every message."""
    import logging

    from monitor.app.config import load_settings
    from monitor.app.sidecar import Sidecar

    logging.basicConfig(level=logging.ERROR)
    bound = args.bound_mb * 1024 * 1024
    settings = load_settings(
        None,
        {
            "kafka": {
                "bootstrap_servers": args.bootstrap,
                "topic": args.topic,
                "group_id": f"memory-bench-{os.getpid()}",
                "auto_offset_reset": "earliest",
                "max_message_bytes": 2 * args.message_bytes + (1 << 20),
            },
            "assembly": {
                "timeout_seconds": 3600,
                "max_open_traces": 10_000_000,  # the byte bound is the one measured
                "max_open_bytes": bound,
            },
            "sampling": {"rate": 0.0, "min_per_window": 0},
            "judge": {"backend": "none"},
            "results": {"file": None, "topic": None},
            "pipeline": {"role": "ingest"},
        },
    )
    sidecar = Sidecar(settings)
    ingest = sidecar.ingest
    assert ingest is not None
    stop = asyncio.Event()
    seen = 0
    most_open = 0
    process = ingest._process

    async def counting(batch: Any) -> None:
        nonlocal seen, most_open
        await process(batch)
        seen += sum(len(v) for v in batch.values())
        most_open = max(most_open, ingest.assembler.open_bytes)
        if seen >= args.expect_messages:
            stop.set()

    ingest._process = counting  # type: ignore[method-assign]
    t0 = time.monotonic()
    task = asyncio.create_task(sidecar.run(stop))
    try:
        await asyncio.wait_for(stop.wait(), timeout=args.timeout)
    except TimeoutError:
        stop.set()
    open_bytes, open_traces = ingest.assembler.open_bytes, ingest.assembler.open_traces
    rejected = {
        s.labels["reason"]: s.value
        for m in sidecar.metrics.registry.collect()
        for s in m.samples
        if s.name == "ragmon_rejected_total" and s.value
    }
    await asyncio.wait_for(task, timeout=120)
    return {
        "complete": seen >= args.expect_messages,
        "messages": seen,
        "seconds": time.monotonic() - t0,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bound_mib": args.bound_mb,
        "most_open_bytes_mib": most_open / 2**20,
        "open_bytes_mib": open_bytes / 2**20,
        "open_traces": open_traces,
        "rejected": rejected,
    }


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    from monitor.demo.broker import EmbeddedBroker

    topic = f"memory-bench-{os.getpid()}"
    with EmbeddedBroker() as broker:
        args.bootstrap, args.topic = broker.bootstrap_servers, topic
        t0 = time.monotonic()
        count, size = asyncio.run(fill(args))
        _say(f"filled {topic}: {count:,} messages, {size / 1e6:,.0f} MB in {time.monotonic() - t0:.0f} s")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            *sys.argv[1:],
            "--role",
            "sidecar",
            "--bootstrap",
            broker.bootstrap_servers,
            "--topic",
            topic,
            "--expect-messages",
            str(count),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 180, check=False)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise RuntimeError(f"sidecar failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result.update(
        command=shlex.join(["python", "bench/memory.py", *sys.argv[1:]]),
        spans=args.spans,
        message_mb=size / count / 1e6,
        over_bound_mib=result["peak_rss_mib"] - args.bound_mb,
        goal_ok=result["peak_rss_mib"] <= args.bound_mb + 150,
    )
    return result


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def held_by(spans_per_trace: int, spans: int, how: str) -> tuple[int, int, int]:
    """Bytes held (tracemalloc's count, or the process's RSS growth) by `spans` spans of this
    workload's in open traces of `spans_per_trace` spans each, the messages not counted; the
    open traces and the spans kept."""
    import gc
    import tracemalloc

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from monitor.ingest.assemble import Assembler
    from monitor.ingest.config import AssemblyConfig
    from monitor.ingest.decode import decode
    from monitor.kafka.config import Encoding
    from monitor.kafka.offsets import MessageRef

    args = parse_args(["--spans", str(spans), "--spans-per-message", "500", "--message-bytes", "200000"])
    args.big_trace_spans = 0
    values = []
    for _, value in messages(args):
        req = ExportTraceServiceRequest()
        req.ParseFromString(value)
        run = req.resource_spans[0].scope_spans[0].spans
        for i, sp in enumerate(run):  # runs of `spans_per_trace` spans share a trace id
            sp.trace_id = run[i - i % spans_per_trace].trace_id
        values.append(req.SerializeToString())
    asm = Assembler(AssemblyConfig(timeout_seconds=3600, max_open_traces=10**8, max_open_bytes=1 << 40))
    kept = 0
    gc.collect()
    if how == "tracemalloc":
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if how == "tracemalloc" else _rss()
    for offset, value in enumerate(values):
        decoded = decode(value, Encoding.OTLP_PROTO, time.time_ns(), for_assembly=True)
        kept += len(decoded.spans)
        asm.add_spans(decoded.spans, MessageRef("p0", offset), len(value), 0.0, [], decoded.others)
        del decoded
    gc.collect()
    total = (tracemalloc.get_traced_memory()[0] if how == "tracemalloc" else _rss()) - base
    tracemalloc.stop()
    return total, asm.open_traces, kept


def measure_costs() -> dict[str, Any]:
    """Bytes held per open trace and per kept span besides the messages (see the docstring):
    tracemalloc's count (the bytes asked for), and RSS growth (with the allocator's rounding and
    spare room: what the goal measures), each run in a fresh process."""
    from monitor.ingest.assemble import ASSEMBLER, SPAN_COST, TRACE_COST
    from monitor.ingest.decode import OTLP_PROTO_DECODER

    out: dict[str, Any] = {"assembler": ASSEMBLER, "decoder": OTLP_PROTO_DECODER}
    for how in ("tracemalloc", "rss"):
        runs = []
        for per in (1, 10):
            cmd = [sys.executable, os.path.abspath(__file__), "--costs-of", f"{per},100000,{how}"]
            runs.append(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))
        (h1, t1, s1), (h2, t2, s2) = runs
        per_span = (h2 - h1 * t2 / t1) / (s2 - s1 * t2 / t1)  # held = traces * T + spans * S
        out[how] = {
            "one_span_traces": {"traces": t1, "held_bytes": h1},
            "ten_span_traces": {"traces": t2, "held_bytes": h2},
            "per_trace_bytes": round((h1 - s1 * per_span) / t1),
            "per_span_bytes": round(per_span),
        }
    out["charged"] = {"TRACE_COST": TRACE_COST, "SPAN_COST": SPAN_COST}
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spans", type=int, default=1_000_000)
    p.add_argument("--message-bytes", type=int, default=1_000_000)
    p.add_argument("--spans-per-message", type=int, default=1000)
    p.add_argument("--big-trace-spans", type=int, default=50_000)
    p.add_argument("--bound-mb", type=int, default=256, help="assembly.max_open_bytes, MiB")
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--seed", type=int, default=24)
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--json", metavar="FILE", help="write the figures to FILE")
    p.add_argument(
        "--measure-costs", action="store_true", help="measure TRACE_COST and SPAN_COST (no broker)"
    )
    p.add_argument("--role", choices=("sidecar",), help=argparse.SUPPRESS)
    p.add_argument("--costs-of", help=argparse.SUPPRESS)  # spans a trace,spans,how: one run of the above
    p.add_argument("--bootstrap", help=argparse.SUPPRESS)
    p.add_argument("--topic", help=argparse.SUPPRESS)
    p.add_argument("--expect-messages", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.role == "sidecar":
        print(json.dumps(asyncio.run(drain(args))))
        return
    if args.costs_of:
        per, n, how = args.costs_of.split(",")
        print(json.dumps(held_by(int(per), int(n), how)))
        return
    if args.measure_costs:
        print(json.dumps(measure_costs(), indent=2))
        return
    result = orchestrate(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
