"""A small RAG service over the bundled corpus, instrumented with `monitor.instrument`.

Real lexical retrieval (BM25 via `bm25s`, built in memory at start-up from
`monitor.demo.workload.load_corpus()`), a deterministic extractive generator (the best sentences of the
top chunk; a refusal when the top BM25 score is low), and knobs that make it worse on purpose, so
the monitor has something to catch:

- ``drop_best_rate``: the best hit is dropped from the ranking (a retrieval regression);
- ``shuffle_rate``: the ranking is shuffled (scores stay with their chunks);
- ``invent_rate``: one made-up sentence is added to the answer, or replaces a refusal (a
  generation regression: unfaithful answers, hallucinations on unanswerable questions).

Each is a probability per request, set at start-up (`Degrade`) or live with ``POST /admin/degrade``.
With ``cite`` (``--cite``) every answer sentence cites the chunk it was taken from by rank
(``… in 1990 [1].``); an invented sentence cites it too, wrongly: what citation accuracy catches.
HTTP contract (docs/contract.md, Replay HTTP contract): ``POST /query {"query", "k"}`` →
``{"answer", "chunks": [{id, content, score}]}``; requests with a valid ``X-RAG-Replay`` mark (an
HMAC with the shared replay secret: ``replay_secret``, else ``RAGMON_REPLAY_SECRET(_FILE)``) produce
spans marked ``rag.replay=true``, any other request counts as production. With
``"context": [{"id", "content"}]`` the service answers from those chunks instead of retrieving
(``[]``: from nothing), which is what the golden replay's oracle and no-context baselines send.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import bm25s
from fastapi import FastAPI
from pydantic import BaseModel, Field

from monitor.demo.workload import REFUSAL, Corpus, load_corpus
from monitor.instrument import (
    ReplayMiddleware,
    set_query_type,
    trace_generator,
    trace_request,
    trace_retriever,
)

__all__ = [
    "MODEL_NAME",
    "Degrade",
    "Hit",
    "RagPipeline",
    "ServiceConfig",
    "classify",
    "create_app",
]

MODEL_NAME = "extractive-v1"

_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_STOP = frozenset(
    re.findall(
        r"\w+",
        "a an and are as at be but by did do does for from had has have how in is it its of on or that the "
        "their there these this to was were what when where which who whom why will with",
    )
)

# Made-up names (not in the corpus): a sentence about them is never supported by any chunk.
_INVENTED = (
    "This was later confirmed by the Veltrana Institute in {year}.",
    "Dr. Elena Marvik reported a {pct}% increase in {year}.",
    "The figure was revised to {n:,} by Korvell Analytics.",
    "It was first recorded in Port Aldwyn in {year}.",
)


@dataclass(frozen=True, slots=True)
class Degrade:
    """Deliberate faults, each a probability per request."""

    drop_best_rate: float = 0.0
    shuffle_rate: float = 0.0
    invent_rate: float = 0.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    k: int = 4  # default number of chunks when a request gives none
    refuse_below: float = 5.0  # BM25 score of the top chunk under which the generator refuses
    max_sentences: int = 2
    seed: int = 0
    cite: bool = False  # end each answer sentence with its source's rank: "[1]"
    degrade: Degrade = field(default_factory=Degrade)


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    content: str
    score: float


def _cite(sentence: str, rank: int) -> str:
    """The sentence with its source's rank before its final punctuation: "It rose [1]."."""
    body = sentence.rstrip()
    end = len(body.rstrip(".!?"))
    return f"{body[:end]} [{rank}]{body[end:]}"


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def classify(query: str) -> str | None:
    """A rough rule-based query type; None when unsure (the monitor's own classifier decides)."""
    q = query.strip()
    low = q.lower()
    if low.startswith("between ") or (
        low.split(" ", 1)[0] in ("does", "did", "has", "is", "was", "were", "are")
        and ("article" in low or "report" in low)
    ):
        return "comparison"
    if "articles from" in low or ("according to" in low and (" not only " in low or " both " in low)):
        return "multi_hop"
    if q[:1].isupper() and low.startswith(("how many", "how much", "what year", "in what year", "when ")):
        return "exact_match"
    if q[:1].isupper() and low.startswith(("what", "who", "which", "how", "where", "why")):
        return "lookup"
    if q[:1].islower():
        return "abstractive"  # search-box style queries
    return None


class RagPipeline:
    """Retrieve, generate, degrade: the service's logic, with the three traced steps."""

    def __init__(self, config: ServiceConfig | None = None, corpus: Corpus | None = None) -> None:
        self.config = config or ServiceConfig()
        corpus = corpus or load_corpus()
        self._ids = list(corpus.chunks)
        self._texts = [corpus.chunks[i].text for i in self._ids]
        docs = [f"{corpus.chunks[i].title}. {corpus.chunks[i].text}" for i in self._ids]
        self._bm25 = bm25s.BM25()
        self._bm25.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
        self._rng = random.Random(self.config.seed)
        self._lock = threading.Lock()

    @property
    def degrade(self) -> Degrade:
        return self.config.degrade

    def set_degrade(self, degrade: Degrade) -> None:
        self.config = replace(self.config, degrade=degrade)

    def _score_given(self, query: str, given: list[tuple[str, str]]) -> list[float]:
        """The BM25 score the index gives each given chunk (the generator's refusal rule reads
        it); a chunk the index does not hold scores `refuse_below` when it shares a query term,
        else 0 — a stand-in, since BM25 needs the chunk's corpus statistics."""
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        by_id: dict[str, float] = {}
        if tokens.vocab:
            inverse = {v: k for k, v in tokens.vocab.items()}
            words = [inverse[i] for i in tokens.ids[0]]
            scores = self._bm25.get_scores(words)
            by_id = {cid: float(scores[i]) for i, cid in enumerate(self._ids)}
        q = _terms(query)
        return [
            by_id[cid] if cid in by_id else (self.config.refuse_below if q & _terms(text) else 0.0)
            for cid, text in given
        ]

    @trace_retriever(name="rag.context")
    def use_context(self, query: str, given: list[tuple[str, str]]) -> list[Hit]:
        """The chunks the request gave, instead of retrieving: ranked by the index's scores, as the
        retriever would; no retrieval fault applies (there is no retrieval)."""
        scores = self._score_given(query, given)
        hits = [Hit(cid, text, round(s, 6)) for (cid, text), s in zip(given, scores, strict=True)]
        return sorted(hits, key=lambda h: -h.score)

    def _chance(self, rate: float) -> bool:
        if rate <= 0.0:
            return False
        with self._lock:
            return self._rng.random() < rate

    @trace_retriever(name="rag.retrieve")
    def retrieve(self, query: str, k: int) -> list[Hit]:
        """BM25 top-k, best first; degraded by dropping the best hit or shuffling."""
        drop = self._chance(self.degrade.drop_best_rate)
        n = min(len(self._ids), k + (1 if drop else 0))
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab:  # nothing but stop words
            return []
        idx, scores = self._bm25.retrieve(tokens, k=n, show_progress=False)
        hits = [
            Hit(self._ids[int(i)], self._texts[int(i)], round(float(s), 6))
            for i, s in zip(idx[0], scores[0], strict=True)
            if float(s) > 0.0
        ]
        if drop:
            hits = hits[1:]
        hits = hits[:k]
        if self._chance(self.degrade.shuffle_rate):
            with self._lock:
                self._rng.shuffle(hits)
        return hits

    @trace_generator(name="rag.generate", model=MODEL_NAME)
    def generate(self, query: str, hits: list[Hit]) -> str:
        """The best sentences of the first chunk (extractive), or a refusal when it scores low."""
        invent = self._chance(self.degrade.invent_rate)
        if not hits or hits[0].score < self.config.refuse_below:
            return self._invented() if invent else REFUSAL
        sentences = [s.strip() for s in _SENTENCE_END.split(hits[0].content) if s.strip()]
        q = _terms(query)
        ranked = sorted(range(len(sentences)), key=lambda i: -len(q & _terms(sentences[i])))
        best = sorted(i for i in ranked[: self.config.max_sentences] if q & _terms(sentences[i]))
        parts = [sentences[i] for i in best] or sentences[:1]
        if invent:
            parts.append(self._invented())
        if self.config.cite:  # every sentence came from the top chunk (the invented one claims to)
            parts = [_cite(p, 1) for p in parts]
        return " ".join(parts)

    def _invented(self) -> str:
        with self._lock:
            rng = self._rng
            return rng.choice(_INVENTED).format(
                year=rng.randrange(1961, 2019), pct=rng.randrange(11, 89), n=rng.randrange(1_200, 98_000)
            )

    def answer(
        self, query: str, k: int, context: list[tuple[str, str]] | None = None
    ) -> tuple[str, list[Hit]]:
        """Retrieve and generate; with `context` (id, text) pairs, generate from those alone."""
        hits = self.retrieve(query, k) if context is None else self.use_context(query, context)
        return self.generate(query, hits), hits


# --------------------------------------------------------------------------------------------
# HTTP


class ContextIn(BaseModel):
    id: str = Field(min_length=1, max_length=512)
    content: str = Field(max_length=100_000)


class QueryRequest(BaseModel):
    query: str = Field(min_length=1, max_length=4000)
    k: int | None = Field(None, ge=1, le=50)
    query_type: str | None = Field(None, max_length=64, description="overrides the classifier")
    context: list[ContextIn] | None = Field(
        None, max_length=50, description="answer from these chunks instead of retrieving ([]: none)"
    )


class ChunkOut(BaseModel):
    id: str
    content: str
    score: float


class QueryResponse(BaseModel):
    answer: str
    chunks: list[ChunkOut]


class DegradeUpdate(BaseModel):
    drop_best_rate: float | None = Field(None, ge=0, le=1)
    shuffle_rate: float | None = Field(None, ge=0, le=1)
    invent_rate: float | None = Field(None, ge=0, le=1)


def create_app(
    config: ServiceConfig | None = None,
    pipeline: RagPipeline | None = None,
    replay_secret: bytes | None = None,
) -> FastAPI:
    """The FastAPI app; tracing follows whatever `monitor.instrument.configure` set up (or none).
    `replay_secret` verifies replay marks (None: from the environment)."""
    rag = pipeline or RagPipeline(config)
    app = FastAPI(title="rag-monitor example RAG service")
    app.add_middleware(ReplayMiddleware, secret=replay_secret)
    app.state.pipeline = rag

    @app.post("/query", response_model=QueryResponse)
    @trace_request(name="rag.request", query_arg="req", query_type=classify)
    async def query(req: QueryRequest) -> QueryResponse:
        if req.query_type:
            set_query_type(req.query_type)
        given = None if req.context is None else [(c.id, c.content) for c in req.context]
        answer, hits = rag.answer(req.query, req.k or rag.config.k, given)
        return QueryResponse(
            answer=answer, chunks=[ChunkOut(id=h.id, content=h.content, score=h.score) for h in hits]
        )

    @app.get("/admin/degrade")
    async def get_degrade() -> dict[str, float]:
        return asdict(rag.degrade)

    @app.post("/admin/degrade")
    async def set_degrade(update: DegradeUpdate) -> dict[str, float]:
        changes: dict[str, Any] = {k: v for k, v in update.model_dump().items() if v is not None}
        rag.set_degrade(replace(rag.degrade, **changes))
        return asdict(rag.degrade)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "chunks": len(rag._ids), "model": MODEL_NAME}

    return app
