"""Instructions a message of the ingest stage (`IngestStage._process`, as `ingest.py --stage-only`
drives it), counted by callgrind: a figure the machine's load does not move, for holding a change
to the hot path against the tree before it, and for the guard `make bench-guard` runs.

    python bench/instructions.py --workloads span1,mix --before DIR
    python bench/instructions.py --guard            # against bench/guard_reference.json
    python bench/instructions.py --write-reference  # after a change that is meant to cost

One process under `valgrind --tool=callgrind` runs every workload: the workload's messages, made
here once by this tree's generator (so every tree reads the same bytes), go through a fresh stage,
a warm-up batch of other traces first (first label series are not counted), then the measured
batches inside `operator.call`, a C function nothing else here calls: callgrind collects only
inside it (`--toggle-collect`; `builtin_eval`, used before, also caught the ~420 `typing`
forward-reference evaluations of the imports) and dumps after each (`--dump-after`), one count a
workload. The stage's clocks are the bench's, a second later each batch, so that every measured
trace is emitted (its grace passed) and counted inside the window, however slowly callgrind runs.
`DIR` is a checkout of another revision with its C extensions built in place; trees from before
the stages took their own sections (1ca5d22) build theirs the old way.

Workloads: `span1`, `mix`, `rag3` as in bench/ingest.py, sampling off; `mix_on`, the production
mix with sampling on (bench/ingest.py's `on`: rate 0.05, the floor, `low_score_threshold` 0.7),
each sampled record encoded and produced through the real aiokafka batch builder to a producer
whose `send_batch` acknowledges at once (no broker).

The count moves with the Python build and the CPU (glibc picks its string functions by CPU), so
the same process also counts `calibration()`, a fixed pure-Python loop of the interpreter work the
stage does (attribute and dict access, small objects, strings, calls); the guard compares each
workload's instructions a message *over the calibration's* with the reference's, and prints the
raw ratio beside it. Each count is split by where it ran: the three extensions, the interpreter,
libc (allocation, copies), the rest.

The guard (`make bench-guard`, ~20 s after its set-up) fails when a workload's calibrated ratio
is above 1.08. `--plant 0.1` adds, inside the measured batches, calibration rounds worth 10 % of
the reference's instructions a message: what a 10 % slower stage looks like to it
(tests/test_bench_guard.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import operator
import os
import pickle
import platform
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "bench" / "guard_reference.json"
WARMUP = 200  # traces through the stage before counting
BATCH = 2000  # messages a `_process` call, as the consumer hands them over
WORKLOADS = {
    "span1": ("span1", "off"),
    "mix": ("mix", "off"),
    "rag3": ("rag3", "off"),
    "mix_on": ("mix", "on"),
}
THRESHOLD = 0.08  # the guard fails a workload costing more than this over the reference
CALIBRATION_ROUNDS = 20_000
COMPONENTS = ("_wire", "_assembly", "_accounting", "interpreter", "libc", "other")


class _Slot:
    __slots__ = ("count", "name", "total")

    def __init__(self, name: str) -> None:
        self.name, self.count, self.total = name, 0, 0.0


def calibration(rounds: int) -> int:
    """A fixed workload of the interpreter operations the stage's Python does, whose count scales
    with the build as the stage's does."""
    slots = [_Slot(f"s{i}") for i in range(16)]
    index: dict[tuple[str, str], _Slot] = {}
    out: list[str] = []
    h = 0
    for i in range(rounds):
        s = slots[i & 15]
        key = (s.name, "q" if i & 1 else "r")
        got = index.get(key)
        if got is None:
            got = index[key] = s
        got.count += 1
        got.total += i * 0.5
        text = f"{s.name}:{i}"
        if text.endswith("7"):
            out.append(text.upper())
        h = (h * 31 + len(text) + hash(key)) & 0xFFFFFFFF
        if len(out) > 64:
            out.clear()
    return h


def child(args: argparse.Namespace) -> None:
    """Under callgrind, in the tree measured (its directory first on `sys.path`)."""
    sys.path.insert(0, os.getcwd())
    from aiokafka import TopicPartition

    from monitor.app.config import load_settings
    from monitor.contracts.metrics import Metrics
    from monitor.kafka.producer import KafkaOutput

    try:
        from monitor.app.sidecar import tune_gc
    except ImportError:  # before 45b1dfd: monitor.run
        from monitor.run import tune_gc  # type: ignore[import-not-found,no-redef]
    try:
        from monitor.app.sidecar import ingest_stage
    except ImportError:  # before 1ca5d22 the stage took the whole settings

        def ingest_stage(settings: Any, metrics: Any, output: Any) -> Any:  # type: ignore[misc]
            from monitor.ingest.stage import IngestStage

            return IngestStage(settings, metrics, output)  # type: ignore[call-arg]

    with open(args.child, "rb") as f:
        plan = pickle.load(f)
    print("imported", flush=True)  # the parent turns callgrind's instrumentation on, then says go
    go = Path(args.child + ".go")
    while not go.exists():  # running, not blocked in a read: vgdb reaches it without ptrace
        time.sleep(0.01)
    clock = _Clock(plan["wall"])
    for module in ("monitor.ingest.stage", "monitor.kafka.delivery"):
        sys.modules[module].time = clock  # type: ignore[attr-defined]
    loop = asyncio.new_event_loop()
    tune_gc()
    counted: dict[str, int] = {}
    for name, work in plan["workloads"].items():
        msgs = [SimpleNamespace(offset=i, key=k, value=v) for i, (k, v) in enumerate(pickle.loads(work))]
        settings = load_settings(None, plan["overrides"][name])

        async def build(settings: Any = settings) -> Any:  # aiokafka wants a running loop
            output = KafkaOutput(settings.kafka)
            _acknowledge_at_once(output)
            return ingest_stage(settings, Metrics(), output)

        stage = loop.run_until_complete(build())
        tp = TopicPartition(settings.kafka.topic, 0)
        stage.tracker.assign([tp])
        warm = plan["warm"][name]

        def batches(
            msgs: list[Any], stage: Any = stage, tp: Any = tp, plant: float = plan["plant_rounds"][name]
        ) -> None:
            """`msgs` through the stage a batch a second, then a second more: every trace emitted
            (the grace passed), counted and its sample delivered."""
            for i in range(0, len(msgs), BATCH):
                clock.advance(1.0)
                batch = msgs[i : i + BATCH]
                loop.run_until_complete(stage._process({tp: batch}))
                if plant:  # the guard's own test: work a slower stage would do
                    calibration(round(plant * len(batch)))
            clock.advance(1.0)
            loop.run_until_complete(stage._process({}))
            for _ in range(3):
                loop.run_until_complete(asyncio.sleep(0))

        batches(msgs[:warm], plant=0.0)
        operator.call(batches, msgs[warm:])
        counted[name] = len(msgs) - warm
        del msgs, stage, batches
        gc.collect()
    operator.call(calibration, CALIBRATION_ROUNDS)
    print(json.dumps({"messages": counted}))


class _Clock:
    """The stage's clocks, moved by the bench a second a batch: what is due is then the same
    however slowly callgrind runs it."""

    def __init__(self, wall: float) -> None:
        self.wall, self.mono = wall, 1e6

    def time(self) -> float:
        return self.wall

    def time_ns(self) -> int:
        return int(self.wall * 1e9)

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def _acknowledge_at_once(output: Any) -> None:
    """Sampled records go through aiokafka's batch builder to a broker that acknowledges at once."""
    producer = output._producer

    async def partitions_for(topic: str) -> set[int]:
        return {0}

    async def send_batch(batch: Any, topic: str, *, partition: int) -> asyncio.Future[None]:
        batch.close()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    producer.partitions_for, producer.send_batch = partitions_for, send_batch


def plan_for(workloads: list[str], traces: int, seed: int) -> dict[str, Any]:
    """Each workload's messages (the warm-up's first) and settings, from this tree's bench."""
    sys.path.insert(0, str(ROOT))
    from bench.ingest import sidecar_overrides, trace_messages_for

    plan: dict[str, Any] = {"workloads": {}, "overrides": {}, "warm": {}, "plant_rounds": {}}
    for name in workloads:
        shape, variant = WORKLOADS[name]
        ns = argparse.Namespace(
            workload=shape, traces=traces + WARMUP, quick=False, seed=seed, mode="per_trace"
        )
        pairs = list(trace_messages_for(ns))
        ns.variant, ns.bootstrap, ns.topic, ns.group = variant, "127.0.0.1:9", "instructions", "instructions"
        ns.encoding = "otlp_proto"
        plan["workloads"][name] = pickle.dumps(pairs)  # loaded one at a time
        plan["warm"][name] = len(pairs) * WARMUP // (traces + WARMUP)
        plan["overrides"][name] = sidecar_overrides(ns)
        plan["plant_rounds"][name] = 0.0  # calibration rounds a message
    plan["wall"] = time.time()  # the stage's clock starts when the spans were made
    return plan


def components(dump: str) -> dict[str, int]:
    """A callgrind dump's instructions by the object they ran in (self cost: each instruction
    once, where it ran)."""
    names: dict[str, str] = {}
    by_object: dict[str, int] = {}
    obj, skip = "", False
    for line in dump.splitlines():
        if line[:1].isdigit() or line[:1] in "+-*":
            if skip:
                skip = False  # a call's inclusive cost, counted where it ran
                continue
            fields = line.split()
            by_object[obj] = by_object.get(obj, 0) + (int(fields[1]) if len(fields) > 1 else 0)
        elif line.startswith("ob="):
            m = re.match(r"ob=\((\d+)\)(?: (.*))?", line)
            obj = names.setdefault(m.group(1), m.group(2) or "") if m else line[3:]
        elif line.startswith("cob="):
            m = re.match(r"cob=\((\d+)\) (.*)", line)
            if m:
                names.setdefault(m.group(1), m.group(2))
        elif line.startswith("calls="):
            skip = True
    out = dict.fromkeys(COMPONENTS, 0)
    for path, n in by_object.items():
        base = os.path.basename(path)
        kind = next((c for c in COMPONENTS[:3] if base.startswith(c + ".")), None)
        if kind is None:
            if "python" in base:
                kind = "interpreter"
            elif base.startswith(("libc.", "libc-", "ld-linux", "libm.")):
                kind = "libc"
            else:
                kind = "other"
        out[kind] += n
    return out


def measure(
    tree: Path,
    workloads: list[str],
    traces: int,
    seed: int,
    plant: tuple[float, dict[str, Any]] | None = None,
    keep: Path | None = None,
) -> dict[str, Any]:
    """Instructions a message of each workload in `tree`, split by component, and the
    calibration's. `plant`: (share, reference): extra work in the measured batches, that share of
    the reference's instructions a message, as calibration rounds (the guard's own test); `keep`:
    a directory to keep the dumps in."""
    plan = plan_for(workloads, traces, seed)
    if plant is not None:
        share, ref = plant
        per_round = ref["calibration"] / CALIBRATION_ROUNDS
        for w in workloads:
            plan["plant_rounds"][w] = share * ref["workloads"][w]["instructions_per_msg"] / per_round
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "plan.pickle"
        work.write_bytes(pickle.dumps(plan))
        out = Path(tmp) / "callgrind.out"
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",  # the imports run ~4x faster uninstrumented
            "--collect-atstart=no",
            "--toggle-collect=_operator_call",
            "--dump-after=_operator_call",
            f"--callgrind-out-file={out}",
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(work),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}
        run = subprocess.Popen(
            cmd, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        assert run.stdout is not None
        if run.stdout.readline().strip() == "imported":
            on = ["callgrind_control", "--instr=on", str(run.pid)]
            done = subprocess.run(on, capture_output=True, text=True, timeout=120)
            if done.returncode:
                run.kill()
                sys.exit(f"callgrind_control could not turn instrumentation on: {done.stdout}{done.stderr}")
            Path(f"{work}.go").touch()
        stdout, stderr = run.communicate()
        if run.returncode:
            sys.exit(stderr[-3000:])
        counted = json.loads(stdout.strip().splitlines()[-1])["messages"]
        dumps = [Path(f"{out}.{i}").read_text() for i in range(1, len(workloads) + 2)]
        if keep is not None:  # callgrind_annotate reads them
            keep.mkdir(parents=True, exist_ok=True)
            for name, dump in zip([*workloads, "calibration"], dumps, strict=True):
                (keep / f"callgrind.{tree.name}.{name}.out").write_text(dump)
    result: dict[str, Any] = {"workloads": {}}
    for name, dump in zip([*workloads, "calibration"], dumps, strict=True):
        totals = re.search(r"^(?:summary|totals): (\d+)", dump, re.M)
        if totals is None or not int(totals.group(1)):
            sys.exit(f"callgrind counted nothing for {name}: was instrumentation on?")
        if name == "calibration":
            result["calibration"] = int(totals.group(1))
            continue
        n = counted[name]
        result["workloads"][name] = {
            "instructions_per_msg": round(int(totals.group(1)) / n),
            "by_component": {k: round(v / n) for k, v in components(dump).items()},
        }
    return result


def build() -> dict[str, str]:
    """What the counts depend on besides the code: the Python build and the machine."""
    valgrind = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "python": sys.version.split()[0],
        "compiler": platform.python_compiler(),
        "cflags": sysconfig.get_config_var("OPT") or "",
        "machine": platform.machine(),
        "valgrind": valgrind,
    }


def guard(args: argparse.Namespace) -> int:
    """Each workload's instructions a message over the calibration's against the reference's;
    1 when any is more than THRESHOLD over. Prints each workload's parts beside the reference's."""
    ref = json.loads(args.reference.read_text())
    workloads = list(args.workloads or ref["workloads"])
    t0 = time.monotonic()
    plant = (args.plant, ref) if args.plant else None
    now = measure(ROOT, workloads, ref["traces"], ref["seed"], plant)
    if build() != ref["build"]:
        print(f"the build differs from the reference's ({ref['build']}): compare the calibrated ratios")
    cal = now["calibration"] / ref["calibration"]
    print(f"calibration: {now['calibration']:,} instructions, {cal:.3f} of the reference's")
    print(f"{'workload':<8} {'part':<12} {'reference':>10} {'now':>10} {'now/ref':>8} {'calibrated':>10}")
    failed = []
    for w in workloads:
        r, n = ref["workloads"][w], now["workloads"][w]
        scaled = n["instructions_per_msg"] / r["instructions_per_msg"] / cal
        parts = [("total", r["instructions_per_msg"], n["instructions_per_msg"])]
        parts += [(k, r["by_component"][k], n["by_component"][k]) for k in COMPONENTS]
        for part, before, after in parts:
            ratio = f"{after / before:>8.3f}" if before else f"{'-':>8}"
            tail = f" {scaled:>10.3f}" if part == "total" else ""
            print(f"{w:<8} {part:<12} {before:>10,} {after:>10,} {ratio}{tail}")
        if scaled > 1 + THRESHOLD:
            failed.append(f"{w} {scaled:.3f}")
    print(f"{time.monotonic() - t0:.0f} s; a workload fails above {1 + THRESHOLD:.2f} calibrated")
    if failed:
        print("FAILED: " + ", ".join(failed))
        return 1
    print("ok")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--workloads", type=lambda s: s.split(","), help=f"comma-separated of {', '.join(WORKLOADS)}"
    )
    p.add_argument("--traces", type=int, default=400)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--before", type=Path, help="a checkout of the earlier tree, extensions built in place")
    p.add_argument("--guard", action="store_true", help="compare with --reference; exit 1 if over")
    p.add_argument("--plant", type=float, default=0.0, help="with --guard: plant this share of extra work")
    p.add_argument("--write-reference", action="store_true", help="measure and write --reference")
    p.add_argument("--reference", type=Path, default=REFERENCE, help="default: bench/guard_reference.json")
    p.add_argument("--keep", type=Path, help="keep the callgrind dumps here (callgrind_annotate reads them)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return 0
    if args.guard:
        return guard(args)
    workloads: list[str] = list(args.workloads or WORKLOADS)
    after = measure(ROOT, workloads, args.traces, args.seed, keep=args.keep)
    if args.write_reference:
        args.reference.write_text(
            json.dumps({"traces": args.traces, "seed": args.seed, "build": build(), **after}, indent=1) + "\n"
        )
    result: dict[str, Any] = {
        w: {"instructions_per_msg": after["workloads"][w]["instructions_per_msg"]} for w in workloads
    }
    if args.before is not None:
        before = measure(args.before.resolve(), workloads, args.traces, args.seed, keep=args.keep)
        for w in workloads:
            b = before["workloads"][w]["instructions_per_msg"]
            result[w] |= {"before": b, "after_over_before": round(result[w]["instructions_per_msg"] / b, 4)}
    print(json.dumps({"traces": args.traces, "calibration": after["calibration"], **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
