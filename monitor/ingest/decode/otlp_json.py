"""OTLP/JSON: the spans of an `ExportTraceServiceRequest` as the OTLP/JSON mapping (or protobuf's
json_format) writes it; a malformed part is dropped and counted, never raised."""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from typing import Any

from monitor.contracts.model import Reject, SpanFacts
from monitor.ingest import dialects
from monitor.ingest.decode.decoded import HEX, UNKNOWN_SERVICE, Decoded, bad_times, finish, set_aside
from monitor.ingest.decode.release import release_keys, resource_releases, span_release

# OTLP `Status.code` ERROR as OTLP/JSON writes the enum (its number); the name is accepted as
# protobuf's JSON mapping writes it.
_JSON_STATUS_ERROR = (2, "2", "STATUS_CODE_ERROR")


def _jget(d: dict[str, Any], camel: str, snake: str) -> Any:
    v = d.get(camel)
    return v if v is not None else d.get(snake)


def from_otlp_json(obj: dict[str, Any], now: int, lean: bool) -> Decoded:
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
    return finish(*set_aside(spans, lean), problems, dropped)


def _json_service(resource: Any, problems: list[Reject]) -> tuple[str, tuple[str, ...]]:
    """The resource's service name and its value of each release key."""
    none = ("",) * len(release_keys())
    if not isinstance(resource, dict):
        return UNKNOWN_SERVICE, none
    attrs, bad = _json_attrs(resource.get("attributes"))
    releases = resource_releases(attrs) if release_keys() else none
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
    if bad_times(start, end, now):
        facts.start_ns = facts.end_ns = 0
        facts.problems.append(Reject.BAD_TIMESTAMP)
    status = sp.get("status")
    if isinstance(status, dict) and status.get("code") in _JSON_STATUS_ERROR:
        facts.error = True
    attrs, bad = _json_attrs(sp.get("attributes"))
    facts.release = span_release(attrs, resource_release)
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
    if len(v) == 2 * nbytes and HEX.issuperset(v):
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
