"""Differential fuzzing of the compiled ingest extensions against their pure-Python twins.

Run on the sanitised build (`make fuzz`, or `make sanitize` and `$(SAN_ENV)` by hand, see the
Makefile), so that an out-of-bounds read, a use after free or undefined behaviour in `_wire.c`,
`_assembly.c` or `_accounting.c` aborts the run, and any difference in results is a finding.

Inputs are valid OTLP messages, made with opentelemetry-proto by the tests' generators (the
decoder tests' mixed RAG and production sample, the workload, the benchmark's production mix) and
here past each of `_wire.c`'s own limits (`MAX_DEPTH` levels of AnyValue nesting, `MAX_EVENT_SEGMENTS`
events, `MAX_SCOPES` scopes, `MAX_ATTRS` attributes, `MAX_INDEX` documents, `TRACE_SLOTS` traces,
the name cache, read from the source so they follow it) and up to 8 MB, each then mutated: bit
flips, byte edits, truncation, length fields corrupted or over-long, fields duplicated, deleted or
spliced in from another message (enclosing lengths fixed, so the message stays well-formed),
invalid UTF-8 in text, wire types and fixed values changed, messages concatenated. Each is checked:

  decode      `decode` on both paths, with and without `for_assembly`, protobuf (and `auto` for
              one in eight): the comparison of tests/ingest/decode_compare.py (`both`);
  feed        batches through `_wire.feed` (the ingest stage's loop) against the reference path's
              `decode(for_assembly=True)` of each message it takes, and a reason for where it stops;
  assemble    the decoded spans into both assemblers on small bounds (tests/ingest/test_assemble_compiled.py
              `Both`, which compares every call and the whole state), plus its random operations;
  hash        `_accounting.trace_fraction` against `blake2b_fraction`, and `looks_like_refusal`
              against `refusal_reference`, on text taken from the input;
  account     every `--account-every` inputs, two ingest stages (compiled accounting or not) fed
              tests/ingest/test_stage_accounting.py's traffic made hostile (more refs than the compiled
              path takes, repeated refs, extreme and non-float scores, huge times, long and
              non-ASCII ids, many chunks) must end in the same state.

A mismatch or an exception in a comparison is a finding: counted, its input saved under
bench/out/fuzz/, the first few printed. Exit 1 if any. `--require-sanitized` fails unless the
three extensions imported are the sanitised ones.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import random
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Appended, not prepended: the `monitor` on PYTHONPATH (the sanitised copy) must win.
sys.path.append(str(ROOT / "tests"))
sys.path.append(str(ROOT / "tests" / "ingest"))
sys.path.append(str(ROOT))

import decode_compare as dc  # noqa: E402
import test_assemble_compiled as tac  # noqa: E402
import test_stage_accounting as tsa  # noqa: E402
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Span, TracesData  # noqa: E402

from monitor.contracts.model import Chunk  # noqa: E402
from monitor.demo.workload import generate, trace_messages  # noqa: E402
from monitor.ingest import _accounting, _assembly, _wire, dialects  # noqa: E402
from monitor.ingest.assemble import SPAN_COST, TRACE_COST  # noqa: E402
from monitor.ingest.config import AssemblyConfig  # noqa: E402
from monitor.ingest.decode import Decoded  # noqa: E402
from monitor.ingest.sampler import blake2b_fraction, refusal_reference  # noqa: E402
from monitor.kafka.config import Encoding  # noqa: E402
from monitor.kafka.offsets import MessageRef  # noqa: E402

MB = 1 << 20
OUT = ROOT / "bench" / "out" / "fuzz"


def limits() -> dict[str, int]:
    """`_wire.c`'s structural limits, from its source."""
    src = (ROOT / "monitor" / "ingest" / "_wire.c").read_text()
    found = dict(re.findall(r"^#define (MAX_\w+|TRACE_SLOTS|STR_CACHE\w*) (\d+)", src, re.M))
    return {k: int(v) for k, v in found.items()}


def sanitized() -> list[str]:
    """Which of the three extensions are built with AddressSanitizer (its runtime among the
    library's own dependencies: an ordinary build has none)."""
    out = []
    for mod in (_wire, _assembly, _accounting):
        lib = ctypes.CDLL(mod.__file__)
        if hasattr(lib, "__asan_init") and hasattr(lib, "__ubsan_handle_add_overflow_abort"):
            out.append(mod.__name__)
    return out


# ---------------------------------------------------------------------------------------------
# seeds: valid messages


def _span(tid: int, sid: int, name: str, attrs: dict[str, Any], parent: int = 0) -> Span:
    sp = Span(
        trace_id=tid.to_bytes(16, "big"),
        span_id=sid.to_bytes(8, "big"),
        name=name,
        start_time_unix_nano=time.time_ns() - 10**9,
        end_time_unix_nano=time.time_ns(),
    )
    if parent:
        sp.parent_span_id = parent.to_bytes(8, "big")
    for k, v in attrs.items():
        sp.attributes.append(KeyValue(key=k, value=dc._any(v) if not isinstance(v, AnyValue) else v))
    return sp


def _message(spans: list[Span], *, scopes: int = 1) -> bytes:
    data = TracesData()
    rs = data.resource_spans.add()
    rs.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="svc")))
    per = max(1, -(-len(spans) // scopes))
    for i in range(scopes):
        ss = rs.scope_spans.add()
        ss.scope.name = f"scope-{i}"
        ss.spans.extend(spans[i * per : (i + 1) * per])
    return bytes(data.SerializeToString())


def _field(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + varint(len(body)) + body


def _nested(depth: int, leaf: str, kind: str) -> bytes:
    """An AnyValue `depth` arrays or key-value lists deep, as bytes: opentelemetry-proto's
    objects cannot hold what upb refuses to parse (past 100 levels)."""
    v = _field(0x0A, leaf.encode())
    for _ in range(depth):
        if kind == "array":
            v = _field(0x2A, _field(0x0A, v))  # AnyValue.array_value.values
        else:
            v = _field(0x32, _field(0x0A, _field(0x0A, b"k") + _field(0x12, v)))  # kvlist_value.values
    return v


def _with_attribute(spans: list[Span], key: str, value: bytes, *, resource: bool = False) -> bytes:
    """The message of `spans` with one more attribute, `key` = the AnyValue bytes `value`, on the
    first span or on the resource."""
    kv = _field(0x0A, key.encode()) + _field(0x12, value)
    body = spans[0].SerializeToString() + (b"" if resource else _field(0x4A, kv))
    span_fields = _field(0x12, body) + b"".join(_field(0x12, s.SerializeToString()) for s in spans[1:])
    res = _field(0x0A, _field(0x0A, _field(0x0A, b"service.name") + _field(0x12, _field(0x0A, b"svc"))))
    if resource:
        res = _field(0x0A, _field(0x0A, kv))
    return _field(0x0A, res + _field(0x12, span_fields))


ROOT_ATTRS = {"openinference.span.kind": "CHAIN", "input.value": "q?", "output.value": "a."}


def _rag(tid: int, extra: dict[str, Any] | None = None) -> list[Span]:
    """A root CHAIN, a retriever with two documents and an LLM span."""
    doc = "retrieval.documents.{}.document."
    return [
        _span(tid, 1, "rag", {**ROOT_ATTRS, **(extra or {})}),
        _span(
            tid,
            2,
            "retrieve",
            {
                "openinference.span.kind": "RETRIEVER",
                "input.value": "q?",
                doc.format(0) + "id": "d1",
                doc.format(0) + "content": "Paris is the capital.",
                doc.format(0) + "score": 0.9,
                doc.format(1) + "id": "d2",
                doc.format(1) + "content": "Lyon is not.",
                doc.format(1) + "score": 0.4,
            },
            parent=1,
        ),
        _span(tid, 3, "llm", {"openinference.span.kind": "LLM", "output.value": "Paris."}, parent=1),
    ]


def limit_seeds(lim: dict[str, int]) -> list[tuple[str, bytes]]:
    """Messages at, just past and far past each of `_wire.c`'s limits."""
    seeds: list[tuple[str, bytes]] = []
    depth = lim["MAX_DEPTH"]
    for d in (depth - 3, depth - 2, depth - 1, depth, depth + 1, depth + 4, 40, 120):
        for kind in ("array", "kvlist"):
            deep = _nested(d, "deep", kind)
            for key in ("input.value", "x.unread"):
                seeds.append((f"depth {d} {kind} {key}", _with_attribute(_rag(7), key, deep)))
            seeds.append(
                (f"depth {d} {kind} resource", _with_attribute(_rag(7), "service.name", deep, resource=True))
            )
            root = _span(7, 1, "rag", ROOT_ATTRS)
            ev = b"\x09" + (1).to_bytes(8, "little") + _field(0x12, b"gen_ai.content.prompt")
            ev += _field(0x1A, _field(0x0A, b"gen_ai.prompt") + _field(0x12, deep))
            seeds.append((f"depth {d} {kind} event", dc._wrap(root.SerializeToString() + _field(0x5A, ev))))
    events = lim["MAX_EVENT_SEGMENTS"]
    merged = sorted(dialects.MERGED_EVENTS)
    for n in (events - 1, events, events + 1, 4 * events):
        for name in (merged[0], "log"):
            root = _span(8, 1, "rag", ROOT_ATTRS)
            for i in range(n):
                ev = root.events.add(name=name, time_unix_nano=i)
                ev.attributes.append(KeyValue(key="gen_ai.prompt", value=AnyValue(string_value=f"p{i}")))
            seeds.append((f"{n} events {name}", _message([root])))
    scopes = lim["MAX_SCOPES"]
    for n in (scopes - 1, scopes, scopes + 1, 3 * scopes):
        spans = [s for t in range(n) for s in _rag(1000 + t)]
        seeds.append((f"{n} scopes", _message(spans, scopes=n)))
    attrs = lim["MAX_ATTRS"]
    for n in (attrs - 1, attrs, attrs + 1, 16 * attrs):
        extra = {f"llm.input_messages.{i}.message.content": f"m{i}" for i in range(n)}
        seeds.append((f"{n} attributes", _message(_rag(9, extra))))
        seeds.append((f"{n} unread attributes", _message(_rag(9, {f"x.{i}": i for i in range(n)}))))
    index = lim["MAX_INDEX"]
    for n in (index - 1, index, index + 1, 8 * index):
        docs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": "q"}
        for i in range(n):
            docs |= {
                f"retrieval.documents.{i}.document.id": f"d{i}",
                f"retrieval.documents.{i}.document.score": 1.0,
            }
        docs[f"retrieval.documents.{n * 3}.document.id"] = "far"
        seeds.append((f"{n} documents", _message([_span(10, 2, "retrieve", docs, parent=1)])))
    slots = lim["TRACE_SLOTS"]
    for n in (slots - 1, slots, slots + 1, 2 * slots + 1, 700):
        spans = []
        for t in range(n):  # a non-RAG trace each: the lean path's table of traces
            spans += [
                _span(5000 + t, 1, "GET /", {"http.method": "GET"}),
                _span(5000 + t, 2, "db", {}, parent=1),
            ]
            spans += [_span(5000 + t, 3, "db", {"db.system": "redis"}, parent=1)]
        seeds.append((f"{n} traces", _message(spans)))
    cache, cache_len = lim["STR_CACHE"], lim["STR_CACHE_MAX_LEN"]
    for n in (cache_len - 1, cache_len, cache_len + 1):
        seeds.append((f"name of {n}", _message([_span(11, 1, "n" * n, ROOT_ATTRS)])))
    names = [_span(12, 1 + i, f"name-{i}", {}, parent=1 if i else 0) for i in range(2 * cache + 3)]
    seeds.append((f"{len(names)} names", _message(names)))
    return seeds


def big_seeds() -> list[tuple[str, bytes]]:
    """Messages of up to 8 MB: one huge text, one huge document, and many spans."""
    text = "Paris is the capital of France. " * (7 * MB // 32)
    seeds = [("8 MB query", _message(_rag(20, {"input.value": text})))]
    retr = _rag(21)
    retr[1].attributes.append(
        KeyValue(key="retrieval.documents.0.document.content", value=AnyValue(string_value=text))
    )
    seeds.append(("8 MB document", _message(retr)))
    many = [s for t in range(13_000) for s in _rag(30_000 + t)]
    seeds.append(("many spans", _message(many, scopes=50)))
    return seeds


def base_seeds() -> list[tuple[str, bytes]]:
    from bench.ingest import ProductionMix

    seeds = [("sample", dc.SAMPLE_BYTES)]
    for mode in ("per_trace", "batched", "split"):
        seeds += [(f"workload {mode}", m.value) for m in generate(12, seed=5, mode=mode).messages]
    mix = ProductionMix(7).messages(trace_messages(6, seed=3))
    seeds += [("production mix", v) for _, v in mix]
    return seeds


# ---------------------------------------------------------------------------------------------
# the wire map and mutations


def varint(n: int) -> bytes:
    return dc._varint(n)


def read_varint(buf: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError
        b = buf[i]
        v |= (b & 0x7F) << shift
        i += 1
        shift += 7
        if not b & 0x80:
            return v, i


class Site:
    """One field of a message: where its tag, length and body lie, and its enclosing fields."""

    __slots__ = ("ancestors", "body", "end", "len_at", "tag_at", "wt")

    def __init__(self, tag_at: int, wt: int, len_at: int, body: int, end: int, ancestors: tuple[int, ...]):
        self.tag_at, self.wt, self.len_at, self.body, self.end = tag_at, wt, len_at, body, end
        self.ancestors = ancestors  # indexes into the site list, outermost first


def wire_map(buf: bytes) -> list[Site]:
    """Every field, recursing into length-delimited bodies that parse whole as messages."""
    sites: list[Site] = []

    def walk(start: int, end: int, ancestors: tuple[int, ...]) -> bool:
        i = start
        mine: list[tuple[int, int, int, int, int]] = []
        try:
            while i < end:
                tag_at = i
                tag, i = read_varint(buf, i)
                wt = tag & 7
                if tag >> 3 == 0:
                    return False
                if wt == 0:
                    _, i = read_varint(buf, i)
                    mine.append((tag_at, wt, i, i, i))
                elif wt in (1, 5):
                    i += 8 if wt == 1 else 4
                    mine.append((tag_at, wt, i, i, i))
                elif wt == 2:
                    len_at = i
                    n, i = read_varint(buf, i)
                    mine.append((tag_at, wt, len_at, i, i + n))
                    i += n
                else:
                    return False
        except ValueError:
            return False
        if i != end:
            return False
        for tag_at, wt, len_at, body, stop in mine:
            sites.append(Site(tag_at, wt, len_at, body, stop, ancestors))
            if wt == 2 and stop > body and len(ancestors) < 40:
                k = len(sites) - 1
                mark = len(sites)
                if not walk(body, stop, (*ancestors, k)):
                    del sites[mark:]
        return True

    walk(0, len(buf), ())
    return sites


def edit(buf: bytes, sites: list[Site], owners: tuple[int, ...], start: int, stop: int, new: bytes) -> bytes:
    """buf[start:stop] = new inside the fields `owners` (outermost first), their lengths fixed."""
    out = bytearray(buf)
    out[start:stop] = new
    delta = len(new) - (stop - start)
    for k in reversed(owners):  # innermost first: an outer length lies before an inner one
        s = sites[k]
        old = varint(s.end - s.body)
        fixed = varint(s.end - s.body + delta)
        out[s.len_at : s.len_at + len(old)] = fixed
        delta += len(fixed) - len(old)
    return bytes(out)


BAD_UTF8 = [b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xc0\xaf", b"\xff", b"\xe2\x82"]
BAD_LENGTHS = [0, 1, 2**31 - 1, 2**31, 2**32 + 1, 2**63, 2**64 - 1]


class Mutator:
    def __init__(self, seeds: list[tuple[str, bytes]], rng: random.Random) -> None:
        self.seeds = seeds
        self.rng = rng
        self.maps: dict[int, list[Site]] = {}

    def sites(self, k: int) -> list[Site]:
        if k not in self.maps:
            self.maps[k] = wire_map(self.seeds[k][1])
        return self.maps[k]

    def structural(self, k: int) -> tuple[str, bytes]:
        """One mutation that needs the wire map of seed k."""
        rng = self.rng
        buf = self.seeds[k][1]
        sites = self.sites(k)
        if not sites:
            return "none", buf
        s = sites[rng.randrange(len(sites))]
        op = rng.choice(["length", "overlong", "duplicate", "delete", "utf8", "splice", "wiretype", "value"])
        if op == "length" and s.wt == 2:
            n = s.end - s.body
            bad = rng.choice([n + 1, n - 1, n + rng.randint(2, 64), max(0, n - rng.randint(2, 64))])
            bad = rng.choice([bad, bad, rng.choice(BAD_LENGTHS)])
            old = len(varint(n))
            return op, buf[: s.len_at] + varint(max(bad, 0)) + buf[s.len_at + old :]
        if op == "overlong" and s.wt == 2:  # the same length in more bytes (upb takes up to 5)
            old = varint(s.end - s.body)
            pad = rng.randint(1, 10 - len(old) + 1)
            longer = bytes(b | 0x80 for b in old) + b"\x80" * (pad - 1) + b"\x00"
            return op, edit(buf, sites, s.ancestors, s.len_at, s.body, longer)
        if op == "duplicate":
            return op, edit(buf, sites, s.ancestors, s.end, s.end, buf[s.tag_at : s.end])
        if op == "delete":
            return op, edit(buf, sites, s.ancestors, s.tag_at, s.end, b"")
        if op == "utf8" and s.wt == 2 and s.end > s.body:
            at = rng.randint(s.body, s.end)
            owners = (*s.ancestors, sites.index(s))
            return op, edit(buf, sites, owners, at, at, rng.choice(BAD_UTF8))
        if op == "splice":
            other = self.rng.randrange(len(self.seeds))
            if len(self.seeds[other][1]) <= MB:
                osites = self.sites(other)
                if osites:
                    o = osites[rng.randrange(len(osites))]
                    field = self.seeds[other][1][o.tag_at : o.end]
                    into = [j for j, t in enumerate(sites) if t.wt == 2 and j in _parents(sites)]
                    if into:
                        j = rng.choice(into)
                        t = sites[j]
                        at = rng.choice([t.body, t.end])
                        return op, edit(buf, sites, (*t.ancestors, j), at, at, field)
        if op == "wiretype":
            tag, after = read_varint(buf, s.tag_at)
            new = varint((tag & ~7) | rng.choice([0, 1, 2, 3, 4, 5, 6, 7]))
            return op, buf[: s.tag_at] + new + buf[after:]
        if op == "value" and s.wt in (0, 1, 5):
            tag, after = read_varint(buf, s.tag_at)
            if s.wt == 0:
                v = rng.choice([0, 1, 2**31, 2**63, 2**64 - 1, rng.getrandbits(64)])
                return op, buf[:after] + varint(v) + buf[s.end :]
            size = 8 if s.wt == 1 else 4
            v = rng.choice([0, 1, 2**63, 2**64 - 1, rng.getrandbits(64)]) & ((1 << 8 * size) - 1)
            return op, buf[:after] + v.to_bytes(size, "little") + buf[after + size :]
        return "concat", buf + self.seeds[rng.randrange(len(self.seeds))][1][: 64 * 1024]

    def raw(self, buf: bytes) -> tuple[str, bytes]:
        """One mutation of bytes: bit flips, byte edits, a cut."""
        rng = self.rng
        if not buf:
            return "insert", bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        raw = bytearray(buf)
        op = rng.choice(["flip", "flip", "set", "insert", "delete", "cut"])
        if op == "flip":
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        elif op == "set":
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        elif op == "insert":
            i = rng.randrange(len(raw) + 1)
            raw[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif op == "delete":
            i = rng.randrange(len(raw))
            del raw[i : i + rng.randint(1, 4)]
        else:
            del raw[rng.randrange(len(raw)) :]
        return op, bytes(raw)

    def mutate(self, k: int) -> tuple[str, bytes]:
        ops, buf = [], self.seeds[k][1]
        if self.rng.random() < 0.7:
            op, buf = self.structural(k)
            ops.append(op)
        for _ in range(self.rng.choice([0, 0, 1, 1, 2, 3]) if ops else self.rng.randint(1, 3)):
            op, buf = self.raw(buf)
            ops.append(op)
        return "+".join(ops), buf


_PARENTS: dict[int, set[int]] = {}


def _parents(sites: list[Site]) -> set[int]:
    key = id(sites)
    if key not in _PARENTS:
        _PARENTS[key] = {a for s in sites for a in s.ancestors[-1:]}
    return _PARENTS[key]


# ---------------------------------------------------------------------------------------------
# the checks


class Findings:
    def __init__(self, show: int) -> None:
        self.n = 0
        self.by: dict[str, int] = {}
        self.show = show

    def add(self, check: str, what: str, value: bytes | None = None) -> None:
        self.n += 1
        self.by[check] = self.by.get(check, 0) + 1
        where = ""
        if value is not None:
            OUT.mkdir(parents=True, exist_ok=True)
            path = OUT / f"finding-{self.n}-{check}.bin"
            path.write_bytes(value)
            where = f" (input: {path})"
        if self.n <= self.show:
            print(f"FINDING {check} {what}{where}\n{traceback.format_exc()}", file=sys.stderr, flush=True)


def check_feed(batch: list[tuple[bytes, Decoded]], now_ns: int, auto: bool, max_bytes: int) -> None:
    """`_wire.feed` over the batch, resumed after each message it leaves (as the stage does): what
    it hands `add_spans` is the reference path's lean decode of each message it takes."""
    calls: list[tuple[str, int, Any, Any]] = []

    def add_spans(spans: list[Any], ref: Any, size: int, now: float, out: list[Any], others: Any) -> None:
        calls.append((repr(spans), size, others, ref))

    messages = [SimpleNamespace(value=v) for v, _ in batch]
    refs = [MessageRef("p0", i) for i in range(len(batch))]
    i = 0
    while i < len(batch):
        calls.clear()
        j = _wire.feed(
            messages=messages,
            refs=refs,
            start=i,
            now_ns=now_ns,
            auto=auto,
            max_bytes=max_bytes,
            add_spans=add_spans,
            now=1.0,
            finished=[],
        )
        assert i <= j <= len(batch) and len(calls) == j - i
        for k, (spans, size, others, ref) in zip(range(i, j), calls, strict=True):
            value, lean = batch[k]
            # the whole message: charged once while any open trace holds spans of it
            assert (spans, size, others) == (repr(lean.spans), len(value), lean.others or None)
            assert ref is refs[k] and ref.holds == 0
        if j < len(batch):
            value, lean = batch[j]
            assert (
                not value
                or len(value) > max_bytes
                or (auto and value.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b""))
                or lean.error is not None
                or lean.problems
                or not lean.spans
                or _wire.decode_spans(value, now_ns, True) is None
            ), f"feed stopped at message {j} it could take"
            assert refs[j].holds == 1
        i = j + 1


def check_hash(text: str) -> None:
    def outcome(fn: Callable[[str], object]) -> Any:
        try:
            return fn(text)
        except Exception as exc:  # lone surrogates: both must refuse them
            return type(exc)

    assert outcome(_accounting.trace_fraction) == outcome(blake2b_fraction)
    assert outcome(_accounting.looks_like_refusal) == outcome(refusal_reference)


def hostile_traffic(seed: int, batches: int) -> list[tuple[float, list[Any], list[MessageRef]]]:
    """tests/test_stage_accounting's traffic, then made hostile the same way for the same seed."""
    out = tsa.traffic(seed, batches)
    rng = random.Random(seed * 7919)
    # Finite only: the decoders drop a non-finite score, and with NaN the reference's own drift
    # edges are not deterministic (a set of NaNs iterates in address order), so two pure-Python
    # stages would differ too.
    odd_scores = [-0.0, 0.0, 1.0, 1e308, 5e-324, 1, True]
    odd_times = [2**63 - 1, 2**63, 2**64, 2**70, -1, -(2**63)]
    for _, finished, refs in out:
        for f in finished:
            r = f.record
            if r is None:
                continue
            roll = rng.random()
            if roll < 0.1:  # more refs than the compiled path takes, around MAX_REFS
                extra = [MessageRef(tsa.TP, 10_000 + i) for i in range(rng.choice([29, 30, 31, 32, 33, 40]))]
                f.refs.extend(extra)
                refs.extend(extra)
            elif roll < 0.15 and f.refs:  # a ref twice
                f.refs[0].acquire()
                f.refs.append(f.refs[0])
            elif roll < 0.18 and f.refs:  # holds past the compiled path's bound
                for _ in range(rng.choice([254, 255, 256, 300])):
                    f.refs[0].acquire()
            if r.chunks and rng.random() < 0.15:
                r.chunks[0] = Chunk(r.chunks[0].id, "x", rng.choice(odd_scores))
            if rng.random() < 0.05:
                r.chunks = [Chunk(f"c{i}", "t", rng.random()) for i in range(rng.choice([200, 2000]))]
            if rng.random() < 0.05:
                r.end_ns = rng.choice(odd_times)
            if rng.random() < 0.05:
                r.start_ns = rng.choice(odd_times)
            if rng.random() < 0.05:  # the RED figures: stage times and tokens past what C reads
                r.retrieval_ns = rng.choice(odd_times)
            if rng.random() < 0.05:
                r.generation_ns = rng.choice(odd_times)
            if rng.random() < 0.05:
                r.input_tokens = rng.choice(odd_times)
            if rng.random() < 0.05:
                r.output_tokens = rng.choice([*odd_times, None])
            if rng.random() < 0.03:
                r.model = rng.choice(["", "é" * 200, "gpt-4o-mini" * 20])
            if rng.random() < 0.05:
                r.trace_id = rng.choice(["", "é" * 200, "x" * 129, "日本" * 70, f.trace_id * 8])
            if rng.random() < 0.03:
                r.answer = "I don't know. " * rng.choice([1, 5000])
    return out


async def check_accounting(seed: int, batches: int) -> None:
    runs = {}
    for account in (True, False):
        st, output, _ = tsa.make_stage(account)
        try:
            holds = []
            for now, finished, refs in hostile_traffic(seed, batches):
                st._finish_all(finished, now)
                holds.extend(r.holds for r in refs)
            runs[account] = (tsa.state(st, output), holds)
        finally:
            await output.close()
    assert runs[True] == runs[False]


class Assembling:
    """The decoded spans of each input into both assemblers, renewed every `every` inputs."""

    def __init__(self, rng: random.Random, every: int = 150) -> None:
        self.rng = rng
        self.every = every
        self.asm: Any = None
        self.n = 0

    def _renew(self) -> None:
        if self.asm is not None:
            self._release(self.asm.flush(complete_only=False))
        rng = self.rng
        self.asm = tac.Both(
            AssemblyConfig(
                grace_seconds=rng.choice([0, 0.05, 1]),
                timeout_seconds=rng.choice([0.5, 2]),
                max_open_traces=rng.choice([1, 3, 50]),
                # Below one trace, a few traces' objects and messages, and roomy: each open trace
                # is charged TRACE_COST + SPAN_COST a span on top of its messages.
                max_open_bytes=rng.choice([100, 8 * (TRACE_COST + SPAN_COST) + 5000, 1_000_000]),
                recent_trace_ids=rng.choice([0, 2, 100]),
            )
        )
        self.n = 0

    @staticmethod
    def _release(fins: list[Any]) -> None:
        for f in fins:
            for r in f.refs:
                r.release()

    def add(self, lean: Decoded, size: int) -> None:
        if self.asm is None or self.n >= self.every:
            self._renew()
        asm = self.asm
        self.n += 1
        now = self.n * 0.01
        ref = MessageRef(self.rng.choice(["p0", "p1"]), self.n)
        if lean.spans:
            out: list[Any] = []
            n_spans = len(lean.spans) + sum(lean.others.values())
            asm.add_spans(lean.spans, ref, size // n_spans + 1, now, out, lean.others)
            self._release(out)
        ref.release()
        roll = self.rng.random()
        if roll < 0.3:
            self._release(asm.poll(now))
        elif roll < 0.32:
            self._release(asm.flush(complete_only=True))
        elif roll < 0.33:
            for r in asm.drop_partitions({"p1"}):
                r.release()


# ---------------------------------------------------------------------------------------------


def self_test(what: str) -> None:
    """Proof that the run's checks bite: a heap overflow the sanitiser must stop, or a result
    the comparison must catch."""
    if what == "asan":
        small = ctypes.create_string_buffer(16)
        big = ctypes.create_string_buffer(64)
        ctypes.memmove(big, small, 40)  # reads 24 bytes past `small`
    elif what == "mismatch":
        real = _wire.decode_spans

        def wrong(value: bytes, now: int, lean: bool) -> Any:
            out = real(value, now, lean)
            if out is not None and out.spans:
                out.spans.pop()
            return out

        dc.WIRE = SimpleNamespace(decode_spans=wrong)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000, help="mutated messages to try")
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long, whatever the count")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--big-every", type=int, default=5000, help="one input in N mutates an 8 MB seed")
    ap.add_argument(
        "--account-every", type=int, default=20_000, help="an accounting comparison every N inputs"
    )
    ap.add_argument("--show", type=int, default=5, help="findings printed in full")
    ap.add_argument("--require-sanitized", action="store_true")
    ap.add_argument("--self-test", choices=["asan", "mismatch"])
    args = ap.parse_args()

    started = time.monotonic()
    have = sanitized()
    print(
        f"extensions: {_wire.__file__} and its siblings; sanitised: {', '.join(have) or 'none'}", flush=True
    )
    if args.require_sanitized and len(have) != 3:
        print("not the sanitised build: run `make sanitize` and this under its environment", file=sys.stderr)
        return 2
    assert dc.WIRE is not None and _wire.__file__ == dc.WIRE.__file__
    if args.self_test:
        self_test(args.self_test)
    lim = limits()
    rng = random.Random(args.seed)
    seeds = base_seeds() + limit_seeds(lim)
    big = big_seeds()
    print(
        f"limits: {lim}; {len(seeds)} seeds of up to {max(len(v) for _, v in seeds)} bytes, "
        f"{len(big)} of {min(len(v) for _, v in big)}-{max(len(v) for _, v in big)} bytes "
        f"(set-up {time.monotonic() - started:.1f} s)",
        flush=True,
    )
    mutator = Mutator(seeds, rng)
    big_mutator = Mutator(big, rng)
    findings = Findings(args.show)
    assembling = Assembling(random.Random(args.seed + 1))
    counts = {"decode": 0, "auto": 0, "feed": 0, "assemble": 0, "hash": 0, "account": 0, "random_ops": 0}
    ops: dict[str, int] = {}
    batch: list[tuple[bytes, Decoded]] = []
    now_ns = time.time_ns()
    odd_now = [10**9, 0, -(10**18), 2**62 + 1, 2**63]
    t0 = time.monotonic()
    last_report = t0
    tried = 0
    biggest = 0
    inputs: list[tuple[str, bytes]] = [(f"seed {name}", v) for name, v in seeds + big]  # unmutated first
    while tried < args.count:
        if args.seconds is not None and time.monotonic() - t0 > args.seconds:
            break
        if inputs:
            op, value = inputs.pop(0)
        elif tried % args.big_every == args.big_every - 1:
            op, value = big_mutator.mutate(rng.randrange(len(big)))
        else:
            op, value = mutator.mutate(rng.randrange(len(seeds)))
        tried += 1
        biggest = max(biggest, len(value))
        for o in op.split("+") if not op.startswith("seed ") else ["seed"]:
            ops[o] = ops.get(o, 0) + 1
        now = now_ns if rng.random() < 0.95 else rng.choice(odd_now)
        try:
            lean = dc.both(value, Encoding.OTLP_PROTO, now, for_assembly=True)
            counts["decode"] += 1
            if tried % 8 == 0:
                dc.both(value, Encoding.AUTO, now)
                counts["auto"] += 1
        except Exception as exc:
            findings.add("decode", f"{op}: {type(exc).__name__}", value)
            continue
        try:
            assembling.add(lean, len(value))
            counts["assemble"] += 1
        except Exception as exc:
            findings.add("assemble", f"{op}: {type(exc).__name__}", value)
            assembling.asm = None
        try:
            text = value[rng.randrange(len(value) + 1) :][: rng.choice([0, 8, 32, 128, 129, 300, 450])]
            check_hash(text.decode("utf-8", rng.choice(["replace", "ignore", "surrogateescape"])))
            counts["hash"] += 1
        except Exception as exc:
            findings.add("hash", f"{op}: {type(exc).__name__}", value)
        if now == now_ns:  # feed takes one clock for its batch
            batch.append((value, lean))
        if len(batch) == 48:
            try:
                check_feed(batch, now_ns, rng.random() < 0.3, rng.choice([16 * MB, 16 * MB, 4096]))
                counts["feed"] += len(batch)
            except Exception as exc:
                findings.add("feed", f"{type(exc).__name__}", b"".join(varint(len(v)) + v for v, _ in batch))
            batch.clear()
        if tried % 500 == 0:
            try:
                counts["random_ops"] += tac.random_run(rng.randrange(2**32), 40)
            except Exception as exc:
                findings.add("assemble", f"random operations: {type(exc).__name__}")
        if tried % args.account_every == 0 or tried == args.count:
            try:
                asyncio.run(check_accounting(rng.randrange(2**32), 12))
                counts["account"] += 1
            except Exception as exc:
                findings.add("account", f"{type(exc).__name__}")
        if time.monotonic() - last_report > 60:
            last_report = time.monotonic()
            rate = tried / (last_report - t0)
            print(f"... {tried} inputs, {findings.n} findings, {rate:.0f}/s", flush=True)
    elapsed = time.monotonic() - t0
    print(f"inputs tried: {tried} (largest {biggest} bytes) in {elapsed:.1f} s, {tried / elapsed:.0f}/s")
    print(f"checks: {counts}")
    print(f"mutations: {dict(sorted(ops.items()))}")
    print(f"findings: {findings.n} {findings.by}")
    return 1 if findings.n else 0


if __name__ == "__main__":
    sys.exit(main())
