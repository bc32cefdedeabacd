"""The LlamaIndex pipeline both LlamaIndex compat apps run (OpenInference and OpenLLMetry
instrumentations): a VectorStoreIndex over harness.CORPUS, a fake LLM that always answers
harness.ANSWER and a deterministic bag-of-words embedding, all in-process (no network).

Each app instruments first, then calls `run(provider)`."""

from __future__ import annotations

import contextvars
import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any

from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import NodeWithScore
from opentelemetry.sdk.trace import TracerProvider

from tests.compat.apps import harness
from tests.compat.apps.harness import ANSWER, CORPUS, Expected

MODEL = "fake-model"
USAGE = {"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51}
TOP_K = 2


def _raw() -> dict[str, Any]:
    # OpenAI-shaped raw payload so that both instrumentations find a model and token counts.
    return {"model": MODEL, "usage": dict(USAGE)}


def _words(answer: str) -> list[str]:
    parts = answer.split(" ")
    return [p + (" " if i < len(parts) - 1 else "") for i, p in enumerate(parts)]


class FakeLLM(CustomLLM):
    """A completion model (is_chat_model False, like MockLLM): always answers ANSWER."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=MODEL, is_chat_model=False, num_output=64, context_window=4096)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=ANSWER, raw=_raw())

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        def gen() -> CompletionResponseGen:
            text = ""
            for delta in _words(ANSWER):
                text += delta
                yield CompletionResponse(text=text, delta=delta, raw=_raw())

        return gen()


class FakeChatLLM(FakeLLM):
    """A chat model (is_chat_model True, as OpenAI's LLMs are): the synthesizer calls .chat()."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=MODEL, is_chat_model=True, num_output=64, context_window=4096)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=ANSWER), raw=_raw())

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        def gen() -> ChatResponseGen:
            text = ""
            for delta in _words(ANSWER):
                text += delta
                yield ChatResponse(
                    message=ChatMessage(role=MessageRole.ASSISTANT, content=text),
                    delta=delta,
                    raw=_raw(),
                )

        return gen()


class BagOfWordsEmbedding(BaseEmbedding):
    """Deterministic hashed bag-of-words vectors, so that retrieval ranks (and scores) mean something
    (MockEmbedding gives every text the same vector, hence tied scores)."""

    embed_dim: int = 256

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * self.embed_dim
        for w in re.findall(r"[a-z0-9]+", text.lower()):
            if len(w) < 3:
                continue
            v[int(hashlib.sha256(w.encode()).hexdigest(), 16) % self.embed_dim] += 1.0
        n = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / n for x in v]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vec(text)


def _expected(style: str, query: str, nodes: list[NodeWithScore], answer: str) -> Expected:
    exp = Expected(
        style=style,
        query=query,
        answer=answer,
        chunk_ids=[n.node.node_id for n in nodes],
        chunk_texts=[n.node.get_content() for n in nodes],
        extra={"model": MODEL, "scores": [round(float(n.score or 0.0), 6) for n in nodes]},
    )
    assert answer == ANSWER, answer
    return exp


def run(provider: TracerProvider) -> None:
    Settings.llm = FakeLLM()
    Settings.embed_model = BagOfWordsEmbedding()

    # (e) index build, instrumented. Document ids are the corpus keys; the splitter's id_func keeps
    # each (single-chunk) node's id equal to its document's id.
    docs = [Document(text=text, id_=key) for key, text in CORPUS.items()]
    splitter = SentenceSplitter(chunk_size=512, chunk_overlap=0, id_func=lambda i, doc: doc.doc_id)
    index = VectorStoreIndex.from_documents(docs, transformations=[splitter])
    assert sorted(index.docstore.docs) == sorted(CORPUS), list(index.docstore.docs)
    harness.emit(Expected(style="index_build", query="", answer="", kind="not_request"))

    # Each request runs in its own copy of the context, as a server's per-request task/thread does
    # (asyncio tasks and Starlette's threadpool copy the context). Without this, a span context an
    # instrumentation attaches and never detaches (OpenLLMetry's streaming spans) leaks into every
    # later request of the script, which then all land in the streamed request's trace.
    for request in (
        _query,
        _query_streaming,
        _chat_context,
        _query_chat_model,
        _manual_retrieve_complete,
        _query_streaming_chat_model,
        _chat_context_streaming,
    ):
        contextvars.copy_context().run(request, index, provider)


def _query(index: VectorStoreIndex, provider: TracerProvider) -> None:
    # (a) plain query engine (completion LLM: the synthesizer calls llm.predict -> complete).
    q = "How tall is the Eiffel Tower?"
    resp = index.as_query_engine(similarity_top_k=TOP_K).query(q)
    harness.emit(_expected("query", q, resp.source_nodes, str(resp)))


def _query_streaming(index: VectorStoreIndex, provider: TracerProvider) -> None:
    # (b) streaming query engine, response_gen consumed fully (completion LLM: stream_complete).
    q = "Where does the Eiffel Tower stand in Paris?"
    sresp = index.as_query_engine(similarity_top_k=TOP_K, streaming=True).query(q)
    answer = "".join(sresp.response_gen)
    harness.emit(_expected("query_streaming", q, sresp.source_nodes, answer))


def _chat_context(index: VectorStoreIndex, provider: TracerProvider) -> None:
    # (c) chat engine, "context" mode (retrieve on the message, then the synthesizer answers).
    q = "Tell me the height of the Eiffel Tower."
    chat_engine = index.as_chat_engine(chat_mode="context", similarity_top_k=TOP_K)
    cresp = chat_engine.chat(q)
    harness.emit(_expected("chat_context", q, cresp.source_nodes, str(cresp)))


def _query_chat_model(index: VectorStoreIndex, provider: TracerProvider) -> None:
    # (d) query engine over a chat model (is_chat_model=True, as OpenAI models are): the LLM span is a
    # chat call (messages) instead of a completion (prompt).
    q = "What is the height in metres of the Eiffel Tower?"
    resp = index.as_query_engine(similarity_top_k=TOP_K, llm=FakeChatLLM()).query(q)
    harness.emit(_expected("query_chat_model", q, resp.source_nodes, str(resp)))


def _manual_retrieve_complete(index: VectorStoreIndex, provider: TracerProvider) -> None:
    # (f) hand-rolled RAG: retriever.retrieve + llm.complete, wrapped in the user's own OTel span
    # (without it the retrieval and the LLM call would be two unrelated traces).
    q = "Which famous Paris tower is 330 metres tall?"
    tracer = provider.get_tracer("compat-app")
    with tracer.start_as_current_span("rag-request"):
        nodes = index.as_retriever(similarity_top_k=TOP_K).retrieve(q)
        context = "\n".join(n.node.get_content() for n in nodes)
        cr = Settings.llm.complete(f"Context:\n{context}\n\nQuestion: {q}\nAnswer:")
    harness.emit(_expected("manual_retrieve_complete", q, nodes, cr.text))


def _query_streaming_chat_model(index: VectorStoreIndex, provider: TracerProvider) -> None:
    # (g) streaming query engine over a chat model (stream_chat), response_gen consumed fully.
    q = "In which city is the Eiffel Tower, and how tall is it?"
    sresp = index.as_query_engine(similarity_top_k=TOP_K, streaming=True, llm=FakeChatLLM()).query(q)
    answer = "".join(sresp.response_gen)
    harness.emit(_expected("query_streaming_chat_model", q, sresp.source_nodes, answer))


def _chat_context_streaming(index: VectorStoreIndex, provider: TracerProvider) -> None:
    # (h) chat engine stream_chat ("context" mode, chat model), response_gen consumed fully.
    q = "Give me the Eiffel Tower's height, please."
    chat_engine = index.as_chat_engine(chat_mode="context", similarity_top_k=TOP_K, llm=FakeChatLLM())
    sresp = chat_engine.stream_chat(q)
    answer = "".join(sresp.response_gen)
    harness.emit(_expected("chat_context_streaming", q, sresp.source_nodes, answer))
