"""Review throughput in the terminal UI: records labelled a minute by a scripted reviewer.

A sanity check of the UI's responsiveness, not a claim about people: a reviewer reads, a script
does not. The script drives `rag-monitor review`'s app headless through textual's pilot at 80x24
over a queue of records judged by the offline judge (2-4 claims each, three chunks): per record one
key per claim, `a` (answerable), Enter (save); every save is a labels line written and fsynced.
It reports records a minute and the mean time from a key to its screen being drawn, beside the
pilot's own round trip for a key bound to nothing (the harness's share of it).

    python bench/review.py --records 200
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.results import ReviewLine, encode_result, result_line
from monitor.judge.lexical import LexicalJudge
from monitor.review.app import ReviewApp
from monitor.review.labels import LabelsFile
from monitor.review.queue import read_queue
from monitor.review.session import ReviewSession

CITIES = ["Oslo", "Bergen", "Tromsø", "Bodø", "Ålesund", "Stavanger", "Drammen", "Hamar"]


def _record(i: int, rng: random.Random) -> RagRecord:
    city = CITIES[i % len(CITIES)]
    year, staff = 1990 + rng.randrange(30), 10 + rng.randrange(90)
    facts = [
        f"The {city} office opened in {year}.",
        f"The {city} office has {staff} staff.",
        f"The {city} office is by the harbour.",
        f"The {city} office closes at 5 pm.",
    ]
    claims = rng.randrange(2, 5)
    answer = " ".join(
        f if rng.random() < 0.8 else f.replace(str(year), str(year + 1)) for f in facts[:claims]
    )
    chunks = [
        Chunk(f"c{i}-{k}", f"{fact} It was noted in the yearly report.", 0.9 - 0.1 * k)
        for k, fact in enumerate(facts[:3])
    ]
    return RagRecord(
        trace_id=f"{i + 1:032x}", span_id="00f067aa0ba902b7", service="svc",
        query=f"Tell me about the {city} office (#{i})", query_type="lookup", chunks=chunks, answer=answer,
    )  # fmt: skip


async def _queue(n: int, seed: int) -> bytes:
    rng, judge = random.Random(seed), LexicalJudge()
    review = {"reasons": ["uniform"], "uniform": True, "weight": 10.0, "queued_at": 1764600000.0}
    out = []
    for i in range(n):
        r = _record(i, rng)
        line = result_line(r, sampling_weight=1.0, query_type_source="span", judgement=await judge.judge(r))
        fields = {**line.model_dump(exclude_unset=True), "review": review}
        out.append(encode_result(ReviewLine.model_validate(fields)))
    return b"".join(out)


async def _label_all(session: ReviewSession) -> tuple[float, int, float]:
    """Seconds from the first key to the last record saved and drawn, the keys pressed, and the
    pilot's own round trip for a key (one bound to nothing, averaged over 50)."""
    app = ReviewApp(session)
    keys = 0
    async with app.run_test(size=(80, 24)) as pilot:
        start = time.perf_counter()
        for _ in range(50):
            await pilot.press("z")
        idle = (time.perf_counter() - start) / 50
        start = time.perf_counter()
        while session.line is not None:
            claims = len(session.line.claims or ())
            seq = ["s" if k % 3 else "n" for k in range(claims)] + ["a", "enter"]
            await pilot.press(*seq)
            keys += len(seq)
        await pilot.pause()
        return time.perf_counter() - start, keys, idle


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        queue, labels = Path(tmp) / "queue.jsonl", Path(tmp) / "labels.jsonl"
        queue.write_bytes(asyncio.run(_queue(args.records, args.seed)))
        elapsed, keys, idle = asyncio.run(_label_all(ReviewSession(read_queue(queue), LabelsFile(labels))))
        written = len(labels.read_text().splitlines())
    assert written == args.records, (written, args.records)
    print(f"{written} records labelled ({keys} keys) in {elapsed:.2f} s")
    print(f"records a minute: {written / elapsed * 60:.0f}")
    print(f"ms a key (handled and drawn): {elapsed / keys * 1000:.1f}, of which the pilot's own round trip")
    print(f"  (a key bound to nothing): {idle * 1000:.1f}")


if __name__ == "__main__":
    main()
