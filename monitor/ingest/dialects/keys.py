"""The attribute keys the dialects read, and the limits on what they read.

The compiled decoder (`_wire.c`) mirrors these: `decode.compiled.compiled_decoder` hands it `ATTRIBUTE_KEYS`,
`INDEXED_PREFIXES` and `MERGED_EVENTS`, and its own mapping of the common OpenInference shapes
copies the token, session and user keys and `MAX_TOKENS` (tests/ingest/test_decode_compiled.py
holds the two to each other).
"""

from __future__ import annotations

from typing import Any

# Span events whose attributes are folded into the span's attributes (setdefault): GenAI semconv
# before 1.37 put prompt and completion on events, 1.37+ may put the messages on an event too.
MERGED_EVENTS = frozenset(
    {
        "gen_ai.content.prompt",
        "gen_ai.content.completion",
        "gen_ai.client.inference.operation.details",
    }
)


# An LLM span's generator tokens, in order of precedence: GenAI semconv (1.37+, then the older
# names Traceloop still writes), then OpenInference's. The first key present decides.
INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
OUTPUT_TOKEN_KEYS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
)
# More tokens than any model's context window takes in one call: a hostile or broken value.
MAX_TOKENS = 10_000_000

# The conversation and the end user, first key present: OpenInference and the GenAI semantic
# conventions (`gen_ai.conversation.id`, semconv 1.37; `user.id`, the general `user` namespace;
# `enduser.id`, its deprecated form), then Traceloop's association properties.
SESSION_KEYS = ("session.id", "gen_ai.conversation.id", "traceloop.association.properties.session_id")
USER_KEYS = ("user.id", "enduser.id", "traceloop.association.properties.user_id")
# Longer ids are cut: they ride on every sample and results line.
MAX_ID_CHARS = 256

# Attribute key prefixes of GenAI instrumentations this decoder does not read (the Vercel AI SDK,
# MLflow, Langfuse, LangSmith, Google's ADK, W&B Weave, Prompt flow). A span carrying them and
# nothing readable is `unread`: its trace, if it makes no request, is `unreadable`, not `not_rag`.
UNKNOWN_PREFIXES = ("ai.", "mlflow.", "langfuse.", "langsmith.", "gcp.vertex.agent.", "weave.", "promptflow.")
MAX_UNREAD_KEYS = 16

# Every attribute key `apply` and `wants_events` may read: exact keys, and the indexed families by
# prefix. The compiled decoder (`_wire.c`) materialises only these, so a span with none of them
# (HTTP, database, cache, framework spans) costs no attribute objects, and `apply` sees the same
# answers to every lookup it makes. Reading a new key here means adding it below
# (tests/ingest/test_decode_compiled.py checks this with a dict that records every lookup).
ATTRIBUTE_KEYS = frozenset(
    {
        "openinference.span.kind",
        "gen_ai.operation.name",
        "traceloop.span.kind",
        "input.value",
        "input.mime_type",
        "output.value",
        "output.mime_type",
        "metadata",
        "rag.query_type",
        "rag.replay",
        "llm.model_name",
        "llm.request.type",
        "llm.request.model",
        "llm.response.model",
        "gen_ai.system",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.retrieval.query.text",
        "gen_ai.retrieval.documents",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.prompt",
        "gen_ai.completion",
        "traceloop.entity.input",
        "traceloop.entity.output",
        "traceloop.entity.name",
        "traceloop.mime_type",
        "reranker.query",
        "reranker.model_name",
        "reranker.mime_type",
        # Haystack's own tracer (`haystack.tracing.OpenTelemetryTracer`, content tracing on)
        "haystack.component.type",
        "haystack.component.input",
        "haystack.component.output",
        "haystack.pipeline.input_data",
        "haystack.pipeline.output_data",
        "haystack.agent.step.llm.output",
        *SESSION_KEYS,
        *USER_KEYS,
        *INPUT_TOKEN_KEYS,
        *OUTPUT_TOKEN_KEYS,
    }
)
INDEXED_PREFIXES = (
    "retrieval.documents.",
    "reranker.output_documents.",
    "llm.input_messages.",
    "llm.output_messages.",
    "gen_ai.prompt.",
    "gen_ai.completion.",
    *UNKNOWN_PREFIXES,
)


def wants_events(attrs: dict[str, Any]) -> bool:
    """Only GenAI-semconv spans keep content on events: skip reading events for everything else."""
    return (
        "gen_ai.operation.name" in attrs
        or "gen_ai.system" in attrs
        or "gen_ai.provider.name" in attrs
        or "gen_ai.request.model" in attrs
    )
