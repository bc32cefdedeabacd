"""How wide is kappa's interval for a given number of human labels? `rag-monitor calibrate` on the
public labelled QA data that bench/lexical_judge.py reads, at several label counts.

Labels: every case of bench/lexical_judge.py (a gold answer on its gold context, labelled faithful;
one-edit hallucinations of it on the same context, labelled not faithful), with the query type of
its source (SQuAD 2.0 lookup, ClapNQ abstractive, HotpotQA and MultiHop-RAG multi_hop). The offline
lexical judge judges every case once; then, for each label count, `--draws` random subsets of that
many labelled records are calibrated as `calibrate` does (`monitor.judge.calibrate.compare`, the
percentile bootstrap over records, `--resamples` resamples), and the table gives the mean kappa,
the mean width of its 95 % interval, the spread (standard deviation) of the kappa estimates across
subsets — what the interval should be about four of — and how often the interval held the kappa of
all the cases.

    python bench/calibration.py --data DIR                      # 50/100/200/400 labels
    python bench/calibration.py --data DIR --sizes 50,400 --draws 50
    python bench/calibration.py --data DIR --write-labels labels.jsonl   # for `rag-monitor calibrate`
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lexical_judge import DATA_ENV, Case, build, cases

from monitor.contracts.model import Judgement, RagRecord
from monitor.judge.calibrate import Labels, compare
from monitor.judge.lexical import LexicalJudge

QUERY_TYPE = {
    "squad2": "lookup",
    "clapnq": "abstractive",
    "hotpotqa": "multi_hop",
    "multihop_rag": "multi_hop",
}


def record(case: Case) -> RagRecord:
    r = case.record()
    r.trace_id = hashlib.sha256(f"{case.source}:{case.id}:{case.kind}:{case.answer}".encode()).hexdigest()[
        :32
    ]
    r.query_type = QUERY_TYPE[case.source]
    return r


def write_labels(path: Path, all_cases: list[Case]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for c in all_cases:
            line: dict[str, Any] = {
                "record": record(c).to_json_dict(),
                "labels": {"faithful": not c.hallucinated},
            }
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


async def judge_all(all_cases: list[Case]) -> list[Judgement]:
    judge = LexicalJudge()
    return [await judge.judge(record(c)) for c in all_cases]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, metavar="DIR", default=os.environ.get(DATA_ENV) or None)
    p.add_argument("--sizes", default="50,100,200,400", help="label counts, comma-separated")
    p.add_argument("--draws", type=int, default=20, help="random label sets per count")
    p.add_argument("--resamples", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--write-labels", type=Path, metavar="FILE", help="write every case as a labels file")
    args = p.parse_args(argv)
    if args.data is None:
        p.error(f"give --data DIR (or set {DATA_ENV})")
    all_cases = list(cases(build(args.data)))
    if args.write_labels:
        write_labels(args.write_labels, all_cases)
        print(f"{len(all_cases)} labelled records written to {args.write_labels}")
        return 0
    t0 = time.monotonic()
    judgements = asyncio.run(judge_all(all_cases))
    pairs = [(Labels(faithful=not c.hallucinated), j) for c, j in zip(all_cases, judgements, strict=True)]
    full = compare(pairs).checks["faithful"]
    print(
        f"{len(all_cases)} labelled records ({sum(not c.hallucinated for c in all_cases)} faithful), "
        f"judged in {time.monotonic() - t0:.0f} s; kappa over all of them {full.kappa:.3f} (faithful)"
    )
    print(
        f"{'labels':>7}{'kappa (mean)':>14}{'95% width':>11}{'sd of kappa':>13}{'4 x sd':>8}"
        f"{'covers all':>12}{'s/run':>7}"
    )
    rng = random.Random(args.seed)
    for size in (int(x) for x in args.sizes.split(",")):
        kappas, widths, covers, took = [], [], 0, 0.0
        for d in range(args.draws):
            subset = rng.sample(pairs, size)
            t = time.monotonic()
            r = compare(subset, resamples=args.resamples, seed=args.seed + d).checks["faithful"]
            took += time.monotonic() - t
            assert r.kappa is not None and r.interval is not None
            kappas.append(r.kappa)
            widths.append(r.interval[1] - r.interval[0])
            covers += r.interval[0] <= (full.kappa or 0.0) <= r.interval[1]
        sd = statistics.stdev(kappas)
        print(
            f"{size:>7}{statistics.mean(kappas):>14.3f}{statistics.mean(widths):>11.3f}{sd:>13.3f}"
            f"{4 * sd:>8.3f}{covers / args.draws:>12.0%}{took / args.draws:>7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
