"""The LangChain RAG workload the langchain_* compat apps share: real langchain-core LCEL chains over
harness.CORPUS (InMemoryVectorStore, DeterministicFakeEmbedding, fake chat/completion models that
answer harness.ANSWER). Each app only differs by the instrumentor it installs before `run()`.

Requests (one trace each, distinct queries):
  invoke           chain.invoke(q)
  stream           chain.stream(q), fully consumed
  completion_llm   same RAG chain with a completion-style LLM (FakeListLLM) and a PromptTemplate
  query_rewrite    an LLM rewrites the query, the rewritten query is retrieved with, then generation
  openai_invoke    the invoke chain with langchain-openai's ChatOpenAI against fake_openai (model, tokens)
  openai_stream    the same, streamed, with stream_options include_usage
Not requests:
  index_build      vectorstore.add_texts(...) inside a RunnableLambda
  embedding        embeddings.embed_documents(...) inside a RunnableLambda
(The main vector store is built outside any runnable: LangChain emits no callback for it.)
"""

from __future__ import annotations

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI

from tests.compat.apps import fake_openai
from tests.compat.apps.harness import ANSWER, CORPUS, Expected, emit

N = 10  # more than enough fake responses for every call

Q_INVOKE = "How tall is the Eiffel Tower?"
Q_STREAM = "How tall is the Eiffel Tower, in metres?"
Q_COMPLETION = "What is the height of the Eiffel Tower?"
Q_REWRITE = "eiffel tower height pls"
REWRITTEN = "How tall is the Eiffel Tower in Paris?"
Q_OPENAI = "Where does the Danube end?"
Q_OPENAI_STREAM = "Where does the Rhine rise?"
EMBED_TEXT = "Which river flows into the Black Sea?"

# The documents format_docs last received: what actually fed the final generation, in rank order.
_fed: list[Document] = []


def format_docs(docs: list[Document]) -> str:
    _fed[:] = docs
    return "\n\n".join(d.page_content for d in docs)


def _fed_expected(style: str, query: str) -> Expected:
    return Expected(
        style=style,
        query=query,
        chunk_ids=[d.id or d.metadata["id"] for d in _fed],
        chunk_texts=[d.page_content for d in _fed],
    )


def run() -> None:
    embeddings = DeterministicFakeEmbedding(size=16)
    vectorstore = InMemoryVectorStore(embeddings)
    keys = list(CORPUS)
    vectorstore.add_documents(
        [Document(id=k, page_content=CORPUS[k], metadata={"id": k}) for k in keys], ids=keys
    )
    retriever = vectorstore.as_retriever(search_kwargs={"k": 2})

    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "Answer the question using only this context:\n\n{context}"),
            ("human", "{question}"),
        ]
    )
    llm = FakeListChatModel(responses=[ANSWER] * N)
    chain = (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | prompt
        | llm
        | StrOutputParser()
    )

    # (a) invoke
    out = chain.invoke(Q_INVOKE)
    assert out == ANSWER, out
    emit(_fed_expected("invoke", Q_INVOKE))

    # (b) stream, fully consumed
    out = "".join(chain.stream(Q_STREAM))
    assert out == ANSWER, out
    emit(_fed_expected("stream", Q_STREAM))

    # (c) completion-style LLM
    completion_prompt = PromptTemplate.from_template(
        "Answer the question using only this context:\n\n{context}\n\nQuestion: {question}\nAnswer:"
    )
    completion_chain = (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | completion_prompt
        | FakeListLLM(responses=[ANSWER] * N)
        | StrOutputParser()
    )
    out = completion_chain.invoke(Q_COMPLETION)
    assert out == ANSWER, out
    emit(_fed_expected("completion_llm", Q_COMPLETION))

    # (d) query rewriting: a first LLM call rewrites the query, the rewrite is what gets retrieved
    rewrite = (
        ChatPromptTemplate.from_template("Rewrite this as a clear search query: {question}")
        | FakeListChatModel(responses=[REWRITTEN] * N)
        | StrOutputParser()
    )
    rewrite_chain = (
        {"context": rewrite | retriever | format_docs, "question": RunnablePassthrough()}
        | prompt
        | llm
        | StrOutputParser()
    )
    out = rewrite_chain.invoke(Q_REWRITE)
    assert out == ANSWER, out
    # (the spans also carry REWRITTEN: the rewriter's answer and the retriever's query)
    emit(_fed_expected("query_rewrite", Q_REWRITE))

    # a real chat model client (langchain-openai's ChatOpenAI, over real HTTP to the local fake
    # OpenAI server): the one place the spans carry a model name and token counts
    with fake_openai.serving() as base_url:
        openai_llm = ChatOpenAI(model=fake_openai.MODEL, base_url=base_url, api_key="sk-fake", max_retries=0)
        openai_chain = (
            {"context": retriever | format_docs, "question": RunnablePassthrough()}
            | prompt
            | openai_llm
            | StrOutputParser()
        )
        out = openai_chain.invoke(Q_OPENAI)
        assert out == ANSWER, out
        exp = _fed_expected("openai_invoke", Q_OPENAI)
        exp.extra = {"model": fake_openai.MODEL}
        emit(exp)

        openai_chain = (
            {"context": retriever | format_docs, "question": RunnablePassthrough()}
            | prompt
            | openai_llm.bind(stream_options={"include_usage": True})
            | StrOutputParser()
        )
        out = "".join(openai_chain.stream(Q_OPENAI_STREAM))
        assert out == ANSWER, out
        exp = _fed_expected("openai_stream", Q_OPENAI_STREAM)
        exp.extra = {"model": fake_openai.MODEL}
        emit(exp)

    # (e) not requests: an index build and an embedding call, each inside a traced runnable
    def index_build(texts: list[str]) -> list[str]:
        store = InMemoryVectorStore(embeddings)
        ids = [f"new-{i}" for i in range(len(texts))]
        return store.add_texts(texts, metadatas=[{"id": i} for i in ids], ids=ids)

    extra_texts = [
        "The Seine flows through Paris into the English Channel.",
        "Mont Blanc is the highest mountain in the Alps.",
    ]
    RunnableLambda(index_build).invoke(extra_texts)
    emit(Expected(style="index_build", query=extra_texts[0], answer="", kind="not_request"))

    def embed_documents(texts: list[str]) -> list[list[float]]:
        return embeddings.embed_documents(texts)

    RunnableLambda(embed_documents).invoke([EMBED_TEXT])
    emit(Expected(style="embedding", query=EMBED_TEXT, answer="", kind="not_request"))
