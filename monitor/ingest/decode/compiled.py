"""Setting up the compiled OTLP protobuf decoder (`_wire.c`): it is handed the installed schema, the
dialects' key tables and the model classes, so that it builds exactly what the reference does."""

from __future__ import annotations

import functools
from typing import Any

from monitor.contracts.model import Chunk, Reject, SpanFacts, SpanRole
from monitor.ingest import dialects
from monitor.ingest.decode.decoded import UNKNOWN_SERVICE, Decoded, finish
from monitor.ingest.decode.release import release_keys
from monitor.plumbing.compiled import slots_layout


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
        finish=finish,
        unknown_service=UNKNOWN_SERVICE,
    )
    wire.set_release_keys(release_keys())
    return wire
