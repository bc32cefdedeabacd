"""Drift detection benchmark: false alarms and detection delay of the CUSUM detectors
(`monitor/drift.py`) against the fixed-threshold window alert peers use, on the same simulated
streams of judged records, with uneven sampling weights.

Streams: each judged record has an inclusion probability drawn from {0.5, 0.2, 0.05} (weights 2,
5, 20: priority-sampled suspicious records next to the base rate), and a value:

- hallucination: 0/1 with rate 0.05; the change raises it to 0.10;
- faithfulness: a per-answer score, Beta-distributed with mean 0.92 (sd ~0.15); the change lowers
  the mean to 0.87.

Each detector takes its reference from the first 500 records (as in production), then watches.

- false alarms per 10,000 stable judged records (`--stable` records a run, `--runs` runs);
- detection delay: judged records after the change until the alarm (`--runs` runs, the change at
  record 500 + 1,000), and how often it was missed within 5,000 records.

The window alert: the weighted mean of the last 200 judged records beyond the reference value +
the minimum effect (0.05 for hallucination, 0.03 for faithfulness), checked every record, with the
same reference. Goals (issue): < 1 false alarm per 10,000 at defaults; each change detected within
500 records of the slice.

    python bench/drift.py                   # 40 runs each
    python bench/drift.py --runs 10 --stable 20000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections import deque
from collections.abc import Callable, Iterator

from monitor.drift import Detector, DriftPolicy

WEIGHTS = (2.0, 5.0, 20.0)
WEIGHT_SHARE = (0.3, 0.4, 0.3)
WINDOW = 200
REFERENCE = 500


def stream(rng: random.Random, metric: str, change_at: int | None) -> Iterator[tuple[float, float]]:
    i = 0
    while True:
        changed = change_at is not None and i >= change_at
        w = rng.choices(WEIGHTS, WEIGHT_SHARE)[0]
        if metric == "hallucination":
            y = 1.0 if rng.random() < (0.10 if changed else 0.05) else 0.0
        else:
            mean = 0.87 if changed else 0.92
            k = 4.0  # Beta(mean*k, (1-mean)*k): sd ~0.15
            y = rng.betavariate(mean * k, (1 - mean) * k)
        yield w, y
        i += 1


class WindowAlert:
    """The peers' alert: the last `WINDOW` records' weighted mean past reference ± effect."""

    def __init__(self, metric: str, effect: float) -> None:
        self.metric = metric
        self.effect = effect
        self.ref: list[tuple[float, float]] = []
        self.base = 0.0
        self.window: deque[tuple[float, float]] = deque(maxlen=WINDOW)
        self.active = False

    def observe(self, w: float, y: float) -> bool:
        if len(self.ref) < REFERENCE:
            self.ref.append((w, y))
            if len(self.ref) == REFERENCE:
                self.base = sum(a * b for a, b in self.ref) / sum(a for a, _ in self.ref)
            return False
        self.window.append((w, y))
        if len(self.window) < WINDOW:
            return False
        mean = sum(a * b for a, b in self.window) / sum(a for a, _ in self.window)
        worse = mean - self.base if self.metric == "hallucination" else self.base - mean
        bad = worse > self.effect
        raised = bad and not self.active
        self.active = bad
        return raised


Factory = Callable[[str], Detector | WindowAlert]


def false_alarms(make: Factory, metric: str, runs: int, n: int, seed: int) -> float:
    alarms = 0
    for r in range(runs):
        rng = random.Random(seed + r)
        d = make(metric)
        s = stream(rng, metric, None)
        for _ in range(REFERENCE + n):
            w, y = next(s)
            alarms += d.observe(w, y)
    return alarms / (runs * n) * 10_000


def delays(make: Factory, metric: str, runs: int, seed: int) -> tuple[list[int], int]:
    found, missed = [], 0
    change = REFERENCE + 1000
    for r in range(runs):
        rng = random.Random(seed + 10_000 + r)
        d = make(metric)
        s = stream(rng, metric, change)
        for _ in range(change):  # alarms before the change are false alarms: reset them
            d.observe(*next(s))
        if isinstance(d, Detector):
            d.statistic, d.active = 0.0, False
        else:
            d.active = False
        for k in range(1, 5001):
            if d.observe(*next(s)):
                found.append(k)
                break
        else:
            missed += 1
    return found, missed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--stable", type=int, default=25_000, help="stable judged records a run")
    p.add_argument("--seed", type=int, default=11)
    args = p.parse_args()
    policy = DriftPolicy()
    makers: dict[str, Factory] = {
        "cusum": lambda m: Detector(m, policy),
        "window": lambda m: WindowAlert(m, policy.min_effect[m]),
    }
    out: dict[str, object] = {"arl0": policy.arl0, "threshold": round(policy.threshold, 3)}
    for name, make in makers.items():
        for metric in ("hallucination", "faithfulness"):
            fa = false_alarms(make, metric, args.runs, args.stable, args.seed)
            found, missed = delays(make, metric, args.runs, args.seed)
            out[f"{name}/{metric}"] = {
                "false_alarms_per_10k": round(fa, 3),
                "delay_median": statistics.median(found) if found else None,
                "delay_p90": sorted(found)[int(0.9 * (len(found) - 1))] if found else None,
                "missed_within_5000": missed,
                "runs": args.runs,
            }
            print(name, metric, out[f"{name}/{metric}"], flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
