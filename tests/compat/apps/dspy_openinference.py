"""A tiny DSPy RAG program traced by openinference-instrumentation-dspy.

Requests (each a distinct question):
  * "dspy-colbert": `dspy.Retrieve(k=2)` with `dspy.configure(rm=dspy.ColBERTv2(url=...))` pointed at a
    local fake ColBERTv2 server (the classic DSPy RAG tutorial shape), then `dspy.ChainOfThought`.
    Spans: Retrieve.forward (RETRIEVER, texts only) > ColBERTv2.__call__ (RETRIEVER, id/text/score).
  * "dspy-function": a plain Python search function (the newer DSPy tutorial shape), then
    `dspy.Predict`. No retriever span: the passages only show up inside the Predict/LM inputs.
  * "dspy-multihop": two `dspy.Retrieve` calls (two hops) through ColBERTv2, then ChainOfThought.

The LM is a real `dspy.LM("openai/fake-gpt", api_base=<fake server>)`; the fake server here wraps
`harness.ANSWER` in DSPy's ChatAdapter field format so the adapter parses it.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.compat.apps import fake_openai, harness
from tests.compat.apps.harness import ANSWER, CORPUS, Expected

REASONING = "The context says the Eiffel Tower is 330 metres tall."
_FIELD_VALUES = {"reasoning": REASONING, "answer": ANSWER}


def chat_adapter_reply(system_prompt: str) -> str:
    """`harness.ANSWER` as DSPy's ChatAdapter expects it: one `[[ ## field ## ]]` section per output
    field the system prompt declares (ChainOfThought: reasoning, answer; Predict: answer)."""
    declared = system_prompt.split("Your output fields are:", 1)[-1].split("All interactions", 1)[0]
    fields = [f for f in re.findall(r"`(\w+)`", declared) if f in _FIELD_VALUES] or ["answer"]
    body = "".join(f"[[ ## {f} ## ]]\n{_FIELD_VALUES[f]}\n\n" for f in fields)
    return body + "[[ ## completed ## ]]"


class _ChatAdapterHandler(fake_openai._Handler):
    """The shared fake, but chat replies are in DSPy ChatAdapter format."""

    def do_POST(self) -> None:
        # Peek at the request body (the shared handler reads it again from the buffer we hand back).
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw or b"{}")
        system = next((m.get("content") for m in body.get("messages") or [] if m.get("role") == "system"), "")
        self._reply = chat_adapter_reply(system if isinstance(system, str) else json.dumps(system))
        self.rfile = io.BytesIO(raw)
        super().do_POST()

    def _json(self, doc: dict[str, Any]) -> None:
        for choice in doc.get("choices") or []:
            if isinstance(choice.get("message"), dict):
                choice["message"]["content"] = self._reply
            elif "text" in choice:
                choice["text"] = self._reply
        super()._json(doc)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def rank(query: str, k: int) -> list[tuple[str, str, float]]:
    """Deterministic word-overlap ranking over the corpus: (id, text, score), best first; ties by id."""
    q = _words(query)
    scored = [(doc_id, text, float(len(q & _words(text)))) for doc_id, text in CORPUS.items()]
    scored.sort(key=lambda t: (-t[2], t[0]))
    return scored[:k]


class _ColBERTHandler(BaseHTTPRequestHandler):
    """A fake ColBERTv2 server: GET ?query=..&k=.. -> {"topk": [{"pid", "text", "score", "rank"}]}."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        params = parse_qs(urlparse(self.path).query)
        query, k = params["query"][0], int(params.get("k", ["3"])[0])
        topk = [
            {"pid": doc_id, "text": text, "score": score, "rank": i + 1}
            for i, (doc_id, text, score) in enumerate(rank(query, k))
        ]
        data = json.dumps({"topk": topk}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def _serve(handler: type[BaseHTTPRequestHandler], path: str) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}"
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    args = harness.parse_args()
    provider = harness.tracer_provider(args)

    from openinference.instrumentation.dspy import DSPyInstrumentor

    DSPyInstrumentor().instrument(tracer_provider=provider)

    import dspy

    # Every call must reach the model / the retriever (ColBERTv2 requests go through DSPy's cache too).
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)

    def search(query: str, k: int = 2) -> list[str]:
        """The newer DSPy tutorials' retriever: a plain function returning passage texts."""
        return [text for _, text, _ in rank(query, k)]

    class RAG(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.retrieve = dspy.Retrieve(k=2)
            self.respond = dspy.ChainOfThought("context, question -> answer")

        def forward(self, question: str) -> dspy.Prediction:
            context = self.retrieve(question).passages
            return self.respond(context=context, question=question)

    class FunctionRAG(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.respond = dspy.Predict("context, question -> answer")

        def forward(self, question: str) -> dspy.Prediction:
            return self.respond(context=search(question, k=2), question=question)

    class MultiHopRAG(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.retrieve = dspy.Retrieve(k=2)
            self.respond = dspy.ChainOfThought("context, question -> answer")

        def forward(self, question: str, second_hop: str) -> dspy.Prediction:
            context = self.retrieve(question).passages
            context = context + self.retrieve(second_hop).passages
            return self.respond(context=context, question=question)

    with (
        _serve(_ChatAdapterHandler, "/v1") as llm_url,
        _serve(_ColBERTHandler, "/wiki17_abstracts") as colbert_url,
    ):
        lm = dspy.LM("openai/fake-gpt", api_base=llm_url, api_key="sk-fake", cache=False, num_retries=0)
        dspy.configure(lm=lm, rm=dspy.ColBERTv2(url=colbert_url))

        q = "How tall is the Eiffel Tower in Paris?"
        pred = RAG()(question=q)
        assert pred.answer == ANSWER, pred
        harness.emit(
            Expected(
                style="dspy-colbert",
                query=q,
                chunk_ids=[doc_id for doc_id, _, _ in rank(q, 2)],
                chunk_texts=[text for _, text, _ in rank(q, 2)],
                extra={"model": "fake-gpt"},
            )
        )

        q = "Which museum in Paris is the most visited art museum?"
        pred = FunctionRAG()(question=q)
        assert pred.answer == ANSWER, pred
        harness.emit(
            Expected(
                style="dspy-function",
                query=q,
                chunk_ids=[],
                chunk_texts=search(q, k=2),
                extra={"model": "fake-gpt"},
            )
        )

        q = "Where does the Rhine flow?"
        hop2 = "Which art museum in Paris is near the Eiffel Tower?"
        pred = MultiHopRAG()(question=q, second_hop=hop2)
        assert pred.answer == ANSWER, pred
        hits = rank(q, 2) + rank(hop2, 2)
        harness.emit(
            Expected(
                style="dspy-multihop",
                query=q,
                chunk_ids=[doc_id for doc_id, _, _ in hits],
                chunk_texts=[text for _, text, _ in hits],
                extra={"model": "fake-gpt", "second_hop_query": hop2},
            )
        )

    provider.shutdown()


if __name__ == "__main__":
    main()
