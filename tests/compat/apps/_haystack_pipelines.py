"""Tiny real Haystack pipelines shared by haystack_native.py and haystack_openinference.py.

Runs on haystack-ai 3.x (the current release) and 2.x. 3.0 removed the non-chat OpenAIGenerator, so there
the "non-chat" style uses the 3.x `LLM` component (string user_prompt template wrapping OpenAIChatGenerator);
on 2.x it is PromptBuilder -> OpenAIGenerator.
"""

from __future__ import annotations

from typing import Any

from haystack import Document, Pipeline
from haystack.components.builders import ChatPromptBuilder
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.components.writers import DocumentWriter
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.utils import Secret

from tests.compat.apps.fake_openai import MODEL
from tests.compat.apps.harness import CORPUS, Expected, emit

TEMPLATE = (
    "Answer from the context.\nContext:\n{% for d in documents %}- {{ d.content }}\n{% endfor %}"
    "Question: {{ query }}"
)


def documents() -> list[Document]:
    return [Document(id=k, content=v) for k, v in CORPUS.items()]


def chat_generator(url: str, **kw: Any) -> OpenAIChatGenerator:
    return OpenAIChatGenerator(api_key=Secret.from_token("sk-fake"), model=MODEL, api_base_url=url, **kw)


def chat_rag(store: InMemoryDocumentStore, url: str, **kw: Any) -> Pipeline:
    p = Pipeline()
    p.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=2))
    p.add_component(
        "prompt_builder",
        ChatPromptBuilder(
            template=[ChatMessage.from_user(TEMPLATE)], required_variables=["query", "documents"]
        ),
    )
    p.add_component("llm", chat_generator(url, **kw))
    p.connect("retriever.documents", "prompt_builder.documents")
    p.connect("prompt_builder.prompt", "llm.messages")
    return p


def llm_component_rag(store: InMemoryDocumentStore, url: str) -> Pipeline:
    from haystack.components.generators.chat import LLM

    p = Pipeline()
    p.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=2))
    p.add_component(
        "llm",
        LLM(
            chat_generator=chat_generator(url),
            user_prompt=TEMPLATE,
            required_variables=["query", "documents"],
        ),
    )
    p.connect("retriever.documents", "llm.documents")
    return p


def retrieved(store: InMemoryDocumentStore, query: str) -> list[Document]:
    """What the pipeline's retriever returned, re-asked of the store outside any pipeline (no spans):
    the pipelines run without include_outputs_from, as users run them, so their result lacks it."""
    return store.bm25_retrieval(query=query, top_k=2)


def _expect(style: str, query: str, docs: list[Document], answer: str) -> None:
    emit(
        Expected(
            style=style,
            query=query,
            answer=answer,
            chunk_ids=[d.id for d in docs],
            chunk_texts=[d.content or "" for d in docs],
            extra={"model": MODEL},
        )
    )


def run_all(url: str) -> None:
    store = InMemoryDocumentStore()

    # (d) indexing pipeline: DocumentWriter writing the corpus.
    index = Pipeline()
    index.add_component("writer", DocumentWriter(document_store=store))
    index.run({"writer": {"documents": documents()}})
    emit(Expected(style="index_build", query="", answer="", kind="not_request"))

    # (a) retriever -> ChatPromptBuilder -> OpenAIChatGenerator
    q = "How tall is the Eiffel Tower?"
    out = chat_rag(store, url).run({"retriever": {"query": q}, "prompt_builder": {"query": q}})
    _expect("chat_pipeline", q, retrieved(store, q), out["llm"]["replies"][0].text)

    q = "Which museum in Paris is the most visited?"
    try:  # haystack-ai 2.x: (b) retriever -> PromptBuilder -> OpenAIGenerator (non-chat)
        from haystack.components.generators import OpenAIGenerator  # type: ignore[attr-defined]
    except ImportError:  # 3.x: (b) retriever -> LLM component (its replacement for a string prompt)
        out = llm_component_rag(store, url).run({"retriever": {"query": q}, "llm": {"query": q}})
        _expect("llm_component_pipeline", q, retrieved(store, q), out["llm"]["last_message"].text)
    else:
        from haystack.components.builders import PromptBuilder

        p = Pipeline()
        p.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=2))
        p.add_component(
            "prompt_builder", PromptBuilder(template=TEMPLATE, required_variables=["query", "documents"])
        )
        p.add_component(
            "llm", OpenAIGenerator(api_key=Secret.from_token("sk-fake"), model=MODEL, api_base_url=url)
        )
        p.connect("retriever.documents", "prompt_builder.documents")
        p.connect("prompt_builder.prompt", "llm.prompt")
        out = p.run({"retriever": {"query": q}, "prompt_builder": {"query": q}})
        _expect("prompt_generator_pipeline", q, retrieved(store, q), out["llm"]["replies"][0])

    # (c) chat pipeline with a streaming_callback
    q = "Where does the Rhine flow into the sea?"
    chunks: list[str] = []
    out = chat_rag(store, url, streaming_callback=lambda c: chunks.append(c.content)).run(
        {"retriever": {"query": q}, "prompt_builder": {"query": q}}
    )
    assert "".join(chunks) == out["llm"]["replies"][0].text, (chunks, out)
    _expect("chat_pipeline_streaming", q, retrieved(store, q), out["llm"]["replies"][0].text)
