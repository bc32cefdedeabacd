"""Synthetic RAG traffic, encoded exactly as an instrumented service and the Collector write it.

The demo, the tests and the ingest benchmark need traces that look like production: OpenInference
spans made by the real OpenTelemetry SDK, serialised by the real OTLP protobuf encoder, laid out
in Kafka messages the way the Collector's kafkaexporter lays them out (one trace per message,
many traces per message, or one trace spread over several messages in any order). Every trace
comes with its ground truth (query type, grounded or not, answerable or not), so tests can check
what the monitor concludes against what really happened.

Requests are drawn from the bundled corpus (`monitor/data/corpus.jsonl`, see LICENSE-NOTES.md)
deterministically from a seed. Two rendering engines produce the same bytes:

- ``"sdk"``: every span goes through a `TracerProvider` and `encode_spans`. The reference; about
  two thousand traces per second.
- ``"fast"`` (default): a pool of distinct requests (`WorkloadConfig.pool_size`) goes through the
  SDK and the encoder once; each trace then copies its request's encoded spans and sets its own
  ids and times. Setting those protobuf fields is all the encoder would do differently, so the
  bytes equal the SDK's (the tests check this) at ten to twenty times the rate.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import random
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.version import __version__ as _sdk_version
from opentelemetry.trace import SpanKind, Status, StatusCode

__all__ = [
    "QUERY_TYPES",
    "REFUSAL",
    "Corpus",
    "CorpusChunk",
    "CorpusQuestion",
    "Message",
    "Mode",
    "Outcome",
    "TraceTruth",
    "Workload",
    "WorkloadConfig",
    "generate",
    "iter_workload",
    "load_corpus",
    "produce",
    "trace_messages",
]

Mode = Literal["per_trace", "batched", "split"]
Engine = Literal["fast", "sdk"]
Outcome = Literal["grounded", "ungrounded", "refusal", "hallucinated"]

QUERY_TYPES = ("lookup", "comparison", "multi_hop", "exact_match", "abstractive", "out_of_corpus")
REFUSAL = "I don't know based on the provided documents."
_OTHER_REFUSALS = (
    "The provided documents do not contain enough information to answer that.",
    "I'm sorry, but I couldn't find that in the available documents.",
)
DEFAULT_QUERY_TYPE_WEIGHTS: Mapping[str, float] = {
    "lookup": 0.25,
    "abstractive": 0.20,
    "exact_match": 0.15,
    "multi_hop": 0.15,
    "comparison": 0.10,
    "out_of_corpus": 0.15,
}

# Made-up names: not in the corpus, so a sentence about them is never supported by a chunk.
_ORGS = (
    "the Veltrana Institute",
    "Korvell Analytics",
    "the Brightwater Commission",
    "the Ostrander Review Board",
    "Maelis & Hart Consulting",
    "the Quillfield Survey Office",
)
_PEOPLE = ("Dr. Elena Marvik", "Tomas Okafor-Lind", "Professor Ines Haldane", "Rurik Tambe", "Sofia Vantreel")
_PLACES = ("Port Aldwyn", "Lake Serrow", "New Castreno", "the Harrow Valley", "Kelvinmoor")
_UNGROUNDED = (
    "This figure was later revised to {n:,} by {org} in {year}.",
    "{person} confirmed this in a {year} report, citing {pct}% growth.",
    "The total cost was estimated at ${n:,} million by {org}.",
    "It was first documented in {year} in {place}, according to {org}.",
    "A follow-up study by {org} found the effect was {pct}% stronger after {year}.",
)
_HALLUCINATED = (
    "It was {person} who led this effort, starting in {year}.",
    "The figure most often cited is {n:,}, according to {org}.",
    "This happened in {year} in {place}, as reported by {org}.",
    "The answer is {place}, where {org} recorded {n:,} cases by {year}.",
)
_LEAD_INS = ("", "", "", "According to the documents, ", "Based on the retrieved context, ")
_LOWERABLE = frozenset(
    ("The", "A", "An", "In", "It", "This", "These", "There", "Every", "Some", "Most", "Many")
)


# --------------------------------------------------------------------------------------------
# Corpus


@dataclass(frozen=True, slots=True)
class CorpusChunk:
    id: str
    title: str
    text: str
    source: str


@dataclass(frozen=True, slots=True)
class CorpusQuestion:
    """A golden row (docs/contract.md, Golden rows) plus the evidence sentences a grounded answer quotes."""

    id: str
    query: str
    query_type: str
    relevant_chunk_ids: tuple[str, ...]
    reference_answer: str
    answerable: bool
    evidence: tuple[str, ...]
    related_chunk_ids: tuple[str, ...]  # on-topic but non-answering passages (unanswerable rows)
    source: str

    def golden_row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "query": self.query,
            "query_type": self.query_type,
            "relevant_chunk_ids": list(self.relevant_chunk_ids),
            "reference_answer": self.reference_answer,
            "answerable": self.answerable,
        }


@dataclass(frozen=True, slots=True)
class Corpus:
    chunks: Mapping[str, CorpusChunk]
    questions: tuple[CorpusQuestion, ...]

    def by_type(self) -> dict[str, tuple[CorpusQuestion, ...]]:
        out: dict[str, list[CorpusQuestion]] = {}
        for q in self.questions:
            out.setdefault(q.query_type, []).append(q)
        return {k: tuple(v) for k, v in out.items()}


@functools.cache
def load_corpus() -> Corpus:
    """The bundled corpus, read through importlib.resources so no source checkout is needed."""
    text = resources.files("monitor").joinpath("data/corpus.jsonl").read_text(encoding="utf-8")
    chunks: dict[str, CorpusChunk] = {}
    questions: list[CorpusQuestion] = []
    for line in text.splitlines():
        row = json.loads(line)
        if row["kind"] == "chunk":
            chunks[row["id"]] = CorpusChunk(row["id"], row["title"], row["text"], row["source"])
        else:
            questions.append(
                CorpusQuestion(
                    id=row["id"],
                    query=row["query"],
                    query_type=row["query_type"],
                    relevant_chunk_ids=tuple(row["relevant_chunk_ids"]),
                    reference_answer=row["reference_answer"],
                    answerable=row["answerable"],
                    evidence=tuple(row["evidence"]),
                    related_chunk_ids=tuple(row["related_chunk_ids"]),
                    source=row["source"],
                )
            )
    return Corpus(chunks, tuple(questions))


# --------------------------------------------------------------------------------------------
# Public results


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """What the traffic looks like. Rates are probabilities per request."""

    k: int = 4  # chunks retrieved per request
    ungrounded_rate: float = 0.15  # answerable questions whose answer gains one invented sentence
    hallucination_rate: float = 0.2  # unanswerable questions answered anyway (else refused)
    false_refusal_rate: float = 0.0  # answerable questions refused
    query_type_rate: float = 1.0  # requests whose root span carries `rag.query_type`
    query_type_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_QUERY_TYPE_WEIGHTS))
    service_name: str = "rag-demo"
    service_version: str | None = None  # the resource's `service.version` (a release), if any
    model_name: str = "gpt-4o-mini"
    rps: float = 50.0  # request rate that spaces the traces' timestamps
    # Distinct requests per workload; later traces reuse them with new ids and times ("fast"
    # engine only renders each through the SDK once). Rates are exact over the pool, so larger
    # pools give more variety, not better rates.
    pool_size: int = 1024


@dataclass(frozen=True, slots=True)
class TraceTruth:
    """What really happened in one synthetic request: the answer key for tests."""

    trace_id: str  # 32 lowercase hex
    root_span_id: str  # 16 lowercase hex
    question_id: str
    query: str
    query_type: str  # the true type, whether or not the span carries it
    labelled: bool  # the root span carries `rag.query_type`
    answerable: bool
    outcome: Outcome
    answer: str
    chunk_ids: tuple[str, ...]  # as retrieved, best first
    relevant_chunk_ids: tuple[str, ...]
    invented: str | None  # the unsupported sentence of an ungrounded/hallucinated answer
    start_ns: int
    end_ns: int

    @property
    def grounded(self) -> bool:
        """Every claim of the answer is in the retrieved chunks (a refusal makes no claim)."""
        return self.outcome in ("grounded", "refusal")

    @property
    def refusal(self) -> bool:
        return self.outcome == "refusal"

    @property
    def hallucinated(self) -> bool:
        """Answered an unanswerable question instead of refusing."""
        return self.outcome == "hallucinated"


@dataclass(frozen=True, slots=True)
class Message:
    """One Kafka record. `key` is the trace id in hex (None for multi-trace batches, as the
    kafkaexporter writes them without `partition_traces_by_id`)."""

    key: bytes | None
    value: bytes
    trace_ids: tuple[str, ...]


@dataclass(slots=True)
class Workload:
    traces: list[TraceTruth]
    messages: list[Message]
    _by_id: dict[str, TraceTruth] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_id = {t.trace_id: t for t in self.traces}

    def truth(self, trace_id: str) -> TraceTruth:
        return self._by_id[trace_id]

    def pairs(self) -> list[tuple[bytes | None, bytes]]:
        return [(m.key, m.value) for m in self.messages]

    def messages_of(self, trace_id: str) -> list[Message]:
        return [m for m in self.messages if trace_id in m.trace_ids]


# --------------------------------------------------------------------------------------------
# Content: one request's question, retrieval and answer (the pool entries)


@dataclass(frozen=True, slots=True)
class _Request:
    question: CorpusQuestion
    labelled: bool
    outcome: Outcome
    answer: str
    invented: str | None
    chunks: tuple[tuple[CorpusChunk, float], ...]
    root_attrs: dict[str, Any]
    retriever_attrs: dict[str, Any]
    llm_attrs: dict[str, Any]
    completion_tokens: int


def _invent(rng: random.Random, templates: Sequence[str]) -> str:
    return rng.choice(templates).format(
        n=rng.randrange(1_200, 98_000),
        year=rng.randrange(1961, 2019),
        pct=rng.randrange(11, 89),
        org=rng.choice(_ORGS),
        person=rng.choice(_PEOPLE),
        place=rng.choice(_PLACES),
    )


def _lead_in(rng: random.Random, sentences: list[str]) -> list[str]:
    """Light paraphrase: an optional lead-in that adds no claim of its own."""
    lead = rng.choice(_LEAD_INS)
    if lead and sentences:
        first, _, rest = sentences[0].partition(" ")
        head = first.lower() if first in _LOWERABLE else first
        sentences = [f"{lead}{head} {rest}".rstrip(), *sentences[1:]]
    return sentences


class _Planner:
    """Draws requests from the corpus with one seeded RNG: same seed, same requests."""

    def __init__(self, corpus: Corpus, config: WorkloadConfig, rng: random.Random) -> None:
        self.corpus = corpus
        self.config = config
        self.rng = rng
        by_type = corpus.by_type()
        weights = {t: w for t, w in config.query_type_weights.items() if w > 0 and by_type.get(t)}
        if not weights:
            raise ValueError("query_type_weights select no query type present in the corpus")
        self.types = list(weights)
        self.cum = list(_cumsum(weights.values()))
        self.by_type = by_type
        self.chunk_ids = list(corpus.chunks)

    def request(self) -> _Request:
        rng, cfg = self.rng, self.config
        qtype = rng.choices(self.types, cum_weights=self.cum)[0]
        q = rng.choice(self.by_type[qtype])
        labelled = rng.random() < cfg.query_type_rate
        chunks = self._retrieve(q)
        outcome: Outcome
        invented: str | None = None
        if q.answerable:
            r = rng.random()
            if r < cfg.false_refusal_rate:
                outcome = "refusal"
            elif r < cfg.false_refusal_rate + cfg.ungrounded_rate:
                outcome = "ungrounded"
            else:
                outcome = "grounded"
        else:
            outcome = "hallucinated" if rng.random() < cfg.hallucination_rate else "refusal"
        if outcome == "refusal":
            answer = REFUSAL if rng.random() < 0.8 else rng.choice(_OTHER_REFUSALS)
        elif outcome == "hallucinated":
            invented = _invent(rng, _HALLUCINATED)
            parts = [invented]
            if rng.random() < 0.5:  # dress it up with a real but irrelevant sentence
                parts.append(chunks[0][0].text.split(". ")[0].rstrip(".") + ".")
            answer = " ".join(parts)
        else:
            parts = _lead_in(rng, list(q.evidence[:4]))
            if outcome == "ungrounded":
                invented = _invent(rng, _UNGROUNDED)
                parts.insert(rng.randrange(1, len(parts) + 1), invented)
            answer = " ".join(parts)

        root: dict[str, Any] = {"openinference.span.kind": "CHAIN", "input.value": q.query}
        if labelled:
            root["rag.query_type"] = q.query_type
        retriever: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": q.query}
        for i, (c, score) in enumerate(chunks):
            retriever[f"retrieval.documents.{i}.document.id"] = c.id
            retriever[f"retrieval.documents.{i}.document.content"] = c.text
            retriever[f"retrieval.documents.{i}.document.score"] = score
        prompt_tokens = 60 + (len(q.query) + sum(len(c.text) for c, _ in chunks)) // 4
        completion_tokens = max(1, len(answer) // 4)
        llm: dict[str, Any] = {
            "openinference.span.kind": "LLM",
            "llm.model_name": cfg.model_name,
            "llm.token_count.prompt": prompt_tokens,
            "llm.token_count.completion": completion_tokens,
            "llm.token_count.total": prompt_tokens + completion_tokens,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": answer,
        }
        return _Request(
            q, labelled, outcome, answer, invented, chunks, root, retriever, llm, completion_tokens
        )

    def _retrieve(self, q: CorpusQuestion) -> tuple[tuple[CorpusChunk, float], ...]:
        """k chunks, best first: gold (mostly on top) plus distractors, with descending scores."""
        rng, k = self.rng, self.config.k
        gold = list(q.relevant_chunk_ids[:k])
        near = [c for c in q.related_chunk_ids if c not in gold][: k - len(gold)]
        exclude = set(gold) | set(near)
        need = k - len(gold) - len(near)
        others = [
            c
            for c in rng.sample(self.chunk_ids, min(len(self.chunk_ids), need + len(exclude)))
            if c not in exclude
        ]
        distractors = near + others[:need]
        rng.shuffle(gold)
        if gold and rng.random() < 0.75:  # a decent retriever: the evidence on top
            rng.shuffle(distractors)
            ranked = gold + distractors
        elif near and rng.random() < 0.6:  # the on-topic near miss on top
            rest = distractors[len(near) :] + gold
            rng.shuffle(rest)
            ranked = near + rest
        else:
            ranked = gold + distractors
            rng.shuffle(ranked)
        score = rng.uniform(0.78, 0.93) if gold else rng.uniform(0.55, 0.75)
        out = []
        for cid in ranked:
            out.append((self.corpus.chunks[cid], round(score, 6)))
            score *= rng.uniform(0.92, 0.995)  # strictly decreasing, positive for any k
        return tuple(out)


def _cumsum(xs: Iterable[float]) -> Iterator[float]:
    total = 0.0
    for x in xs:
        total += x
        yield total


# --------------------------------------------------------------------------------------------
# One trace: a pool request plus ids and times


@dataclass(frozen=True, slots=True)
class _Trace:
    req: _Request
    trace_id: int
    span_ids: tuple[int, int, int]  # root, retriever, llm
    times: tuple[int, int, int, int, int, int]  # root start/end, retriever start/end, llm start/end

    def truth(self) -> TraceTruth:
        r = self.req
        return TraceTruth(
            trace_id=f"{self.trace_id:032x}",
            root_span_id=f"{self.span_ids[0]:016x}",
            question_id=r.question.id,
            query=r.question.query,
            query_type=r.question.query_type,
            labelled=r.labelled,
            answerable=r.question.answerable,
            outcome=r.outcome,
            answer=r.answer,
            chunk_ids=tuple(c.id for c, _ in r.chunks),
            relevant_chunk_ids=r.question.relevant_chunk_ids,
            invented=r.invented,
            start_ns=self.times[0],
            end_ns=self.times[1],
        )


def _durations(rng: random.Random, completion_tokens: int) -> tuple[int, int, int, int, int]:
    """Realistic latencies in ns: pre-processing, retrieval, hand-off, LLM, post-processing."""
    ms = 1_000_000
    retrieval = int(rng.lognormvariate(math.log(45), 0.45) * ms)
    llm = int((rng.lognormvariate(math.log(350), 0.35) + completion_tokens * rng.uniform(12, 25)) * ms)
    return (
        int(rng.uniform(1, 6) * ms),
        retrieval,
        int(rng.uniform(0.5, 3) * ms),
        llm,
        int(rng.uniform(1, 4) * ms),
    )


def _nonzero(rng: random.Random, bits: int) -> int:
    return rng.getrandbits(bits) or 1


# --------------------------------------------------------------------------------------------
# Rendering through the SDK


class _PlannedIds(IdGenerator):
    """Hands out the ids the plan chose, so SDK output is reproducible from the seed."""

    def __init__(self) -> None:
        self.trace_ids: list[int] = []
        self.span_ids: list[int] = []

    def generate_trace_id(self) -> int:
        return self.trace_ids.pop()

    def generate_span_id(self) -> int:
        return self.span_ids.pop()


class _Collect(SpanProcessor):
    """In-memory processor: keeps ended spans in end order, as an exporter would receive them."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


_OK = Status(StatusCode.OK)


class _SdkRenderer:
    """A private TracerProvider (never the global one) that turns plans into SDK spans."""

    def __init__(self, service_name: str, service_version: str | None = None) -> None:
        self.ids = _PlannedIds()
        self.collect = _Collect()
        # Explicit resource and limits, not the environment's: output must depend on the seed only.
        attributes = {
            "service.name": service_name,
            "telemetry.sdk.language": "python",
            "telemetry.sdk.name": "opentelemetry",
            "telemetry.sdk.version": _sdk_version,
        }
        if service_version is not None:
            attributes["service.version"] = service_version
        resource = Resource(attributes)
        limits = SpanLimits(max_span_attributes=SpanLimits.UNSET, max_attribute_length=SpanLimits.UNSET)
        self.provider = TracerProvider(resource=resource, id_generator=self.ids, span_limits=limits)
        self.provider.add_span_processor(self.collect)
        self.tracer = self.provider.get_tracer("monitor.demo.workload")

    def spans(self, t: _Trace) -> list[ReadableSpan]:
        """The trace's three spans in end order: retriever, LLM, root."""
        r, (root_id, retriever_id, llm_id), ts = t.req, t.span_ids, t.times
        self.ids.trace_ids.append(t.trace_id)
        self.ids.span_ids.extend((llm_id, retriever_id, root_id))  # popped from the end
        root = self.tracer.start_span(
            "rag.request", kind=SpanKind.SERVER, attributes=r.root_attrs, start_time=ts[0]
        )
        ctx: Context = trace_api.set_span_in_context(root)
        retriever = self.tracer.start_span(
            "rag.retrieve", ctx, SpanKind.INTERNAL, attributes=r.retriever_attrs, start_time=ts[2]
        )
        retriever.set_status(_OK)
        retriever.end(end_time=ts[3])
        llm = self.tracer.start_span(
            "rag.generate", ctx, SpanKind.CLIENT, attributes=r.llm_attrs, start_time=ts[4]
        )
        llm.set_status(_OK)
        llm.end(end_time=ts[5])
        root.set_attribute("output.value", r.answer)
        root.set_status(_OK)
        root.end(end_time=ts[1])
        out = self.collect.spans
        self.collect.spans = []
        return out


class _FastRenderer:
    """Encodes each pool request once through the SDK, then copies its protobuf spans per trace.

    The only fields in which two traces of the same request differ are the ids and the times;
    setting them on a copy yields exactly the message `encode_spans` builds for that trace.
    """

    def __init__(self, sdk: _SdkRenderer) -> None:
        self.sdk = sdk
        self.encoded: dict[int, Any] = {}  # id(_Request) -> encoded spans in end order
        self.envelope: Any = None  # ResourceSpans with the scope but no spans

    def _template(self, req: _Request) -> Any:
        spans = self.encoded.get(id(req))
        if spans is None:
            plan = _Trace(req, 1, (1, 2, 3), (0, 0, 0, 0, 0, 0))
            pb = encode_spans(self.sdk.spans(plan))
            rs = pb.resource_spans[0]
            spans = []
            for s in rs.scope_spans[0].spans:
                copy = Span()
                copy.CopyFrom(s)
                spans.append(copy)
            self.encoded[id(req)] = spans
            if self.envelope is None:
                envelope = ResourceSpans()
                envelope.CopyFrom(rs)
                del envelope.scope_spans[0].spans[:]
                self.envelope = envelope
        return spans

    def message(self, parts: Sequence[tuple[_Trace, Sequence[int]]]) -> bytes:
        """One ExportTraceServiceRequest holding the given span indexes (0 retriever, 1 LLM, 2 root)."""
        for t, _ in parts:
            self._template(t.req)
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        rs.CopyFrom(self.envelope)
        out = rs.scope_spans[0].spans
        for t, idx in parts:
            tpl = self.encoded[id(t.req)]
            tid = t.trace_id.to_bytes(16, "big")
            root_id = t.span_ids[0].to_bytes(8, "big")
            for i in idx:
                s = out.add()
                s.CopyFrom(tpl[i])
                s.trace_id = tid
                if i == 2:
                    s.span_id = root_id
                    s.start_time_unix_nano, s.end_time_unix_nano = t.times[0], t.times[1]
                else:
                    s.span_id = t.span_ids[i + 1].to_bytes(8, "big")
                    s.parent_span_id = root_id
                    s.start_time_unix_nano, s.end_time_unix_nano = t.times[2 + 2 * i], t.times[3 + 2 * i]
        return bytes(req.SerializeToString())


# --------------------------------------------------------------------------------------------
# Generation


def _blocks(
    n: int,
    seed: int,
    mode: Mode,
    batch: int,
    config: WorkloadConfig | None,
    start_ns: int | None,
    engine: Engine,
) -> Iterator[tuple[list[_Trace], list[Message]]]:
    cfg = config or WorkloadConfig()
    if n < 0 or batch < 1 or cfg.k < 1 or cfg.pool_size < 1 or cfg.rps <= 0:
        raise ValueError("need n >= 0, batch >= 1, k >= 1, pool_size >= 1, rps > 0")
    # Separate streams, so that e.g. the mode does not change which requests are drawn.
    planner = _Planner(load_corpus(), cfg, random.Random(f"{seed}:content"))
    id_rng = random.Random(f"{seed}:ids")
    layout_rng = random.Random(f"{seed}:layout")
    sdk = _SdkRenderer(cfg.service_name, cfg.service_version)
    fast = _FastRenderer(sdk) if engine == "fast" else None
    pool: list[_Request] = []
    gap = int(1e9 / cfg.rps)

    def render(parts: Sequence[tuple[_Trace, Sequence[int]]]) -> bytes:
        if fast is not None:
            return fast.message(parts)
        spans: list[ReadableSpan] = []
        for t, idx in parts:
            all3 = sdk.spans(t)
            spans.extend(all3[i] for i in idx)
        return bytes(encode_spans(spans).SerializeToString())

    i = 0
    while i < n:
        size = min(batch, n - i)
        now = time.time_ns() if start_ns is None else 0
        traces: list[_Trace] = []
        for j in range(size):
            if i + j < cfg.pool_size:
                pool.append(planner.request())
            req = pool[(i + j) % cfg.pool_size]
            pre, retrieval, handoff, llm, post = _durations(id_rng, req.completion_tokens)
            total = pre + retrieval + handoff + llm + post
            if start_ns is None:
                end = now - (size - 1 - j) * gap
                start = end - total
            else:
                start = start_ns + (i + j) * gap
                end = start + total
            r0 = start + pre
            l0 = r0 + retrieval + handoff
            times = (start, end, r0, r0 + retrieval, l0, l0 + llm)
            ids = (_nonzero(id_rng, 64), _nonzero(id_rng, 64), _nonzero(id_rng, 64))
            traces.append(_Trace(req, _nonzero(id_rng, 128), ids, times))
        messages: list[Message] = []
        if mode == "per_trace":
            for t in traces:
                key = f"{t.trace_id:032x}"
                messages.append(Message(key.encode(), render([(t, (0, 1, 2))]), (key,)))
        elif mode == "batched":
            keys = tuple(f"{t.trace_id:032x}" for t in traces)
            messages.append(Message(None, render([(t, (0, 1, 2)) for t in traces]), keys))
        elif mode == "split":
            for t in traces:
                key = f"{t.trace_id:032x}"
                order = [0, 1, 2]
                layout_rng.shuffle(order)
                cuts = sorted(layout_rng.sample((1, 2), layout_rng.choice((1, 2))))
                for a, b in zip([0, *cuts], [*cuts, 3], strict=True):
                    idx = sorted(order[a:b])  # within a message, SDK end order
                    messages.append(Message(key.encode(), render([(t, idx)]), (key,)))
            layout_rng.shuffle(messages)
        else:
            raise ValueError(f"unknown mode {mode!r}")
        yield traces, messages
        i += size


def iter_workload(
    n: int,
    *,
    seed: int,
    mode: Mode = "per_trace",
    batch: int = 10,
    config: WorkloadConfig | None = None,
    start_ns: int | None = None,
    engine: Engine = "fast",
) -> Iterator[tuple[list[TraceTruth], list[Message]]]:
    """Generate lazily, in blocks of `batch` traces: (their ground truth, their messages).

    `mode`: "per_trace" — one message per trace, keyed by trace id; "batched" — `batch` traces per
    message, no key; "split" — each trace's spans over 2–3 messages keyed by trace id, the messages
    of every `batch` traces shuffled together (children before roots, traces interleaved).
    `start_ns`: time of the first request, later ones spaced at `config.rps`; None = wall clock,
    each block's traces ending just before it is generated (so lag is realistic when a rate-limited
    producer pulls blocks as it sends). With a fixed `start_ns` the output is byte-for-byte a
    function of the arguments.
    """
    for traces, messages in _blocks(n, seed, mode, batch, config, start_ns, engine):
        yield [t.truth() for t in traces], messages


def generate(
    n: int,
    *,
    seed: int,
    mode: Mode = "per_trace",
    batch: int = 10,
    config: WorkloadConfig | None = None,
    start_ns: int | None = None,
    engine: Engine = "fast",
) -> Workload:
    """All of `iter_workload` in memory: every message and the ground truth of every trace."""
    traces: list[TraceTruth] = []
    messages: list[Message] = []
    for truths, msgs in iter_workload(
        n, seed=seed, mode=mode, batch=batch, config=config, start_ns=start_ns, engine=engine
    ):
        traces.extend(truths)
        messages.extend(msgs)
    return Workload(traces, messages)


def trace_messages(
    n: int,
    *,
    seed: int,
    mode: Mode = "per_trace",
    batch: int = 10,
    config: WorkloadConfig | None = None,
    start_ns: int | None = None,
    engine: Engine = "fast",
) -> Iterator[tuple[bytes | None, bytes]]:
    """Just the Kafka (key, value) pairs, streamed: what `produce` and the benchmark consume."""
    for _, msgs in _blocks(n, seed, mode, batch, config, start_ns, engine):
        for m in msgs:
            yield m.key, m.value


# --------------------------------------------------------------------------------------------
# Kafka


async def produce(
    bootstrap_servers: str,
    topic: str,
    messages: Iterable[tuple[bytes | None, bytes]],
    *,
    rate: float | None = None,
    linger_ms: int = 20,
    max_batch_size: int = 1 << 20,
    max_in_flight: int = 5000,
) -> int:
    """Send (key, value) pairs to `topic`; return how many were acknowledged.

    Batched like a Collector (linger, large batches). `rate` caps messages per second for the
    demo; None sends as fast as the broker takes them (the benchmark). The iterable is consumed
    lazily, so wall-clock timestamps of `trace_messages(start_ns=None)` stay close to send time.
    """
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers,
        linger_ms=linger_ms,
        max_batch_size=max_batch_size,
        client_id="rag-monitor-workload",
    )
    await producer.start()
    sent = 0
    try:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        pending: list[asyncio.Future[Any]] = []
        for key, value in messages:
            if rate:
                delay = t0 + sent / rate - loop.time()
                if delay > 0.001:
                    await asyncio.sleep(delay)
            pending.append(await producer.send(topic, value=value, key=key))
            sent += 1
            if len(pending) >= max_in_flight:  # bound memory, surface errors early
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return sent
