"""Decode one Kafka record value into spans (OTLP protobuf / OTLP JSON) or a RAG record (flat JSON).

This is the hot path of the sidecar: protobuf is read with plain field access (no json_format, no
per-span validation) and attributes are turned into one plain dict per span, which
`monitor.ingest.dialects` maps onto `SpanFacts`. Bad input never raises: it comes back as a `Reject`
reason, because one poison message must not stop the consumer.

`otlp_proto` has two implementations with identical results. The compiled one (`_wire.c`, built by
`pip install` where a C compiler exists) walks the wire bytes once and materialises only the
attributes the dialects read, so a span without any costs no attribute objects, maps the common
OpenInference shapes itself (anything else goes to `dialects.apply`), and with `for_assembly` does
not materialise the spans set aside at all; it hands every message it is not sure about (errors
included) to the pure-Python one below, which is the reference (tests/ingest/test_decode_compiled.py
compares them). `RAGMON_PURE_PYTHON=1` forces the reference.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from monitor.contracts.model import Chunk, RagRecord, Reject, SpanFacts, SpanRole
from monitor.ingest import dialects
from monitor.kafka.config import Encoding
from monitor.plumbing.compiled import choose, slots_layout

__all__ = ["OTLP_PROTO_DECODER", "Decoded", "compiled_feed", "decode", "release_keys", "set_release_keys"]


@dataclass(slots=True)
class Decoded:
    """What one message yielded.

    Count `error` (if set) once for the message, plus every entry of `problems` (a dropped field,
    zeroed times, a dropped span); no loss is in both. A flat record whose query is a list has
    `bad_attribute` in `problems` and `missing_query` as its error, as a span's would at assembly.
    """

    spans: list[SpanFacts] = field(default_factory=list)
    # With `for_assembly`: spans not in `spans` because they cannot shape a record (and are not
    # their trace's first in the message), counted per trace id; every such trace is in `spans`.
    others: dict[str, int] = field(default_factory=dict)
    # Flat-JSON records; `query_type` is raw ("" when the producer gave none), not yet bounded.
    records: list[RagRecord] = field(default_factory=list)
    error: Reject | None = None
    detail: str = ""
    problems: list[Reject] = field(default_factory=list)


UNKNOWN_SERVICE = "unknown_service"
_PAST_NS = 30 * 86400 * 10**9  # spans older than this are clock garbage, not late data
_FUTURE_NS = 3600 * 10**9  # tolerated producer clock skew
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
_JSON_START = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*")  # optional BOM, JSON whitespace
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_HEX = frozenset("0123456789abcdef")
# OTLP `Status.code` ERROR: a span's own error signal (the RED error share). OTLP/JSON writes the
# enum as its number; the name is accepted as protobuf's JSON mapping writes it.
_STATUS_ERROR = 2
_JSON_STATUS_ERROR = (2, "2", "STATUS_CODE_ERROR")

DEFAULT_RELEASE_KEYS = ("service.version",)
MAX_RELEASE_KEYS = 8
# The attribute keys a span's release is read from, in order (`slices.release_keys`): process-wide,
# as the compiled decoder's key tables are; the ingest stage sets them once at start.
_release_keys: tuple[str, ...] = DEFAULT_RELEASE_KEYS


def set_release_keys(keys: tuple[str, ...] | list[str]) -> None:
    """Read a span's release from these attribute keys: for each in order, the span's own
    attribute, then its resource's; the first non-empty string wins."""
    global _release_keys
    keys = tuple(keys)
    if len(keys) > MAX_RELEASE_KEYS or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"release keys: up to {MAX_RELEASE_KEYS} non-empty strings")
    _release_keys = keys
    # The compiled module once loaded, in use or not (the differential tests load it beside the
    # pure-Python path): both must read the same keys.
    wire = compiled_decoder() if compiled_decoder.cache_info().currsize else None
    if wire is not None:
        wire.set_release_keys(keys)


def release_keys() -> tuple[str, ...]:
    return _release_keys


def _resource_releases(attrs: dict[str, Any]) -> tuple[str, ...]:
    """Per release key, the resource's value ("" when absent or not a non-empty string)."""
    out = []
    for k in _release_keys:
        v = attrs.get(k)
        out.append(v if isinstance(v, str) else "")
    return tuple(out)


def _release(attrs: dict[str, Any], resource: tuple[str, ...]) -> str:
    """The span's release: per key in order, its own attribute, else its resource's."""
    for i, k in enumerate(_release_keys):
        v = attrs.get(k)
        if isinstance(v, str) and v:
            return v
        if resource[i]:
            return resource[i]
    return ""


def decode(
    value: bytes, encoding: Encoding, now_ns: int | None = None, *, for_assembly: bool = False
) -> Decoded:
    """Decode one record value; `now_ns` (default: the wall clock) bounds plausible span times.

    `for_assembly` (what the ingest stage asks for): a span that cannot shape a record
    (`dialects.is_inert`) is only counted in `Decoded.others` unless it is its trace's first in the
    message, the one `Assembler.add_spans` may keep as the trace's anchor. The compiled decoder
    then never materialises the HTTP, database and cache spans around a RAG request.
    """
    try:
        value = value if isinstance(value, bytes) else bytes(value)
        return _decode(value, encoding, now_ns, for_assembly)
    except Exception as exc:  # last resort: a decoder bug must not kill the consumer loop
        return Decoded(error=Reject.DECODE_ERROR, detail=f"unexpected {type(exc).__name__}")


def _decode(value: bytes, encoding: Encoding, now_ns: int | None, lean: bool) -> Decoded:
    if not value:
        return Decoded(error=Reject.EMPTY, detail="empty message")
    now = time.time_ns() if now_ns is None else now_ns
    if encoding == Encoding.OTLP_PROTO:
        return _from_proto(value, now, lean)
    if encoding == Encoding.OTLP_JSON or encoding == Encoding.JSON:
        obj = _parse_json(value)
        if isinstance(obj, Decoded):
            return obj
        if encoding == Encoding.OTLP_JSON:
            return _from_otlp_json(obj, now, lean)
        return _from_flat(obj, value, now)
    if encoding != Encoding.AUTO:
        return Decoded(error=Reject.DECODE_ERROR, detail=f"unknown encoding {str(encoding)[:40]!r}")

    m = _JSON_START.match(value)
    start = m.end() if m else 0
    if start == len(value):
        return Decoded(error=Reject.EMPTY, detail="blank message")
    if value[start] != 0x7B:  # "{"
        return _from_proto(value, now, lean)
    obj = _parse_json(value)
    if isinstance(obj, Decoded):
        # A protobuf can start with b"\n{" (field 1, length 123): only trust "{" at byte 0.
        if start > 0:
            alt = _from_proto(value, now, lean)
            if alt.error is None:
                return alt
        return obj
    if "resourceSpans" in obj or "resource_spans" in obj:
        return _from_otlp_json(obj, now, lean)
    return _from_flat(obj, value, now)


def _bad_times(start: int, end: int, now: int) -> bool:
    return end < start or start < now - _PAST_NS or end > now + _FUTURE_NS


def _finish(spans: list[SpanFacts], others: dict[str, int], problems: list[Reject], dropped: int) -> Decoded:
    if not spans:
        if dropped:
            return Decoded(error=Reject.DECODE_ERROR, detail=f"all {dropped} span(s) malformed (ids/shape)")
        return Decoded(error=Reject.EMPTY, detail="no spans")
    if dropped:
        problems.extend([Reject.DECODE_ERROR] * dropped)
    if not problems:
        return Decoded(spans=spans, others=others)
    n_spans = len(spans) + sum(others.values()) + dropped
    return Decoded(spans=spans, others=others, problems=problems, detail=_summary(problems, n_spans))


def _set_aside(spans: list[SpanFacts], lean: bool) -> tuple[list[SpanFacts], dict[str, int]]:
    """With `lean` (`decode`'s `for_assembly`): the spans to assemble, and the inert ones after
    their trace's first span counted per trace instead."""
    others: dict[str, int] = {}
    if not lean:
        return spans, others
    kept: list[SpanFacts] = []
    seen: set[str] = set()
    for s in spans:
        tid = s.trace_id
        if tid in seen and dialects.is_inert(s):
            others[tid] = others.get(tid, 0) + 1
        else:
            seen.add(tid)
            kept.append(s)
    return kept, others


def _summary(problems: list[Reject], n_spans: int = 0) -> str:
    """For the log line that counts each problem: which reasons, how many, out of how many spans."""
    if not problems:
        return ""
    counts: dict[str, int] = {}
    for p in problems:
        counts[p.value] = counts.get(p.value, 0) + 1
    text = ", ".join(f"{k} x{n}" for k, n in counts.items())
    return f"{text} in {n_spans} span(s)" if n_spans else text


# --- OTLP protobuf ------------------------------------------------------------------------------


def _from_proto(value: bytes, now: int, lean: bool) -> Decoded:
    if _wire is not None:
        out: Decoded | None = _wire.decode_spans(value, now, lean)
        if out is not None:
            return out
    return _from_proto_reference(value, now, lean)


def _from_proto_reference(value: bytes, now: int, lean: bool) -> Decoded:
    data = TracesData()
    problems: list[Reject] = []
    try:
        data.ParseFromString(value)
    except DecodeError:
        repaired = _repaired(value)
        if repaired is None:
            return Decoded(error=Reject.DECODE_ERROR, detail="not a TracesData protobuf")
        data, bad = repaired
        problems = [Reject.INVALID_UTF8] * bad

    spans: list[SpanFacts] = []
    dropped = 0
    lo = now - _PAST_NS
    hi = now + _FUTURE_NS
    merged = dialects.MERGED_EVENTS
    wants_events = dialects.wants_events
    apply = dialects.apply
    keys = _release_keys
    for rs in data.resource_spans:
        service = UNKNOWN_SERVICE
        for kv in rs.resource.attributes:
            if kv.key == "service.name":
                name = kv.value.string_value
                if name:
                    service = name
                else:
                    problems.append(Reject.BAD_ATTRIBUTE)
                break
        # Per release key, the first attribute of that key decides (as for service.name).
        found: dict[str, str] = {}
        if keys:
            for kv in rs.resource.attributes:
                if kv.key in keys and kv.key not in found:
                    found[kv.key] = kv.value.string_value
        resource_release = _resource_releases(found)
        for ss in rs.scope_spans:
            scope = ss.scope.name
            for sp in ss.spans:
                tid = sp.trace_id
                sid = sp.span_id
                pid = sp.parent_span_id
                if (
                    len(tid) != 16
                    or len(sid) != 8
                    or (pid and len(pid) != 8)
                    or tid == _ZERO_TRACE
                    or sid == _ZERO_SPAN
                ):
                    dropped += 1
                    continue
                start = sp.start_time_unix_nano
                end = sp.end_time_unix_nano
                facts = SpanFacts(tid.hex(), sid.hex(), pid.hex(), sp.name, service, start, end)
                if end < start or start < lo or end > hi:
                    facts.start_ns = facts.end_ns = 0
                    facts.problems.append(Reject.BAD_TIMESTAMP)
                if sp.status.code == _STATUS_ERROR:
                    facts.error = True
                if scope:
                    facts.scope = scope
                attrs = _pb_attrs(sp.attributes)
                facts.release = _release(attrs, resource_release)  # before events: spans only
                if wants_events(attrs) and len(sp.events):
                    for ev in sp.events:
                        if ev.name in merged:
                            for k, val in _pb_attrs(ev.attributes).items():
                                attrs.setdefault(k, val)
                apply(facts, attrs)
                if facts.problems:
                    problems.extend(facts.problems)
                spans.append(facts)
    kept, others = _set_aside(spans, lean)
    if lean:
        _raw_text(kept)
    return _finish(kept, others, problems, dropped)


def _raw_text(spans: list[SpanFacts]) -> None:
    """With `for_assembly`, chunk text is handed over as its UTF-8 bytes (`Chunk.raw`): decoded
    only for the records the ingest stage samples."""
    for s in spans:
        for c in s.chunks or ():
            if isinstance(c.content, str):
                c.raw = c.content.encode()
                c.content = None


def _pb_attrs(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        v = kv.value
        s = v.string_value  # most attributes are strings: one call instead of WhichOneof + read
        if s:
            out[kv.key] = s
        else:
            which = v.WhichOneof("value")
            if which is not None:
                out[kv.key] = _pb_value(v, which)
    return out


def _pb_value(v: Any, which: str) -> Any:
    if which == "array_value":
        return [_pb_value(x, w) for x in v.array_value.values if (w := x.WhichOneof("value")) is not None]
    if which == "kvlist_value":
        return {
            kv.key: _pb_value(kv.value, w)
            for kv in v.kvlist_value.values
            if (w := kv.value.WhichOneof("value")) is not None
        }
    return getattr(v, which)


@functools.cache
def _bytes_mirror() -> tuple[Any, frozenset[str]]:
    """TracesData with every `string` field declared `bytes`, and the full names of those fields:
    it parses whatever upb refuses only for its UTF-8."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    retyped: set[str] = set()

    def retype(prefix: str, msgs: Any) -> None:
        for m in msgs:
            for f in m.field:
                if f.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
                    f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                    retyped.add(f"{prefix}.{m.name}.{f.name}")
            retype(f"{prefix}.{m.name}", m.nested_type)

    pool = descriptor_pool.DescriptorPool()
    for mod in (common_pb2, resource_pb2, trace_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(fdp)
        retype(fdp.package, fdp.message_type)
        pool.Add(fdp)
    cls = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("opentelemetry.proto.trace.v1.TracesData")
    )
    return cls, frozenset(retyped)


def _repaired(value: bytes) -> tuple[TracesData, int] | None:
    """A message upb refused: if only for invalid UTF-8, parsed with each bad string's invalid
    sequences replaced by U+FFFD (what the OpenTelemetry SDKs and Collector do), and how many
    strings were; None when it is corrupt otherwise. Only messages that fail take this path
    (parsed three times), so valid traffic costs nothing more."""
    mirror_cls, strings = _bytes_mirror()
    mirror = mirror_cls()
    try:
        mirror.ParseFromString(value)
    except Exception:
        return None
    bad = _fix_strings(mirror, strings)
    data = TracesData()
    try:
        data.ParseFromString(mirror.SerializeToString())
    except Exception:  # pragma: no cover - every string is valid UTF-8 now
        return None
    return data, bad


def _fix_strings(msg: Any, strings: frozenset[str]) -> int:
    """Replace the invalid UTF-8 in the (retyped) string fields of `msg`, all the way down;
    returns how many strings had some. A sub-message the real type parses holds none and is not
    walked: upb finds the one bad span of a hundred faster than a walk in Python would."""
    bad = 0
    for fd, val in msg.ListFields():
        if fd.message_type is not None:
            real = _real_type(fd.message_type.full_name)
            for sub in (val,) if hasattr(val, "ListFields") else val:
                try:
                    real.FromString(sub.SerializeToString())
                except DecodeError:
                    bad += _fix_strings(sub, strings)
        elif fd.full_name in strings:
            if isinstance(val, bytes):
                if (fixed := _valid_utf8(val)) is not None:
                    setattr(msg, fd.name, fixed)
                    bad += 1
            else:  # repeated (none in OTLP traces today)
                for i, b in enumerate(val):
                    if (fixed := _valid_utf8(b)) is not None:
                        val[i] = fixed
                        bad += 1
    return bad


@functools.cache
def _real_type(full_name: str) -> Any:
    """The generated message class of `full_name` (string fields checked as UTF-8)."""
    from google.protobuf import descriptor_pool, message_factory

    return message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName(full_name))


def _valid_utf8(raw: bytes) -> bytes | None:
    """`raw` with each invalid sequence replaced by U+FFFD; None if it was valid already."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace").encode("utf-8")
    return None


# --- JSON ---------------------------------------------------------------------------------------


def _parse_json(value: bytes) -> dict[str, Any] | Decoded:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        # JSON with a bad byte in it is invalid_utf8; binary garbage that starts with "{" is not JSON.
        try:
            json.loads(value.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return Decoded(error=Reject.DECODE_ERROR, detail=f"not JSON (not UTF-8 at byte {exc.start})")
        return Decoded(error=Reject.INVALID_UTF8, detail=f"JSON is not UTF-8 (byte {exc.start})")
    if text[:1] == "\ufeff":
        text = text[1:]
    if not text.strip():
        return Decoded(error=Reject.EMPTY, detail="blank message")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return Decoded(error=Reject.DECODE_ERROR, detail=f"invalid JSON: {exc.msg} at char {exc.pos}")
    except (ValueError, RecursionError) as exc:
        return Decoded(error=Reject.DECODE_ERROR, detail=f"invalid JSON ({type(exc).__name__})")
    if not isinstance(obj, dict):
        return Decoded(error=Reject.DECODE_ERROR, detail=f"JSON {type(obj).__name__}, not an object")
    # "\ud800"-style escapes decode to lone surrogates, which no UTF-8 writer downstream accepts.
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return Decoded(error=Reject.INVALID_UTF8, detail="JSON escapes encode a lone surrogate")
    return obj


def _jget(d: dict[str, Any], camel: str, snake: str) -> Any:
    v = d.get(camel)
    return v if v is not None else d.get(snake)


def _from_otlp_json(obj: dict[str, Any], now: int, lean: bool) -> Decoded:
    rss = _jget(obj, "resourceSpans", "resource_spans")
    if rss is None:
        return Decoded(error=Reject.EMPTY, detail="no resourceSpans")
    if not isinstance(rss, list):
        return Decoded(error=Reject.DECODE_ERROR, detail="resourceSpans is not a list")
    spans: list[SpanFacts] = []
    problems: list[Reject] = []
    dropped = 0
    for rs in rss:
        if not isinstance(rs, dict):
            dropped += 1
            continue
        service, resource_release = _json_service(rs.get("resource"), problems)
        sss = _jget(rs, "scopeSpans", "scope_spans")
        if not isinstance(sss, list):
            dropped += sss is not None
            continue
        for ss in sss:
            sps = ss.get("spans") if isinstance(ss, dict) else None
            if not isinstance(sps, list):
                dropped += sps is not None or not isinstance(ss, dict)
                continue
            scope = ss.get("scope")
            name = scope.get("name") if isinstance(scope, dict) else None
            for sp in sps:
                facts = _json_span(sp, service, resource_release, now)
                if facts is None:
                    dropped += 1
                    continue
                if isinstance(name, str) and name:
                    facts.scope = name
                if facts.problems:
                    problems.extend(facts.problems)
                spans.append(facts)
    return _finish(*_set_aside(spans, lean), problems, dropped)


def _json_service(resource: Any, problems: list[Reject]) -> tuple[str, tuple[str, ...]]:
    """The resource's service name and its value of each release key."""
    none = ("",) * len(_release_keys)
    if not isinstance(resource, dict):
        return UNKNOWN_SERVICE, none
    attrs, bad = _json_attrs(resource.get("attributes"))
    releases = _resource_releases(attrs) if _release_keys else none
    name = attrs.get("service.name")
    if name is None and not bad:
        return UNKNOWN_SERVICE, releases
    if isinstance(name, str) and name:
        return name, releases
    problems.append(Reject.BAD_ATTRIBUTE)
    return UNKNOWN_SERVICE, releases


def _json_span(sp: Any, service: str, resource_release: tuple[str, ...], now: int) -> SpanFacts | None:
    if not isinstance(sp, dict):
        return None
    tid = _json_id(_jget(sp, "traceId", "trace_id"), 16)
    sid = _json_id(_jget(sp, "spanId", "span_id"), 8)
    raw_pid = _jget(sp, "parentSpanId", "parent_span_id")
    pid = "" if raw_pid is None or raw_pid == "" else _json_id(raw_pid, 8, allow_zero=True)
    if tid is None or sid is None or pid is None:
        return None
    name = sp.get("name")
    start = _json_int(_jget(sp, "startTimeUnixNano", "start_time_unix_nano"))
    end = _json_int(_jget(sp, "endTimeUnixNano", "end_time_unix_nano"))
    facts = SpanFacts(tid, sid, pid, name if isinstance(name, str) else "", service, start, end)
    if _bad_times(start, end, now):
        facts.start_ns = facts.end_ns = 0
        facts.problems.append(Reject.BAD_TIMESTAMP)
    status = sp.get("status")
    if isinstance(status, dict) and status.get("code") in _JSON_STATUS_ERROR:
        facts.error = True
    attrs, bad = _json_attrs(sp.get("attributes"))
    facts.release = _release(attrs, resource_release)
    events = sp.get("events") if dialects.wants_events(attrs) else None
    if isinstance(events, list):
        for ev in events:
            if isinstance(ev, dict) and ev.get("name") in dialects.MERGED_EVENTS:
                ev_attrs, ev_bad = _json_attrs(ev.get("attributes"))
                bad += ev_bad
                for k, val in ev_attrs.items():
                    attrs.setdefault(k, val)
    if bad:
        facts.problems.extend([Reject.BAD_ATTRIBUTE] * bad)
    dialects.apply(facts, attrs)
    return facts


def _json_id(value: Any, nbytes: int, *, allow_zero: bool = False) -> str | None:
    """Hex id as OTLP/JSON says; base64 (what json_format writes) is accepted as a fallback."""
    if not isinstance(value, str):
        return None
    v = value.lower()
    if len(v) == 2 * nbytes and _HEX.issuperset(v):
        return v if allow_zero or v.strip("0") else None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) != nbytes or (not allow_zero and not raw.strip(b"\0")):
        return None
    return raw.hex()


def _json_int(value: Any) -> int:
    """A 64-bit int as OTLP/JSON writes it (string) or as hand-written JSON does (number); 0 if not."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return 0
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return 0


_BAD: Any = object()
_MAX_DEPTH = 16


def _json_attrs(kvs: Any) -> tuple[dict[str, Any], int]:
    """OTLP/JSON ``[{key, value: AnyValue}]`` → plain dict, plus how many entries were unusable."""
    out: dict[str, Any] = {}
    if kvs is None:
        return out, 0
    if not isinstance(kvs, list):
        return out, 1
    bad = 0
    for kv in kvs:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            bad += 1
            continue
        val = _json_any(kv.get("value"), 0)
        if val is _BAD:
            bad += 1
        elif val is not None:
            out[kv["key"]] = val
    return out, bad


def _json_any(v: Any, depth: int) -> Any:
    if v is None:
        return None
    if not isinstance(v, dict) or depth > _MAX_DEPTH:
        return _BAD
    for key, x in v.items():
        handler = _ANY_HANDLERS.get(key)
        if handler is not None:
            return handler(x, depth)
    return None


def _any_string(x: Any, depth: int) -> Any:
    return x if isinstance(x, str) else _BAD


def _any_int(x: Any, depth: int) -> Any:
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    if isinstance(x, str):
        try:
            return int(x)
        except ValueError:
            return _BAD
    return _BAD


def _any_double(x: Any, depth: int) -> Any:
    if isinstance(x, int | float) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)  # also "NaN" / "Infinity", as proto3 JSON writes them
        except ValueError:
            return _BAD
    return _BAD


def _any_bool(x: Any, depth: int) -> Any:
    return x if isinstance(x, bool) else _BAD


def _any_bytes(x: Any, depth: int) -> Any:
    if not isinstance(x, str):
        return _BAD
    try:
        return base64.b64decode(x)
    except (binascii.Error, ValueError):
        return _BAD


def _any_array(x: Any, depth: int) -> Any:
    values = x.get("values", []) if isinstance(x, dict) else _BAD
    if not isinstance(values, list):
        return _BAD
    out = []
    for e in values:
        val = _json_any(e, depth + 1)
        if val is _BAD:
            return _BAD
        if val is not None:
            out.append(val)
    return out


def _any_kvlist(x: Any, depth: int) -> Any:
    values = x.get("values", []) if isinstance(x, dict) else _BAD
    if not isinstance(values, list):
        return _BAD
    out: dict[str, Any] = {}
    for kv in values:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            return _BAD
        val = _json_any(kv.get("value"), depth + 1)
        if val is _BAD:
            return _BAD
        if val is not None:
            out[kv["key"]] = val
    return out


_ANY_HANDLERS: dict[str, Callable[[Any, int], Any]] = {
    "stringValue": _any_string,
    "string_value": _any_string,
    "intValue": _any_int,
    "int_value": _any_int,
    "doubleValue": _any_double,
    "double_value": _any_double,
    "boolValue": _any_bool,
    "bool_value": _any_bool,
    "bytesValue": _any_bytes,
    "bytes_value": _any_bytes,
    "arrayValue": _any_array,
    "array_value": _any_array,
    "kvlistValue": _any_kvlist,
    "kvlist_value": _any_kvlist,
}


# --- flat JSON ----------------------------------------------------------------------------------


def _from_flat(obj: dict[str, Any], raw: bytes, now: int) -> Decoded:
    problems: list[Reject] = []
    query = _flat_text(obj.get("query"), problems)
    if query is None or not query.strip():
        return Decoded(
            error=Reject.MISSING_QUERY, detail="flat record has no usable query", problems=problems
        )
    answer = _flat_text(obj.get("answer"), problems)
    if answer is None:
        return Decoded(
            error=Reject.MISSING_ANSWER, detail="flat record has no usable answer", problems=problems
        )

    trace_id = _flat_id(obj.get("trace_id"), 16, raw, problems)
    span_id = _flat_id(obj.get("span_id"), 8, trace_id.encode(), problems)
    service = obj.get("service")
    if service is not None and not (isinstance(service, str) and service):
        problems.append(Reject.BAD_ATTRIBUTE)
        service = None
    qt = obj.get("query_type")
    query_type = _flat_text(qt, problems) if qt is not None else None
    model = obj.get("model")
    if model is not None and not isinstance(model, str):
        problems.append(Reject.BAD_ATTRIBUTE)
        model = None
    raw_chunks = obj.get("chunks")
    chunks = []
    if isinstance(raw_chunks, list):
        chunks = dialects.chunks_from_items(raw_chunks, problems)
    elif raw_chunks is not None:
        problems.append(Reject.BAD_ATTRIBUTE)
    rp = obj.get("replay")
    replay = dialects.parse_bool(rp, problems) if rp is not None else False
    release = obj.get("release")
    if release is not None and not isinstance(release, str):
        problems.append(Reject.BAD_ATTRIBUTE)
        release = None

    start = _seconds_to_ns(obj.get("start"))
    end = _seconds_to_ns(obj.get("end"))
    if start or end:
        if start < 0 or end < 0:
            bad = True
        elif start and end:
            bad = _bad_times(start, end, now)
        else:
            bad = _bad_times(start or end, start or end, now)
        if bad:
            start = end = 0
            problems.append(Reject.BAD_TIMESTAMP)

    record = RagRecord(
        trace_id=trace_id,
        span_id=span_id,
        service=service or UNKNOWN_SERVICE,
        query=query,
        query_type=query_type or "",
        chunks=chunks,
        answer=answer,
        model=model,
        start_ns=start,
        end_ns=end,
        replay=replay,
        release=release or "",
    )
    return Decoded(records=[record], problems=problems, detail=_summary(problems))


def _flat_text(value: Any, problems: list[Reject]) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    problems.append(Reject.BAD_ATTRIBUTE)
    return None


def _flat_id(value: Any, nbytes: int, seed: bytes, problems: list[Reject]) -> str:
    """The producer's id if it is hex (UUID dashes allowed), else a stable hash of it or of `seed`.

    Hashing keeps redelivered messages (same bytes) and reused producer ids on one trace id.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and value.strip():
        v = value.strip().lower().replace("-", "")
        if len(v) == 2 * nbytes and _HEX.issuperset(v):
            return v
        seed = value.encode("utf-8", "surrogatepass")
    elif value is not None and value != "":
        problems.append(Reject.BAD_ATTRIBUTE)
    return hashlib.blake2b(seed, digest_size=nbytes).hexdigest()


def _seconds_to_ns(value: Any) -> int:
    """Epoch seconds → ns; 0 when absent, -1 when present but not a usable number."""
    if value is None:
        return 0
    if isinstance(value, int | float) and not isinstance(value, bool):
        f = float(value)
    elif isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            return -1
    else:
        return -1
    if not 0 < f < 1e12:  # also NaN; an epoch in seconds past year 33000 is not a time
        return -1
    return int(f * 1e9)


# --- the compiled path ---------------------------------------------------------------------------


def _wire_schema() -> list[list[tuple[int, int, int]]]:
    """The installed OTLP trace schema as `_wire.init` takes it, so that the compiled walker checks
    wire types and UTF-8 exactly where this protobuf version's upb would (fields added by a later
    opentelemetry-proto included). Kinds: 1 varint, 2 fixed64, 3 fixed32, 4 bytes, 5 string,
    6 message."""
    from google.protobuf.descriptor import FieldDescriptor as F
    from opentelemetry.proto.common.v1 import common_pb2 as c
    from opentelemetry.proto.resource.v1 import resource_pb2 as r
    from opentelemetry.proto.trace.v1 import trace_pb2 as t

    fixed64 = {F.TYPE_FIXED64, F.TYPE_SFIXED64, F.TYPE_DOUBLE}
    fixed32 = {F.TYPE_FIXED32, F.TYPE_SFIXED32, F.TYPE_FLOAT}
    order = [
        m.DESCRIPTOR
        for m in (
            t.TracesData,
            t.ResourceSpans,
            r.Resource,
            t.ScopeSpans,
            t.Span,
            t.Span.Event,
            c.KeyValue,
            c.AnyValue,
            c.ArrayValue,
            c.KeyValueList,
        )
    ]
    index = {d.full_name: i for i, d in enumerate(order)}
    out: list[list[tuple[int, int, int]]] = []
    for d in order:  # grows while walking: messages reached from these are appended
        fields = []
        for f in d.fields:
            child = 0
            if f.type == F.TYPE_MESSAGE:
                kind = 6
                sub = f.message_type
                if sub.full_name not in index:
                    index[sub.full_name] = len(order)
                    order.append(sub)
                child = index[sub.full_name]
            elif f.type == F.TYPE_GROUP:
                raise ValueError(f"group field {d.full_name}.{f.name}")
            elif f.type == F.TYPE_STRING:
                kind = 5
            elif f.type == F.TYPE_BYTES:
                kind = 4
            elif f.type in fixed64:
                kind = 2
            elif f.type in fixed32:
                kind = 3
            else:
                kind = 1
            fields.append((f.number, kind, child))
        out.append(fields)
    return out


@functools.cache
def compiled_decoder() -> Any:
    """The compiled `_wire` module, initialised; None where it was not built (no compiler)."""
    try:
        from monitor.ingest import _wire as wire
    except ImportError:
        return None
    wire.init(
        schema=_wire_schema(),
        keys=sorted(dialects.ATTRIBUTE_KEYS),
        prefixes=list(dialects.INDEXED_PREFIXES),
        merged_events=sorted(dialects.MERGED_EVENTS),
        span_facts=SpanFacts,
        span_facts_layout=slots_layout(SpanFacts),
        chunk=Chunk,
        chunk_layout=slots_layout(Chunk),
        decoded=Decoded,
        decoded_layout=slots_layout(Decoded),
        span_role=SpanRole,
        bad_attribute=Reject.BAD_ATTRIBUTE,
        bad_timestamp=Reject.BAD_TIMESTAMP,
        apply=dialects.apply,
        wants_events=dialects.wants_events,
        is_inert=dialects.is_inert,
        finish=_finish,
        unknown_service=UNKNOWN_SERVICE,
    )
    wire.set_release_keys(_release_keys)
    return wire


def compiled_feed(encoding: Encoding) -> Callable[..., int] | None:
    """`_wire.feed`, the ingest stage's compiled loop over plain messages, where it applies: the
    compiled decoder is in use and the encoding may be protobuf."""
    if _wire is None or encoding not in (Encoding.OTLP_PROTO, Encoding.AUTO):
        return None
    feed: Callable[..., int] = _wire.feed
    return feed


_wire, OTLP_PROTO_DECODER = choose("decoder", "monitor.ingest._wire", compiled_decoder)


def flat_record(fields: dict[str, Any]) -> RagRecord:
    """One record from a flat-JSON object's fields, through this decoder (ValueError: rejected):
    how tools outside the stream (calibration labels) build a record exactly as ingest would."""
    decoded = decode(json.dumps(fields).encode(), Encoding.JSON)
    if decoded.error is not None or not decoded.records:
        raise ValueError(f"record rejected: {decoded.error} {decoded.detail}".strip())
    return decoded.records[0]
