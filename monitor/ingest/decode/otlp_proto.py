"""OTLP protobuf, the pure-Python reference of the compiled decoder (`_wire.c`): protobuf read with
plain field access (no json_format, no per-span validation), and a message upb refuses only for its
UTF-8 repaired as the OpenTelemetry SDKs and Collector do."""

from __future__ import annotations

import functools
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from monitor.contracts.model import Reject, SpanFacts
from monitor.ingest import dialects
from monitor.ingest.decode.decoded import UNKNOWN_SERVICE, Decoded, bad_times, finish, set_aside
from monitor.ingest.decode.release import release_keys, resource_releases, span_release

_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
# OTLP `Status.code` ERROR: a span's own error signal (the RED error share).
_STATUS_ERROR = 2


def from_proto_reference(value: bytes, now: int, lean: bool) -> Decoded:
    parsed = _parse(value)
    if parsed is None:
        return Decoded(error=Reject.DECODE_ERROR, detail="not a TracesData protobuf")
    data, problems = parsed
    spans: list[SpanFacts] = []
    dropped = 0
    for rs in data.resource_spans:
        service = _resource_service(rs.resource.attributes, problems)
        resource_release = _resource_release(rs.resource.attributes)
        for ss in rs.scope_spans:
            scope = ss.scope.name
            for sp in ss.spans:
                facts = _span_facts(sp, service, scope, resource_release, now)
                if facts is None:
                    dropped += 1
                    continue
                if facts.problems:
                    problems.extend(facts.problems)
                spans.append(facts)
    kept, others = set_aside(spans, lean)
    if lean:
        _raw_text(kept)
    return finish(kept, others, problems, dropped)


def _parse(value: bytes) -> tuple[TracesData, list[Reject]] | None:
    """The message, and an `invalid_utf8` per string repaired; None when it is no TracesData."""
    data = TracesData()
    try:
        data.ParseFromString(value)
    except DecodeError:
        repaired = _repaired(value)
        if repaired is None:
            return None
        data, bad = repaired
        return data, [Reject.INVALID_UTF8] * bad
    return data, []


def _resource_service(attributes: Any, problems: list[Reject]) -> str:
    """The first `service.name` decides: an empty one is a bad attribute, not a service."""
    for kv in attributes:
        if kv.key == "service.name":
            name: str = kv.value.string_value
            if name:
                return name
            problems.append(Reject.BAD_ATTRIBUTE)
            break
    return UNKNOWN_SERVICE


def _resource_release(attributes: Any) -> tuple[str, ...]:
    """Per release key, the first attribute of that key decides (as for service.name)."""
    keys = release_keys()
    found: dict[str, str] = {}
    if keys:
        for kv in attributes:
            if kv.key in keys and kv.key not in found:
                found[kv.key] = kv.value.string_value
    return resource_releases(found)


def _span_facts(
    sp: Any, service: str, scope: str, resource_release: tuple[str, ...], now: int
) -> SpanFacts | None:
    """One span mapped by the dialects; None when its ids are malformed (the span is dropped)."""
    tid = sp.trace_id
    sid = sp.span_id
    pid = sp.parent_span_id
    if len(tid) != 16 or len(sid) != 8 or (pid and len(pid) != 8) or tid == _ZERO_TRACE or sid == _ZERO_SPAN:
        return None
    start = sp.start_time_unix_nano
    end = sp.end_time_unix_nano
    facts = SpanFacts(tid.hex(), sid.hex(), pid.hex(), sp.name, service, start, end)
    if bad_times(start, end, now):
        facts.start_ns = facts.end_ns = 0
        facts.problems.append(Reject.BAD_TIMESTAMP)
    if sp.status.code == _STATUS_ERROR:
        facts.error = True
    if scope:
        facts.scope = scope
    attrs = pb_attrs(sp.attributes)
    facts.release = span_release(attrs, resource_release)  # before events: spans only
    if dialects.wants_events(attrs) and len(sp.events):
        for ev in sp.events:
            if ev.name in dialects.MERGED_EVENTS:
                for k, val in pb_attrs(ev.attributes).items():
                    attrs.setdefault(k, val)
    dialects.apply(facts, attrs)
    return facts


def _raw_text(spans: list[SpanFacts]) -> None:
    """With `for_assembly`, chunk text is handed over as its UTF-8 bytes (`Chunk.raw`): decoded
    only for the records the ingest stage samples."""
    for s in spans:
        for c in s.chunks or ():
            if isinstance(c.content, str):
                c.raw = c.content.encode()
                c.content = None


def pb_attrs(kvs: Any) -> dict[str, Any]:
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
