"""Retrieved chunks: OpenInference's indexed documents, GenAI semconv's JSON list, and the
document shapes frameworks serialise (LlamaIndex nodes, LangChain Documents), each made one `Chunk`."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import Any

from monitor.contracts.model import Chunk, Reject
from monitor.ingest.dialects.scalars import first_of, key_rows, loads, scalar_text

_ID_KEYS = ("id", "doc_id", "document_id", "chunk_id", "id_", "node_id")
_CONTENT_KEYS = ("content", "page_content", "text")
_OI_DOC_SUFFIXES = (".document.id", ".document.content", ".document.score", ".document.metadata")


def has_oi_docs(attrs: dict[str, Any], prefix: str) -> bool:
    return (
        prefix + "0.document.id" in attrs
        or prefix + "0.document.content" in attrs
        or prefix + "0.document.score" in attrs
    )


def retrieved(attrs: dict[str, Any], problems: list[Reject]) -> list[Chunk] | None:
    if has_oi_docs(attrs, "retrieval.documents."):
        return oi_documents(attrs, "retrieval.documents.", problems)
    docs = attrs.get("gen_ai.retrieval.documents")
    if docs is not None:
        parsed = loads(docs)
        if isinstance(parsed, list):
            return chunks_from_items(parsed, problems)
        problems.append(Reject.BAD_ATTRIBUTE)
    return None


def oi_documents(attrs: dict[str, Any], prefix: str, problems: list[Reject]) -> list[Chunk] | None:
    """``{prefix}{i}.document.id|content|score|metadata``, in index (= rank) order from 0."""
    out: list[Chunk] = []
    get = attrs.get
    for id_key, content_key, score_key, meta_key in key_rows(prefix, _OI_DOC_SUFFIXES, len(attrs)):
        raw_id = get(id_key)
        content = get(content_key)
        score = get(score_key)
        if raw_id is None and content is None and score is None:
            if meta_key not in attrs:
                break
            continue
        if (
            type(raw_id) is str
            and raw_id
            and type(content) is str
            and type(score) is float
            and math.isfinite(score)
        ):  # the well-formed case, without a call
            out.append(Chunk(raw_id, content, score))
            continue
        if raw_id is None and meta_key in attrs:
            raw_id = _metadata_id(attrs[meta_key])
        chunk = make_chunk(raw_id, content, score, problems)
        if chunk is not None:
            out.append(chunk)
    return out if out or has_oi_docs(attrs, prefix) else None


def chunks_from_items(items: Iterable[Any], problems: list[Reject]) -> list[Chunk]:
    """Chunks from a JSON list of ``{"id", "content", "score"}`` objects (or bare strings)."""
    out: list[Chunk] = []
    for item in items:
        if isinstance(item, str) and item[:1] == "{":  # a serialised node (OpenLLMetry's LlamaIndex)
            parsed = loads(item)
            item = parsed if isinstance(parsed, dict) else item
        if isinstance(item, str):
            chunk = make_chunk(None, item, None, problems)
        elif isinstance(item, dict):
            score = item.get("score")
            if isinstance(item.get("node"), dict):  # LlamaIndex NodeWithScore: {"node": {...}, "score"}
                item = item["node"]
            if "kwargs" in item and isinstance(item["kwargs"], dict):  # LangChain serialised Document
                item = item["kwargs"]
            raw_id = first_of(item, _ID_KEYS)
            if raw_id is None and "metadata" in item:
                raw_id = _metadata_id(item["metadata"])
            chunk = make_chunk(raw_id, first_of(item, _CONTENT_KEYS), score, problems)
        else:
            problems.append(Reject.BAD_ATTRIBUTE)
            continue
        if chunk is not None:
            out.append(chunk)
    return out


def make_chunk(raw_id: Any, content: Any, score: Any, problems: list[Reject]) -> Chunk | None:
    """One chunk; a chunk without a usable id gets a stable id derived from its content."""
    if (
        type(raw_id) is str
        and raw_id
        and (content is None or type(content) is str)
        and (score is None or (type(score) is float and math.isfinite(score)))
    ):
        return Chunk(raw_id, content, score)
    cid: str | None = None
    if raw_id is not None:
        if isinstance(raw_id, str):
            cid = raw_id
        elif isinstance(raw_id, int | float) and not isinstance(raw_id, bool):
            cid = str(raw_id)
        else:
            problems.append(Reject.BAD_ATTRIBUTE)
    text = scalar_text(content, problems) if content is not None else None
    sc = parse_score(score, problems) if score is not None else None
    if not cid:
        if text is None:
            return None
        cid = content_id(text)
    return Chunk(cid, text, sc)


def content_id(text: str) -> str:
    """Stable id for an id-less chunk, so the same passage keeps one id across requests."""
    return "c-" + hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def parse_score(value: Any, problems: list[Reject]) -> float | None:
    if isinstance(value, bool):
        problems.append(Reject.BAD_ATTRIBUTE)
        return None
    if isinstance(value, int | float):
        f = float(value)
    elif isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            problems.append(Reject.BAD_ATTRIBUTE)
            return None
    else:
        problems.append(Reject.BAD_ATTRIBUTE)
        return None
    if not math.isfinite(f):
        problems.append(Reject.BAD_ATTRIBUTE)
        return None
    return f


def _metadata_id(metadata: Any) -> Any:
    md = loads(metadata)
    return first_of(md, _ID_KEYS) if isinstance(md, dict) else None
