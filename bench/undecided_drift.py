"""How fast the drift stage sees a rise in the share of records the judge cannot decide (metric
`undecided`, docs/drift.md, "The undecided share"): the CUSUM of `monitor/drift/detector.py` with
the default policy (`DriftPolicy()`: `arl0`, `reference_records`, `min_effect.undecided`), fed 0/1
values at equal weights. Per (reference share → new share): in how many of `--runs` runs it alarms
within `--records` judged records after the reference, and the median delay (judged records
after the reference until the alarm). The first row, no change, is the false-alarm side.

    python bench/undecided_drift.py [--runs 40] [--records 20000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics

from monitor.drift.config import DriftPolicy
from monitor.drift.detector import Detector

SHIFTS = ((0.10, 0.10), (0.10, 0.15), (0.10, 0.20), (0.10, 0.30), (0.28, 0.40))


def delay(policy: DriftPolicy, p0: float, p1: float, records: int, rnd: random.Random) -> int | None:
    detector = Detector("undecided", policy)
    for _ in range(policy.reference_records):
        detector.observe(1.0, 1.0 if rnd.random() < p0 else 0.0)
    for i in range(records):
        if detector.observe(1.0, 1.0 if rnd.random() < p1 else 0.0):
            return i + 1
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--records", type=int, default=20_000, help="judged records a run, after the reference")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    policy = DriftPolicy()
    print("undecided share | alarmed runs | median delay (judged records)")
    for p0, p1 in SHIFTS:
        got = [
            d
            for s in range(args.runs)
            if (d := delay(policy, p0, p1, args.records, random.Random(args.seed * 1000 + s))) is not None
        ]
        median = f"{statistics.median(got):.0f}" if got else "-"
        print(f"{p0:.2f} -> {p1:.2f} | {len(got)}/{args.runs} | {median}")


if __name__ == "__main__":
    main()
