"""The internal data model shared by the pipeline stages.

Dataclasses, not pydantic models: these objects are built once per span on the hot path, and
validation happens where data enters (decode) rather than on every hand-over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class SpanRole(StrEnum):
    """What a span contributes to a RAG record, whatever dialect described it."""

    ROOT = "root"  # request handler / chain: carries the query and the final answer
    RETRIEVER = "retriever"  # ranked chunks
    RERANKER = "reranker"  # re-ranked chunks: when present, the final ranking
    LLM = "llm"  # model call: the answer and the model name
    OTHER = "other"


class Reject(StrEnum):
    """Reasons for `ragmon_rejected_total{reason}`: a fixed set, so the label stays bounded."""

    DECODE_ERROR = "decode_error"  # not protobuf / not JSON / wrong shape
    INVALID_UTF8 = "invalid_utf8"
    TOO_LARGE = "too_large"
    EMPTY = "empty"  # a message with no spans
    BAD_ATTRIBUTE = "bad_attribute"  # a known attribute with an unusable type or value (field dropped)
    BAD_TIMESTAMP = "bad_timestamp"  # absurd or inverted span times (times dropped, record kept)
    MISSING_QUERY = "missing_query"
    MISSING_ANSWER = "missing_answer"
    EVICTED = "evicted"  # open-trace capacity reached: oldest trace dropped
    LATE_SPAN = "late_span"  # span of a trace already emitted
    TOO_MANY_SPANS = "too_many_spans"  # span past assembly.max_spans_per_trace: dropped
    NOT_RAG = "not_rag"  # a trace with no RAG content at all (health checks, other endpoints): ignored
    QUERY_TYPE_UNKNOWN = (
        "query_type_not_allowed"  # rag.query_type outside the allow-list (mapped, not dropped)
    )


@dataclass(slots=True)
class Chunk:
    id: str
    content: str | None = None
    score: float | None = None
    # The ingest stage's decoder (`decode(..., for_assembly=True)` of OTLP protobuf) leaves the
    # text here as valid UTF-8, `content` None: only the few sampled records ever need it as a
    # string, so the rest never pay for decoding and allocating it. `bytes`, or the compiled
    # decoder's `RawText` (the bytes where they lie in the message; reads and compares as bytes).
    # `text` reads either form.
    raw: Any = field(default=None, repr=False)

    @property
    def text(self) -> str | None:
        return self.content if self.raw is None else str(self.raw, "utf-8")


@dataclass(slots=True)
class SpanFacts:
    """One decoded span, reduced to what RAG assembly needs.

    Every dialect maps onto these fields; `None` means the span did not say.
    """

    trace_id: str  # 32 lowercase hex chars
    span_id: str  # 16 lowercase hex chars
    parent_span_id: str  # "" for a root span
    name: str
    service: str
    start_ns: int
    end_ns: int
    role: SpanRole = SpanRole.OTHER
    query: str | None = None
    answer: str | None = None
    chunks: list[Chunk] | None = None
    model: str | None = None
    query_type: str | None = None
    replay: bool = False
    # Reasons for fields this span had but that could not be used (wrong type, absurd time).
    problems: list[Reject] = field(default_factory=list)


@dataclass(slots=True)
class RagRecord:
    """One RAG request: docs/contract.md's "The RAG record"."""

    trace_id: str
    span_id: str
    service: str
    query: str
    query_type: str
    chunks: list[Chunk]
    answer: str
    model: str | None = None
    start_ns: int = 0  # 0 = unknown
    end_ns: int = 0
    replay: bool = False

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "service": self.service,
            "query": self.query,
            "query_type": self.query_type,
            "chunks": [{"id": c.id, "content": c.text, "score": c.score} for c in self.chunks],
            "answer": self.answer,
            "model": self.model,
            "start": self.start_ns / 1e9 if self.start_ns else None,
            "end": self.end_ns / 1e9 if self.end_ns else None,
            "replay": self.replay,
        }
