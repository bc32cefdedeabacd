"""Decorator overhead: a traced RAG request vs the same request undecorated, in the same run.

One request = a handler calling a retriever (k passages of the bundled corpus, ~0.5 KB each) and a
generator; traced, that is three spans (CHAIN, RETRIEVER, LLM) with their OpenInference attributes,
the default content policy (default redactor, 8 KiB limit) and a BatchSpanProcessor feeding a
no-op exporter, so what is measured is everything the service's own thread pays and nothing of
the network. The function bodies only return precomputed values, so the difference is the
instrumentation's cost alone.

Rounds alternate baseline and traced blocks of `--calls` requests; per round the overhead is
(traced - baseline) / calls; the figure is the median over rounds, in µs per request. Also shown:
the same with redaction off, and with tracing disabled (the pass-through path).

Goal (issue 6): median overhead <= 50 µs per traced request.

    python bench/instrument.py
    python bench/instrument.py --rounds 50 --calls 2000 --json instrument.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from monitor.demo.workload import load_corpus
from monitor.instrument import (
    ContentPolicy,
    configure,
    shutdown,
    trace_generator,
    trace_request,
    trace_retriever,
)

GOAL_US = 50.0


class NoopExporter(SpanExporter):
    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def make_request(k: int) -> tuple[Callable[[str], Any], Callable[[str], Any], str]:
    """(undecorated handler, decorated handler, query) with identical bodies."""
    corpus = load_corpus()
    q = next(q for q in corpus.questions if q.answerable)
    chunks = list(corpus.chunks.values())[:k]
    hits = [{"id": c.id, "content": c.text, "score": 10.0 - i} for i, c in enumerate(chunks)]
    answer = " ".join(q.evidence[:2]) or q.reference_answer

    def retrieve(query: str, k: int) -> list[dict[str, Any]]:
        return hits

    def generate(query: str, hits: list[dict[str, Any]]) -> str:
        return answer

    def handle(query: str) -> dict[str, Any]:
        found = retrieve(query, k)
        return {"answer": generate(query, found), "chunks": found}

    t_retrieve = trace_retriever(name="rag.retrieve")(retrieve)
    t_generate = trace_generator(name="rag.generate", model="bench-model")(generate)

    @trace_request(name="rag.request", query_type="lookup")
    def t_handle(query: str) -> dict[str, Any]:
        found = t_retrieve(query, k)
        return {"answer": t_generate(query, found), "chunks": found}

    return handle, t_handle, q.query


def make_floor(k: int, tracer: Any) -> Callable[[str], Any]:
    """The same three spans and attributes written by hand with the bare SDK: what any
    OpenTelemetry instrumentation of this request pays, the decorators' layer excluded."""
    from opentelemetry import trace as trace_api
    from opentelemetry.context import attach, detach

    corpus = load_corpus()
    chunks = list(corpus.chunks.values())[:k]
    docs: dict[str, Any] = {}
    for i, c in enumerate(chunks):
        docs[f"retrieval.documents.{i}.document.id"] = c.id
        docs[f"retrieval.documents.{i}.document.content"] = c.text
        docs[f"retrieval.documents.{i}.document.score"] = 10.0 - i

    def floor(query: str) -> None:
        root = tracer.start_span(
            "rag.request",
            attributes={"openinference.span.kind": "CHAIN", "input.value": query, "rag.query_type": "lookup"},
        )
        t0 = attach(trace_api.set_span_in_context(root))
        ret = tracer.start_span(
            "rag.retrieve", attributes={"openinference.span.kind": "RETRIEVER", "input.value": query}
        )
        t1 = attach(trace_api.set_span_in_context(ret))
        detach(t1)
        ret.set_attributes(docs)
        ret.end()
        gen = tracer.start_span(
            "rag.generate", attributes={"openinference.span.kind": "LLM", "llm.model_name": "m"}
        )
        t2 = attach(trace_api.set_span_in_context(gen))
        detach(t2)
        gen.set_attributes(
            {"llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": "a"}
        )
        gen.end()
        detach(t0)
        root.set_attributes({"output.value": "a"})
        root.end()

    return floor


def per_call_us(fn: Callable[[str], Any], query: str, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(query)
    return (time.perf_counter() - t0) / calls * 1e6


def measure(fns: dict[str, Callable[[str], Any]], query: str, rounds: int, calls: int) -> dict[str, float]:
    """Per round, one block of each function in turn (so drift hits all alike); medians of rounds.

    ``{name}_us`` is the time per call; ``{name}_overhead_us`` the per-round difference to "base".
    """
    for _ in range(max(1, calls // 10)):  # warm caches, key tables, the BSP thread
        for fn in fns.values():
            fn(query)
    per: dict[str, list[float]] = {name: [] for name in fns}
    gc.collect()
    for _ in range(rounds):
        for name, fn in fns.items():
            per[name].append(per_call_us(fn, query, calls))
    out: dict[str, float] = {}
    for name, xs in per.items():
        out[f"{name}_us"] = statistics.median(xs)
        if name != "base":
            diffs = sorted(x - b for x, b in zip(xs, per["base"], strict=True))
            out[f"{name}_overhead_us"] = statistics.median(diffs)
            out[f"{name}_overhead_p90_us"] = diffs[int(0.9 * (len(diffs) - 1))]
    if "traced" in per and "floor" in per:
        out["layer_us"] = statistics.median(t - f for t, f in zip(per["traced"], per["floor"], strict=True))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--calls", type=int, default=1000, help="requests per timed block")
    p.add_argument("--k", type=int, default=4, help="retrieved passages per request")
    p.add_argument("--json", metavar="FILE", help="write the figures to FILE")
    args = p.parse_args(argv)

    base, traced, query = make_request(args.k)
    results: dict[str, Any] = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "python": platform.python_version(),
        "rounds": args.rounds,
        "calls": args.calls,
        "k": args.k,
    }
    for label, policy in (("default", ContentPolicy()), ("no_redaction", ContentPolicy(redact=None))):
        exporter = NoopExporter()
        inst = configure("bench", exporter=exporter, content=policy)
        assert inst.provider is not None
        floor = make_floor(args.k, inst.provider.get_tracer("bench"))
        fns = (
            {"base": base, "traced": traced, "floor": floor}
            if label == "default"
            else {"base": base, "traced": traced}
        )
        results[label] = measure(fns, query, args.rounds, args.calls)
        inst.force_flush()
        results[label]["spans_exported"] = exporter.spans
        results[label]["spans_dropped"] = inst.stats.snapshot()["dropped"]
        shutdown()
    configure("bench", enabled=False)
    results["disabled"] = measure({"base": base, "traced": traced}, query, args.rounds, args.calls)
    shutdown()

    d = results["default"]
    verdict = "met" if d["traced_overhead_us"] <= GOAL_US else "MISSED"
    print(f"command: {results['command']}")
    print(f"k={args.k}, {args.rounds} rounds x {args.calls} requests, Python {results['python']}")
    print(f"baseline (undecorated)          {d['base_us']:8.2f} µs / request")
    print(f"traced, 3 spans, default policy {d['traced_us']:8.2f} µs / request")
    print(
        f"overhead (median)               {d['traced_overhead_us']:8.2f} µs / request "
        f"(p90 {d['traced_overhead_p90_us']:.2f}; goal <= {GOAL_US:.0f}: {verdict})"
    )
    print(f"  of which the bare SDK         {d['floor_overhead_us']:8.2f} µs (the same 3 spans by hand)")
    print(f"  of which the decorators       {d['layer_us']:8.2f} µs (traced - bare SDK)")
    print(
        f"overhead, redaction off         {results['no_redaction']['traced_overhead_us']:8.2f} µs / request"
    )
    print(f"overhead, tracing disabled      {results['disabled']['traced_overhead_us']:8.2f} µs / request")
    print(f"spans exported {d['spans_exported']}, dropped {d['spans_dropped']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
