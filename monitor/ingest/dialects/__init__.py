"""Map span attributes of every supported dialect onto `SpanFacts`.

The decoder turns each wire format into one flat `dict[str, Any]` of attribute values (str, int,
float, bool, bytes, list, dict) and hands it here, so the dialect rules exist once whatever the
encoding. Lookups are by exact key, including indexed families (``retrieval.documents.{i}...``),
which are probed through precomputed key strings and only when the span's kind or its index-0 key
says they are there: no scan over all keys, so the per-span cost stays a few dict lookups.

By concern: `keys` (the attribute keys read and the limits, which the compiled decoder `_wire.c`
mirrors), `facts` (`apply`, `is_inert`), `roles`, `messages` (query and answer text), `chunks`,
`traceloop` (OpenLLMetry, its LangChain and LlamaIndex spans), `haystack` (Haystack's own tracer)
and `scalars`. What the rest of the sidecar uses is importable from here.
"""

from __future__ import annotations

from monitor.ingest.dialects.chunks import chunks_from_items, content_id, make_chunk, parse_score
from monitor.ingest.dialects.facts import apply, is_inert
from monitor.ingest.dialects.keys import (
    ATTRIBUTE_KEYS,
    INDEXED_PREFIXES,
    INPUT_TOKEN_KEYS,
    MAX_ID_CHARS,
    MAX_TOKENS,
    MAX_UNREAD_KEYS,
    MERGED_EVENTS,
    OUTPUT_TOKEN_KEYS,
    SESSION_KEYS,
    UNKNOWN_PREFIXES,
    USER_KEYS,
    wants_events,
)
from monitor.ingest.dialects.messages import dig_text
from monitor.ingest.dialects.scalars import parse_bool

__all__ = [
    "ATTRIBUTE_KEYS",
    "INDEXED_PREFIXES",
    "INPUT_TOKEN_KEYS",
    "MAX_ID_CHARS",
    "MAX_TOKENS",
    "MAX_UNREAD_KEYS",
    "MERGED_EVENTS",
    "OUTPUT_TOKEN_KEYS",
    "SESSION_KEYS",
    "UNKNOWN_PREFIXES",
    "USER_KEYS",
    "apply",
    "chunks_from_items",
    "content_id",
    "dig_text",
    "is_inert",
    "make_chunk",
    "parse_bool",
    "parse_score",
    "wants_events",
]
