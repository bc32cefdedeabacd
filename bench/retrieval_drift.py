"""Label-free retrieval drift benchmark (`monitor/drift/retrieval.py`): false alarms on stable
traffic, detection delay of two retrieval failures, and the cost per record on the ingest path.

Simulated records of one slice, at the default policy (`alerts.drift.retrieval`):

- chunk count: 5 (80 %), 4 (8 %), 3 (5 %), 2 (3 %), 1 (2 %), 0 (2 %): a top-5 retriever with a
  score cut-off;
- top score: Normal(0.7, 0.1) clipped to [0, 1]; absent on records without chunks and on 3 % of
  the others (a retriever path that reports no scores).

Measured:

- false alarms per 10,000 stable records (`--runs` runs of `--stable` records after the reference),
  and the PSI seen on stable traffic (99.9th percentile and maximum over all checks) against the
  threshold, next to the χ² approximation's mean (1/n + 1/m)·(B − 1);
- detection delay, in records after the change, of (a) the retriever returning no chunks for 30 %
  of records, (b) top scores dropping by 0.2; the change comes once the window is full of stable
  records (`--runs` runs; missed = no alarm within 5,000 records);
- µs per record added to the ingest path: `RetrievalDriftMonitor.observe` (real Prometheus
  metrics) over pre-built records of six query types, every slice frozen and its window full, minus
  the same loop calling a no-op; best of `--repeat`.

    python bench/retrieval_drift.py                 # 20 x 100,000 stable records, 40 delay runs
    python bench/retrieval_drift.py --runs 5 --stable 20000
    python bench/retrieval_drift.py --set threshold=0.1 --set release=0.05   # another policy
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from monitor.contracts.metrics import Metrics
from monitor.drift import RetrievalDriftMonitor, RetrievalDriftPolicy
from monitor.drift.retrieval import SliceDrift

COUNTS = (5, 4, 3, 2, 1, 0)
COUNT_SHARE = (0.80, 0.08, 0.05, 0.03, 0.02, 0.02)
NO_SCORE = 0.03
Record = tuple[int, float | None]


def records(rng: random.Random, change: str | None = None) -> Iterator[Record]:
    """An endless stream of (chunk count, top score); `change` applies from the first record."""
    while True:
        if change == "zero_chunks" and rng.random() < 0.3:
            yield 0, None
            continue
        count = rng.choices(COUNTS, COUNT_SHARE)[0]
        if count == 0 or rng.random() < NO_SCORE:
            yield count, None
            continue
        score = rng.gauss(0.7, 0.1) - (0.2 if change == "score_drop" else 0.0)
        yield count, min(max(score, 0.0), 1.0)


def false_alarms(policy: RetrievalDriftPolicy, runs: int, n: int, seed: int) -> dict[str, object]:
    alarms = 0
    psis: dict[str, list[float]] = {"chunk_count": [], "top_score": []}
    bins: dict[str, int] = {}
    for r in range(runs):
        rng = random.Random(seed + r)
        d = SliceDrift(policy)
        stream = records(rng)
        for _ in range(policy.reference_records):
            d.observe(*next(stream))
        for f in d.features:
            bins[f.name] = len(f.ref)
        for _ in range(n):
            if d.observe(*next(stream)):
                for f in d.features:
                    if f.psi == f.psi:  # NaN until the window's minimum fill
                        psis[f.name].append(f.psi)
        alarms += sum(f.alarms for f in d.features)
    noise = 1 / policy.reference_records + 1 / policy.window_records
    out: dict[str, object] = {"per_10k": round(alarms / (runs * n) * 10_000, 4), "alarms": alarms}
    for name, values in psis.items():
        values.sort()
        out[name] = {
            "bins": bins[name],
            "psi_mean": round(statistics.fmean(values), 4),
            "chi2_mean": round(noise * (bins[name] - 1), 4),
            "psi_p999": round(values[int(0.999 * (len(values) - 1))], 4),
            "psi_max": round(values[-1], 4),
            "checks": len(values),
        }
    return out


def delays(policy: RetrievalDriftPolicy, change: str, runs: int, seed: int) -> dict[str, object]:
    found: dict[str, list[int]] = {"chunk_count": [], "top_score": [], "either": []}
    missed = 0
    for r in range(runs):
        rng = random.Random(seed + 10_000 + r)
        d = SliceDrift(policy)
        stable = records(rng)
        for _ in range(policy.reference_records + 2 * policy.window_records):
            d.observe(*next(stable))
        for f in d.features:  # a stable-traffic alarm is a false alarm, not a detection
            f.active = False
        changed = records(rng, change)
        first: dict[str, int] = {}
        for k in range(1, 5001):
            d.observe(*next(changed))
            for f in d.features:
                if f.active and f.name not in first:
                    first[f.name] = k
            if len(first) == 2:
                break
        if not first:
            missed += 1
            continue
        for name, k in first.items():
            found[name].append(k)
        found["either"].append(min(first.values()))
    out: dict[str, object] = {"runs": runs, "missed_within_5000": missed}
    for name, values in found.items():
        values.sort()
        out[name] = (
            {
                "median": statistics.median(values),
                "p90": values[int(0.9 * (len(values) - 1))],
                "n": len(values),
            }
            if values
            else None
        )
    return out


TYPES = ("lookup", "comparison", "multi_hop", "exact_match", "abstractive", "out_of_corpus")


def cost(policy: RetrievalDriftPolicy, n: int, repeat: int, seed: int) -> dict[str, float]:
    """µs per record of `observe` in steady state, net of the loop and the call itself."""
    rng = random.Random(seed)
    stream = records(rng)
    batch = [(TYPES[rng.randrange(len(TYPES))], *next(stream)) for _ in range(n)]
    monitor = RetrievalDriftMonitor(policy, Metrics().retrieval_drift)
    warm = (policy.reference_records + policy.window_records) * len(TYPES) * 2
    for i in range(warm):
        monitor.observe(*batch[i % n])

    def noop(query_type: str, chunk_count: int, top_score: float | None) -> None:
        pass

    def timed(fn: Callable[[str, int, float | None], None]) -> float:
        t = time.perf_counter()
        for qt, c, s in batch:
            fn(qt, c, s)
        return (time.perf_counter() - t) / n * 1e6

    observe = min(timed(monitor.observe) for _ in range(repeat))
    base = min(timed(noop) for _ in range(repeat))
    return {
        "observe_us": round(observe, 3),
        "noop_call_us": round(base, 3),
        "added_us": round(observe - base, 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20, help="runs of stable traffic; delay runs are twice this")
    p.add_argument("--stable", type=int, default=100_000, help="stable records a run, after the reference")
    p.add_argument("--records", type=int, default=200_000, help="records timed for the cost")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a policy setting")
    args = p.parse_args()
    policy = RetrievalDriftPolicy.model_validate(dict(kv.split("=", 1) for kv in args.set))
    out: dict[str, object] = {"policy": policy.model_dump()}
    out["false_alarms"] = false_alarms(policy, args.runs, args.stable, args.seed)
    print("false alarms", out["false_alarms"], flush=True)
    for change in ("zero_chunks", "score_drop"):
        out[f"delay/{change}"] = delays(policy, change, 2 * args.runs, args.seed)
        print(change, out[f"delay/{change}"], flush=True)
    out["cost"] = cost(policy, args.records, args.repeat, args.seed)
    print("cost", out["cost"], flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
