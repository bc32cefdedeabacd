"""Golden replay throughput: N rows against a target that answers after a fixed latency.

The issue's goal: 50 rows against a 200 ms target in <= 2 s at concurrency 8. The floor is
ceil(50 / 8) x 200 ms = 1.4 s (seven waves); what is above it is the replay's own cost (HTTP
client, parsing, the lexical judge, scoring). The target is a threaded HTTP/1.1 server on loopback
that returns each row's relevant chunks from the bundled corpus and an extractive answer, so the
judge and the metrics do their real work.

    python bench/replay.py [--rows 50] [--latency 0.2] [--concurrency 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from monitor.demo.workload import REFUSAL, load_corpus
from monitor.golden import GoldenRow, run_replay


def _server(latency: float) -> ThreadingHTTPServer:
    corpus = load_corpus()
    by_query = {q.query: q for q in corpus.questions}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real service behind a pool

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            q = by_query[body["query"]]
            time.sleep(latency)
            ids = list(q.relevant_chunk_ids or q.related_chunk_ids)[: body["k"]]
            chunks = [
                {"id": i, "content": corpus.chunks[i].text, "score": 1.0 / (n + 1)} for n, i in enumerate(ids)
            ]
            answer = " ".join(q.evidence[:2]) if q.answerable else REFUSAL
            data = json.dumps({"answer": answer, "chunks": chunks}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128  # the default backlog of 5 drops concurrent connects (1 s SYN retry)

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def _once(rows: list[GoldenRow], url: str, concurrency: int) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    report = await run_replay(rows, url, k=5, concurrency=concurrency)
    return time.perf_counter() - t0, report.metrics["all"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=50)
    p.add_argument("--latency", type=float, default=0.2, help="target latency per request, seconds")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()

    questions = load_corpus().questions
    rows = [GoldenRow.model_validate(questions[i % len(questions)].golden_row()) for i in range(args.rows)]
    rows = [r.model_copy(update={"id": f"{r.id}#{i}"}) for i, r in enumerate(rows)]
    server = _server(args.latency)
    url = f"http://127.0.0.1:{server.server_address[1]}/query"
    try:
        times = []
        for _ in range(args.repeat):
            elapsed, overall = asyncio.run(_once(rows, url, args.concurrency))
            times.append(elapsed)
    finally:
        server.shutdown()
    floor = math.ceil(args.rows / args.concurrency) * args.latency
    print(
        f"replay of {args.rows} rows, target latency {args.latency * 1000:.0f} ms, "
        f"concurrency {args.concurrency}: "
        f"median {statistics.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f}; "
        f"floor {floor:.2f} s; runs {args.repeat})"
    )
    print(f"recall@5 {overall['recall_at_k']:.3f}, faithfulness {overall['faithfulness']:.3f} (sanity)")
    goal = 2.0 * args.rows / 50 * args.latency / 0.2
    ok = statistics.median(times) <= goal
    print(f"goal <= {goal:.2f} s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
