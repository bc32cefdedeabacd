"""Print a Markdown summary of a compat capture: per trace (in start order, labelled with the
Expected line whose query string occurs in the trace's attributes), the span tree with kinds and
attribute keys/values.

    python -m tests.compat.summarize_capture tests/compat/captures/<module>.otlp > <module>.md
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.compat.apps.harness import read_capture

MAX = 120


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else None


def _short(x: Any) -> str:
    s = x if isinstance(x, str) else json.dumps(x)
    s = s.replace("\n", "\\n")
    return s if len(s) <= MAX else s[: MAX - 1] + "…"


def load(path: Path) -> list[dict[str, Any]]:
    spans = []
    for body in read_capture(path):
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(
                        {
                            "trace": s.trace_id.hex(),
                            "id": s.span_id.hex(),
                            "parent": s.parent_span_id.hex(),
                            "name": s.name,
                            "scope": ss.scope.name,
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                            "status": s.status.code,
                            "attrs": {kv.key: _value(kv.value) for kv in s.attributes},
                            "events": [e.name for e in s.events],
                        }
                    )
    return spans


def main() -> None:
    path = Path(sys.argv[1])
    expected_path = path.with_suffix(".expected.jsonl")
    expected = (
        [json.loads(line) for line in expected_path.read_text().splitlines() if line.strip()]
        if expected_path.exists()
        else []
    )
    spans = load(path)
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in spans:
        by_trace[s["trace"]].append(s)
    traces = sorted(by_trace.values(), key=lambda ss: min(s["start"] for s in ss))
    print(f"# {path.name}\n")
    print(f"{len(spans)} spans in {len(traces)} traces; {len(expected)} Expected lines.\n")
    for i, ts in enumerate(traces):
        blob = json.dumps([s["attrs"] for s in ts])
        hits = [e for e in expected if e["query"] and json.dumps(e["query"])[1:-1] in blob]
        if hits:
            label = " — " + ", ".join(f"style `{e['style']}` query {e['query']!r}" for e in hits)
        else:
            label = " — no Expected query in any attribute (index build / not a request)"
        ids = {s["id"] for s in ts}
        roots = [s for s in ts if not s["parent"] or s["parent"] not in ids]
        print(f"## Trace {i + 1}{label}\n")
        for r in roots:
            if r["parent"]:
                print(f"(span {r['name']} has parent {r['parent']} that was never exported)\n")
        children: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for s in ts:
            children[s["parent"]].append(s)

        def show(s: dict[str, Any], depth: int, children: dict[str, Any] = children) -> None:
            kind = s["attrs"].get("openinference.span.kind") or s["attrs"].get("traceloop.span.kind")
            dur = (s["end"] - s["start"]) / 1e6
            print(
                f"{'  ' * depth}- **{s['name']}** kind={kind} scope={s['scope']} "
                f"status={s['status']} dur={dur:.2f}ms" + (f" events={s['events']}" if s["events"] else "")
            )
            for k, v in sorted(s["attrs"].items()):
                print(f"{'  ' * depth}    - `{k}`: {_short(v)}")
            for c in sorted(children[s["id"]], key=lambda c: c["start"]):
                show(c, depth + 1)

        for r in sorted(roots, key=lambda r: r["start"]):
            show(r, 0)
        print()


if __name__ == "__main__":
    main()
