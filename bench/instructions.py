"""Instructions a message of the ingest stage (`IngestStage._process`, as `ingest.py --stage-only`
drives it), counted by callgrind: a figure the machine's load does not move, for holding a change
to the hot path against the tree before it.

    python bench/instructions.py --workload span1 --before DIR

runs this tree's stage and DIR's (a checkout with its C extensions built in place) each under
`valgrind --tool=callgrind`, collecting only inside the measured batches (`operator.call` wraps
them, a C function nothing else here calls: `builtin_eval`, used before, also caught the ~420
`typing` forward-reference evaluations of the imports, ~20 % of the count; a warm-up batch of
other traces first, so first label series are not counted),
and prints both counts a message and their ratio. `--child` is the process callgrind runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

WARMUP = 200


def child(args: argparse.Namespace) -> None:
    sys.path.insert(0, os.getcwd())
    from aiokafka import TopicPartition

    from bench.ingest import sidecar_overrides, trace_messages_for
    from monitor.app.config import load_settings
    from monitor.app.sidecar import ingest_stage, tune_gc
    from monitor.contracts.metrics import Metrics
    from monitor.kafka.producer import KafkaOutput

    ns = argparse.Namespace(
        workload=args.workload, traces=args.traces + WARMUP, quick=False, seed=args.seed, mode="per_trace"
    )
    pairs = list(trace_messages_for(ns))
    msgs = [SimpleNamespace(offset=i, key=k, value=v) for i, (k, v) in enumerate(pairs)]
    ns.variant, ns.bootstrap, ns.topic, ns.group = "off", "127.0.0.1:9", "instructions", "instructions"
    for name in ("encoding", "partitions", "sampling"):
        setattr(ns, name, {"encoding": "otlp_proto", "partitions": 1, "sampling": "off"}[name])
    warm = len(msgs) * WARMUP // (args.traces + WARMUP)

    async def setup() -> tuple[Any, Any]:
        settings = load_settings(None, sidecar_overrides(ns))
        stage = ingest_stage(settings, Metrics(), KafkaOutput(settings.kafka))
        tp = TopicPartition(ns.topic, 0)
        stage.tracker.assign([tp])
        tune_gc()
        for i in range(0, warm, 2000):
            await stage._process({tp: msgs[i : min(i + 2000, warm)]})
        return stage, tp

    loop = asyncio.new_event_loop()
    stage, tp = loop.run_until_complete(setup())
    measured = msgs[warm:]

    def batches() -> None:
        for i in range(0, len(measured), 2000):
            loop.run_until_complete(stage._process({tp: measured[i : i + 2000]}))

    n = len(measured)
    operator.call(batches)  # collected by callgrind (--toggle-collect=_operator_call)
    print(json.dumps({"messages": n}))


def count(tree: Path, args: argparse.Namespace, name: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = (args.keep or Path(tmp)) / f"callgrind.{name}.out"
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=_operator_call",
            f"--callgrind-out-file={out}",
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "--workload",
            args.workload,
            "--traces",
            str(args.traces),
            "--seed",
            str(args.seed),
        ]
        run = subprocess.run(
            cmd, cwd=tree, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}
        )
        if run.returncode:
            sys.exit(run.stderr[-3000:])
        n = json.loads(run.stdout.strip().splitlines()[-1])["messages"]
        totals = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M)
        assert totals is not None
        return int(totals.group(1)) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=("rag3", "span1", "mix"), default="span1")
    p.add_argument("--traces", type=int, default=2000)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--before", type=Path, help="a checkout of the earlier tree, extensions built in place")
    p.add_argument("--keep", type=Path, help="keep the callgrind files here (callgrind_annotate reads them)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    here = Path(__file__).resolve().parent.parent
    after = count(here, args, "after")
    result: dict[str, Any] = {
        "workload": args.workload,
        "traces": args.traces,
        "instructions_per_msg": round(after),
    }
    if args.before is not None:
        before = count(args.before, args, "before")
        result |= {"before": round(before), "after_over_before": round(after / before, 4)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
