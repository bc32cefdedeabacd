"""Decode one Kafka record value into spans (OTLP protobuf / OTLP JSON) or a RAG record (flat JSON).

This is the hot path of the sidecar: protobuf is read with plain field access (no json_format, no
per-span validation) and attributes are turned into one plain dict per span, which
`monitor.ingest.dialects` maps onto `SpanFacts`. Bad input never raises: it comes back as a `Reject`
reason, because one poison message must not stop the consumer.

`otlp_proto` has two implementations with identical results. The compiled one (`_wire.c`, built by
`pip install` where a C compiler exists, set up by `compiled`) walks the wire bytes once and
materialises only the attributes the dialects read, so a span without any costs no attribute
objects, maps the common OpenInference shapes itself (anything else goes to `dialects.apply`), and
with `for_assembly` does not materialise the spans set aside at all; it hands every message it is
not sure about (errors included) to the pure-Python one (`otlp_proto`), which is the reference
(tests/ingest/test_decode_compiled.py compares them). `RAGMON_PURE_PYTHON=1` forces the reference.

The modules, one encoding each: `otlp_proto`, `otlp_json` and `flat_json` (both JSON encodings
parsed by `json_object`); what they share: `decoded` (the result and how it is finished) and
`release` (the release keys).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from monitor.contracts.model import RagRecord, Reject
from monitor.ingest.decode.compiled import compiled_decoder
from monitor.ingest.decode.decoded import Decoded
from monitor.ingest.decode.flat_json import from_flat
from monitor.ingest.decode.json_object import parse_json
from monitor.ingest.decode.otlp_json import from_otlp_json
from monitor.ingest.decode.otlp_proto import from_proto_reference
from monitor.ingest.decode.release import DEFAULT_RELEASE_KEYS, release_keys, store_release_keys
from monitor.kafka.config import Encoding
from monitor.plumbing.compiled import choose

__all__ = [
    "DEFAULT_RELEASE_KEYS",
    "OTLP_PROTO_DECODER",
    "Decoded",
    "compiled_decoder",
    "compiled_feed",
    "decode",
    "flat_record",
    "release_keys",
    "set_release_keys",
]

_JSON_START = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*")  # optional BOM, JSON whitespace


def set_release_keys(keys: tuple[str, ...] | list[str]) -> None:
    """Read a span's release from these attribute keys: for each in order, the span's own
    attribute, then its resource's; the first non-empty string wins."""
    keys = store_release_keys(keys)
    # The compiled module once loaded, in use or not (the differential tests load it beside the
    # pure-Python path): both must read the same keys.
    wire = compiled_decoder() if compiled_decoder.cache_info().currsize else None
    if wire is not None:
        wire.set_release_keys(keys)


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
        obj = parse_json(value)
        if isinstance(obj, Decoded):
            return obj
        if encoding == Encoding.OTLP_JSON:
            return from_otlp_json(obj, now, lean)
        return from_flat(obj, value, now)
    if encoding != Encoding.AUTO:
        return Decoded(error=Reject.DECODE_ERROR, detail=f"unknown encoding {str(encoding)[:40]!r}")

    m = _JSON_START.match(value)
    start = m.end() if m else 0
    if start == len(value):
        return Decoded(error=Reject.EMPTY, detail="blank message")
    if value[start] != 0x7B:  # "{"
        return _from_proto(value, now, lean)
    obj = parse_json(value)
    if isinstance(obj, Decoded):
        # A protobuf can start with b"\n{" (field 1, length 123): only trust "{" at byte 0.
        if start > 0:
            alt = _from_proto(value, now, lean)
            if alt.error is None:
                return alt
        return obj
    if "resourceSpans" in obj or "resource_spans" in obj:
        return from_otlp_json(obj, now, lean)
    return from_flat(obj, value, now)


def _from_proto(value: bytes, now: int, lean: bool) -> Decoded:
    if _wire is not None:
        out: Decoded | None = _wire.decode_spans(value, now, lean)
        if out is not None:
            return out
    return from_proto_reference(value, now, lean)


def compiled_feed(encoding: Encoding) -> Callable[..., int] | None:
    """`_wire.feed`, the ingest stage's compiled loop over plain messages, where it applies: the
    compiled decoder is in use and the encoding may be protobuf."""
    if _wire is None or encoding not in (Encoding.OTLP_PROTO, Encoding.AUTO):
        return None
    feed: Callable[..., int] = _wire.feed
    return feed


# Looked up here at each call, so that the differential tests can swap the path in use.
_wire, OTLP_PROTO_DECODER = choose("decoder", "monitor.ingest._wire", compiled_decoder)


def flat_record(fields: dict[str, Any]) -> RagRecord:
    """One record from a flat-JSON object's fields, through this decoder (ValueError: rejected):
    how tools outside the stream (calibration labels) build a record exactly as ingest would."""
    decoded = decode(json.dumps(fields).encode(), Encoding.JSON)
    if decoded.error is not None or not decoded.records:
        raise ValueError(f"record rejected: {decoded.error} {decoded.detail}".strip())
    return decoded.records[0]
