"""The OpenInference attribute keys the sidecar's decoder reads (`monitor.ingest.dialects`), and
the attribute dicts built from text and documents under the content policy."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from monitor.instrument.content import ContentPolicy
from monitor.instrument.extract import DocumentExtractor

KIND = "openinference.span.kind"
INPUT = "input.value"
INPUT_MIME = "input.mime_type"
OUTPUT = "output.value"
OUTPUT_MIME = "output.mime_type"
MODEL = "llm.model_name"
IN_ROLE = "llm.input_messages.0.message.role"
IN_CONTENT = "llm.input_messages.0.message.content"
OUT_ROLE = "llm.output_messages.0.message.role"
OUT_CONTENT = "llm.output_messages.0.message.content"
QUERY_TYPE = "rag.query_type"
REPLAY = "rag.replay"

OI_KIND = {"request": "CHAIN", "retriever": "RETRIEVER", "reranker": "RERANKER", "generator": "LLM"}
DOC_PREFIX = {"retriever": "retrieval.documents.", "reranker": "reranker.output_documents."}
_JSONISH = frozenset('{["')


def put_text(attrs: dict[str, Any], key: str, mime_key: str | None, text: str, policy: ContentPolicy) -> None:
    value = policy.clean(text)
    attrs[key] = value
    # Text that looks like JSON would be parsed by readers: say it is plain text.
    if mime_key is not None and value[:1] in _JSONISH:
        attrs[mime_key] = "text/plain"


_DOC_KEYS: dict[str, list[tuple[str, str, str]]] = {}


def _doc_keys(prefix: str, n: int) -> list[tuple[str, str, str]]:
    keys = _DOC_KEYS.get(prefix)
    if keys is None:
        keys = _DOC_KEYS[prefix] = []
    while len(keys) < n:
        i = len(keys)
        base = f"{prefix}{i}.document."
        keys.append((base + "id", base + "content", base + "score"))
    return keys


def document_attrs(
    policy: ContentPolicy, prefix: str, items: Iterable[Any], extract: DocumentExtractor
) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    limit = policy.max_documents
    if not limit:
        return attrs
    contexts = policy.capture_contexts
    clean = policy.clean
    i = 0
    keys = _doc_keys(prefix, 16)
    for item in items:
        if i >= limit:
            break
        did, content, score = extract(item)
        if i >= len(keys):
            keys = _doc_keys(prefix, 2 * len(keys))
        kid, kcontent, kscore = keys[i]
        if did is not None:
            attrs[kid] = did
        if content is not None and contexts:
            attrs[kcontent] = clean(content)
        if score is not None:
            attrs[kscore] = score
        if did is None and (content is None or not contexts) and score is None:
            continue  # an empty slot would end the decoder's contiguous index scan early
        i += 1
    return attrs
