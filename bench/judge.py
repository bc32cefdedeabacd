"""Judge benchmark (issue 3, performance): our one-call judge against RAGAS faithfulness, and throughput.

Everything runs against fake LLM servers this script starts on loopback; no request leaves the machine.

(a) Cost per judged record. The same records (``monitor.demo.workload.generate`` traces: the query, the
    retrieved chunks' text from the bundled corpus, the answer) are judged by

      - ours: `AnthropicJudge` (the real `anthropic` SDK) against a fake Messages API;
      - RAGAS faithfulness (the installed `ragas`), pointed at a fake OpenAI-compatible server, in
        both of its APIs: ``ragas.metrics.collections.Faithfulness`` with ``llm_factory`` and an
        ``AsyncOpenAI`` client (instructor JSON mode; the API RAGAS 0.4 recommends), and the legacy
        ``ragas.metrics.Faithfulness`` with ``LangchainLLMWrapper(ChatOpenAI(...))``.

    One server answers both APIs and counts, per request, the tokens of everything the model would
    read: system text, every message's text (tool calls and results included), and the tool /
    response-format schema as JSON. Tokens are tiktoken's ``o200k_base``, loaded offline from the
    copy the ``bpe-openai`` wheel ships (tiktoken checks its SHA-256); without it, len(text)/4.
    The same count is returned as ``usage`` input tokens, so the judge's own accounting is checked
    too; the replies' output tokens are counted the same way. Anthropic adds a hidden tool-use
    system prompt to every request with tools (313 tokens for ``tool_choice`` any/tool on Claude
    4.x and Haiku 4.5, per its tool-use pricing docs): it is billed, so it is counted in our input
    tokens, USD and ratios (per request: a repair pays it again). The fake judge model answers in
    the shape the prompt asks for (claims with verdicts and quotes, every chunk rated), citing the
    chunk ids the prompt shows. The fake RAGAS model extracts one statement per sentence of the
    answer (none from a refusal) and returns NLI verdicts by word overlap with a one-line reason:
    real models usually split finer and reason at more length, so RAGAS's tokens are, if anything,
    under-counted here. USD per judged record prices every side at `ANTHROPIC_MODEL`'s list price
    (input and output tokens): the same model judging both ways.
    Goal: ours <= 0.5 x RAGAS in USD per judged record, and 1 call against its 2.

    Ours is judged twice: through the Messages API and through the Message Batches API (the fake
    server processes each batch at once; entries are counted as direct calls would be), billed at
    half price. A second table prices ours every way it can be billed, against RAGAS at standard
    prices: measured (standard, batch) and computed from the same counts — the steady state with
    the constant prefix (tool schema + hidden tool prompt + system) read from the prompt cache at
    0.1 x input, which only happens on models whose minimum cacheable prompt the prefix reaches
    (`CACHE_MIN_TOKENS`: 4,096 on claude-haiku-4-5, 1,024 on claude-sonnet-4-5), and structured
    output through ``output_config`` (the schema sent as the format, no tool: no hidden tool prompt,
    assuming the API adds none of its own for it).

(b) Throughput and memory. `AnthropicJudge` at concurrency C (C worker tasks on a bounded
    ``asyncio.Queue``, as in the pipeline, each result serialised as the results line) against a
    fake Messages API in its own process that sleeps 300 ms per request (threaded: requests
    overlap). Records arrive at twice the goal rate, so the backlog (arrived - judged, the
    consumer lag) grows through the run; only the queue's records are in memory. The judging
    process is its own subprocess; its RSS is sampled every second. Goal: >= 0.9 x C / 0.3 records/s.

    python bench/judge.py              # (a) 50 records; (b) C=8 (400 records), C=16 (2,000 records)
    python bench/judge.py --quick      # (a) 20 records; (b) C=8 (160), C=16 (480)

RAGAS is not a project dependency; (a) runs without it (and says why). Installed for the figures
in bench/RESULTS.md, leaving the project's packages as they are (ragas 0.4.3 pulls instructor, which
pins rich<15 and jiter<0.15, both harmless at run time; and it imports a module that
langchain-community 0.4 dropped):

    pip freeze | grep -v '^-e' > /tmp/keep.txt
    pip install -c /tmp/keep.txt datasets tiktoken nest-asyncio appdirs diskcache openai tqdm pillow \\
        networkx scikit-network langchain 'langchain-community<0.4' langchain-openai docstring-parser \\
        jinja2 aiohttp bpe-openai
    pip install --no-deps instructor==1.17.0 ragas==0.4.3
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import gzip
import hashlib
import html
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# Before anything imports ragas: no usage telemetry leaves the machine.
os.environ["RAGAS_DO_NOT_TRACK"] = "true"
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

from monitor.contracts.model import Chunk, RagRecord
from monitor.demo.workload import TraceTruth, WorkloadConfig, generate, iter_workload, load_corpus
from monitor.judge import create_judge
from monitor.judge.lexical import is_refusal, split_claims
from monitor.judge.output import output_schema
from monitor.judge.prompt import SYSTEM_PROMPT, TOOL_DESCRIPTION, TOOL_NAME
from monitor.llm.batches import BATCH_PRICE_FACTOR
from monitor.llm.usage import DEFAULT_PRICES, Price, price_for

LATENCY = 0.3  # seconds the fake Messages API takes per request in (b)
GOAL_TOKEN_RATIO = 0.5
GOAL_THROUGHPUT = 0.9  # x C / LATENCY
TOOL_PROMPT_TOKENS = 313  # Anthropic's hidden tool-use system prompt, tool_choice any/tool, Claude 4.x
ANTHROPIC_MODEL = "claude-haiku-4-5"
_price = price_for(ANTHROPIC_MODEL, DEFAULT_PRICES)
assert _price is not None
PRICE: Price = _price  # every side is priced at this model's list price
RAGAS_MODEL = "gpt-4o-mini"
MESSAGES, CHAT = "/v1/messages", "/v1/chat/completions"
BATCHES = "/v1/messages/batches"
# Minimum cacheable prompt length (Claude tokens) by model, as Anthropic's prompt-caching docs
# list them: a prefix shorter than this is not cached, whatever `cache_control` says.
CACHE_MIN_TOKENS = {
    "claude-haiku-4-5": 4096,
    "claude-opus-4-5": 4096,
    "claude-sonnet-4-5": 1024,
    "claude-sonnet-4": 1024,
    "claude-opus-4-1": 1024,
    "claude-3-5-haiku": 2048,
}
CACHE_MODEL = "claude-sonnet-4-5"  # the steady-state cache row: a model whose minimum the prefix reaches
START_NS = 1_750_000_000_000_000_000  # fixed, so the records are a function of the seed


def _say(text: str) -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------------------------
# Token counting


@dataclass(frozen=True, slots=True)
class TokenCounter:
    name: str
    count: Callable[[str], int]


def _chars4(text: str) -> int:
    return (len(text) + 3) // 4


_ENCODINGS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


def token_counter(kind: str) -> TokenCounter:
    """``o200k`` (tiktoken offline; fails without bpe-openai), ``chars4``, or ``auto`` (o200k if it loads)."""
    if kind != "chars4":
        try:
            return _tiktoken_o200k()
        except Exception as exc:  # ImportError, PackageNotFoundError, OSError, a hash mismatch
            if kind == "o200k":
                raise
            _say(f"tiktoken o200k_base unavailable offline ({type(exc).__name__}: {exc}); counting len/4")
    return TokenCounter("len(text)/4", _chars4)


def _tiktoken_o200k() -> TokenCounter:
    """tiktoken downloads its encodings at run time; the ``bpe-openai`` wheel ships the same files.
    They go where tiktoken looks for its cache, and tiktoken checks each against its own SHA-256."""
    from importlib.metadata import distribution

    import tiktoken

    dist = distribution("bpe-openai")
    cache = tempfile.mkdtemp(prefix="bench-tiktoken-")
    atexit.register(shutil.rmtree, cache, True)
    for name, url in _ENCODINGS.items():
        packed = Path(str(dist.locate_file(f"bpe_openai/data/{name}.tiktoken.gz")))
        key = hashlib.sha1(url.encode()).hexdigest()
        (Path(cache) / key).write_bytes(gzip.decompress(packed.read_bytes()))
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    enc = tiktoken.get_encoding("o200k_base")
    return TokenCounter("tiktoken o200k_base", lambda s: len(enc.encode(s, disallowed_special=())))


def request_text(body: dict[str, Any]) -> str:
    """What a model reads from a Messages or chat-completions request: system, messages (tool calls
    and results included) and the tool / response-format schemas as JSON."""
    parts: list[str] = []

    def content(c: Any) -> None:
        if isinstance(c, str):
            parts.append(c)
            return
        for b in c if isinstance(c, list) else []:
            kind = b.get("type") if isinstance(b, dict) else None
            if kind == "text":
                parts.append(str(b.get("text", "")))
            elif kind == "tool_use":
                parts.append(json.dumps(b.get("input")))
            elif kind == "tool_result":
                content(b.get("content"))

    content(body.get("system"))
    for m in body.get("messages", []):
        content(m.get("content"))
        for call in m.get("tool_calls") or []:
            parts.append(json.dumps(call.get("function")))
    for tool in body.get("tools") or []:
        parts.append(json.dumps({k: v for k, v in tool.items() if k != "cache_control"}))
    if body.get("response_format"):
        parts.append(json.dumps(body["response_format"]))
    if body.get("output_config"):
        parts.append(json.dumps(body["output_config"]))
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# The fake LLM: Anthropic Messages and OpenAI chat completions, plausible valid answers

_WORD = re.compile(r"[a-z0-9]+")
_CHUNK = re.compile(r'<chunk id="([^"]*)"[^>]*>(.*?)</chunk>', re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 3 or w.isdigit()}


def _support(sentence: str, texts: list[str]) -> int | None:
    """Index of the text holding >= 60 % of the sentence's words (the fake model's entailment)."""
    words = _words(sentence)
    if not words:
        return None
    best = max(range(len(texts)), key=lambda i: len(words & _words(texts[i])), default=None)
    if best is None or len(words & _words(texts[best])) < 0.6 * len(words):
        return None
    return best


def _statements(answer: str) -> list[str]:
    return [s for s in split_claims(answer) if not is_refusal(s)]


def _quote(sentence: str, text: str) -> str:
    """The sentence of `text` sharing most words with `sentence` (the fake model's evidence quote)."""
    words = _words(sentence)
    return max(_SENTENCE_END.split(text.strip()), key=lambda s: len(words & _words(s)))


def judge_output(prompt: str) -> dict[str, Any]:
    """The fake model's judgement in the shape the prompt asks for (`JudgeOutput`): a claim per
    statement of the answer with its verdict and, when supported, a quote of the supporting chunk;
    every chunk rated, in chunk order. Chunk numbers are echoed as the prompt gives them."""
    chunks = [(html.unescape(i), html.unescape(t)) for i, t in _CHUNK.findall(prompt)]
    m = _ANSWER.search(prompt)
    answer = html.unescape(m.group(1)) if m else ""
    claims = []
    cited = set()
    for s in _statements(answer):
        at = _support(s, [t for _, t in chunks])
        quotes = [] if at is None else [{"chunk": chunks[at][0], "quote": _quote(s, chunks[at][1])}]
        if at is not None:
            cited.add(at)
        claims.append(
            {"text": s, "verdict": "not_in_context" if at is None else "supported", "quotes": quotes}
        )
    refused = is_refusal(answer)
    return {
        "claims": claims,
        "answerable_from_context": bool(cited),
        "refuses": refused,
        "hedges": False,
        "answer_relevance": 1 if refused else 3,
        "context_relevance": [3 if i in cited else 2 for i in range(len(chunks))],
    }


def anthropic_reply(body: dict[str, Any], tokens: int, counter: TokenCounter) -> dict[str, Any]:
    user = body["messages"][0]["content"]
    verdict = judge_output(user if isinstance(user, str) else json.dumps(user))
    return {
        "id": f"msg_{uuid.uuid4().hex[:16]}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", ANTHROPIC_MODEL),
        "content": [
            {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:16]}", "name": TOOL_NAME, "input": verdict}
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": tokens,
            "output_tokens": counter.count(json.dumps(verdict)),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _ragas_input(prompt: str) -> dict[str, Any]:
    """The JSON input RAGAS puts after its few-shot examples (``...input: {...}\\nOutput:``)."""
    at = prompt.rfind("input: ")
    if at < 0:
        raise ValueError("no RAGAS input in the prompt")
    data, _ = json.JSONDecoder().raw_decode(prompt, at + len("input: "))
    if not isinstance(data, dict):
        raise ValueError("RAGAS input is not an object")
    return data


def _last_user(body: dict[str, Any]) -> str:
    return str(next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user"))


def step_of(path: str, body: dict[str, Any]) -> str:
    """Which prompt a request is: ours (``judge``), or RAGAS's ``statements`` or ``nli`` step."""
    if path != CHAT:
        return "judge"
    try:
        return "nli" if "context" in _ragas_input(_last_user(body)) else "statements"
    except (KeyError, StopIteration, ValueError):
        return "other"


def openai_reply(body: dict[str, Any], tokens: int, counter: TokenCounter) -> dict[str, Any]:
    """RAGAS's two faithfulness prompts: statements from the answer, then one NLI verdict each."""
    data = _ragas_input(_last_user(body))
    out: dict[str, Any]
    if "statements" in data and "context" in data:
        context = [ln for ln in str(data["context"]).split("\n") if ln]
        out = {
            "statements": [
                {
                    "statement": s,
                    "reason": "The context states this." if ok else "The context does not mention this.",
                    "verdict": int(ok),
                }
                for s in data["statements"]
                for ok in [_support(s, context) is not None]
            ]
        }
    elif "answer" in data:
        out = {"statements": _statements(str(data["answer"]))}
    else:
        raise ValueError(f"unknown RAGAS prompt with input keys {sorted(data)}")
    text = json.dumps(out)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", RAGAS_MODEL),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": tokens,
            "completion_tokens": counter.count(text),
            "total_tokens": tokens + counter.count(text),
        },
    }


class FakeLLM(ThreadingHTTPServer):
    """One thread per connection (requests overlap); counts calls and input tokens per path.
    ``GET /stats`` returns the counters; ``GET /stats?reset`` also restarts the in-flight maximum."""

    daemon_threads = True
    request_queue_size = 256  # a burst of C new connections must not overflow the listen backlog

    def __init__(self, counter: TokenCounter, delay: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.counter = counter
        self.delay = delay
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.tokens: Counter[str] = Counter()
        self.out_tokens: Counter[str] = Counter()  # what the fake model wrote, same counter
        self.step_calls: Counter[str] = Counter()
        self.step_tokens: Counter[str] = Counter()
        self.errors = 0
        self.inflight = self.max_inflight = 0
        self.batches: dict[str, list[tuple[str, dict[str, Any]]]] = {}  # id -> (custom_id, result)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def create_batch(self, requests: list[dict[str, Any]]) -> dict[str, Any]:
        """A Message Batch, processed at once: each entry counted and answered as a direct call on
        `MESSAGES` would be (the batch's own create / poll / results requests are free)."""
        results = []
        for r in requests:
            params = r["params"]
            tokens = self.counter.count(request_text(params))
            reply = anthropic_reply(params, tokens, self.counter)
            with self.lock:
                self._account(MESSAGES, step_of(MESSAGES, params), tokens, reply["usage"])
            results.append((r["custom_id"], {"type": "succeeded", "message": reply}))
        batch_id = f"msgbatch_{uuid.uuid4().hex[:16]}"
        with self.lock:
            self.batches[batch_id] = results
        return self.batch_view(batch_id)

    def _account(self, path: str, step: str, tokens: int | None, usage: dict[str, Any] | None = None) -> None:
        """Book a request on `path`, prompt `step`: one call of `tokens` input tokens (unless
        None), and the output tokens of its reply's `usage` (if given). The caller holds
        `self.lock`."""
        if tokens is not None:
            self.calls[path] += 1
            self.tokens[path] += tokens
            self.step_calls[step] += 1
            self.step_tokens[step] += tokens
        if usage is not None:
            self.out_tokens[path] += usage.get("output_tokens", usage.get("completion_tokens", 0))

    def batch_view(self, batch_id: str) -> dict[str, Any]:
        n = len(self.batches[batch_id])
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended",
            "request_counts": {"processing": 0, "succeeded": n, "errored": 0, "canceled": 0, "expired": 0},
            "created_at": now,
            "ended_at": now,
            "expires_at": now,
            "results_url": f"{self.url}{BATCHES}/{batch_id}/results",
        }

    def snapshot(self, path: str) -> tuple[int, int, int]:
        """Calls, input tokens and output tokens so far on `path`."""
        with self.lock:
            return self.calls[path], self.tokens[path], self.out_tokens[path]

    def steps(self) -> dict[str, tuple[int, int]]:
        with self.lock:
            return {k: (self.step_calls[k], self.step_tokens[k]) for k in self.step_calls}

    def stats(self, reset: bool = False) -> dict[str, Any]:
        with self.lock:
            out = {
                "calls": dict(self.calls),
                "tokens": dict(self.tokens),
                "errors": self.errors,
                "max_inflight": self.max_inflight,
            }
            if reset:
                self.max_inflight = self.inflight
            return out

    def start(self) -> FakeLLM:
        threading.Thread(target=self.serve_forever, name="fake-llm", daemon=True).start()
        return self


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the real APIs
    # Headers and body are two writes: with Nagle on, the body would wait for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: FakeLLM

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        srv = self.server
        if self.path.startswith("/stats"):
            self._send(200, srv.stats(reset="reset" in self.path))
        elif self.path.startswith(BATCHES + "/") and self.path.split("/")[4] in srv.batches:
            batch_id = self.path.split("/")[4]
            if self.path.endswith("/results"):
                lines = "".join(
                    json.dumps({"custom_id": c, "result": r}) + "\n" for c, r in srv.batches[batch_id]
                )
                data = lines.encode()
                self.send_response(200)
                self.send_header("content-type", "application/binary")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._send(200, srv.batch_view(batch_id))
        else:
            self._send(404, {"error": {"message": "no such path"}})

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        if self.path == BATCHES:
            self._send(200, srv.create_batch(body["requests"]))
            return
        tokens = srv.counter.count(request_text(body))
        step = step_of(self.path, body)
        with srv.lock:
            srv._account(self.path, step, tokens)
            srv.inflight += 1
            srv.max_inflight = max(srv.max_inflight, srv.inflight)
        try:
            if self.path == MESSAGES:
                status, reply = 200, anthropic_reply(body, tokens, srv.counter)
            elif self.path == CHAT:
                status, reply = 200, openai_reply(body, tokens, srv.counter)
            else:
                status, reply = 404, {"error": {"message": "no such path"}}
        except (KeyError, IndexError, TypeError, ValueError, StopIteration) as exc:
            status, reply = (
                400,
                {"type": "error", "error": {"type": "invalid_request_error", "message": repr(exc)}},
            )
        with srv.lock:
            if status != 200:
                srv.errors += 1
            else:
                srv._account(self.path, step, None, reply["usage"])
        if srv.delay:
            time.sleep(srv.delay)
        with srv.lock:
            srv.inflight -= 1
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
            self._send(status, reply)


# --------------------------------------------------------------------------------------------
# Records


def to_record(t: TraceTruth, config: WorkloadConfig) -> RagRecord:
    chunks = load_corpus().chunks
    return RagRecord(
        trace_id=t.trace_id,
        span_id=t.root_span_id,
        service=config.service_name,
        query=t.query,
        query_type=t.query_type,
        chunks=[Chunk(cid, chunks[cid].text) for cid in t.chunk_ids],
        answer=t.answer,
        start_ns=t.start_ns,
        end_ns=t.end_ns,
    )


def records(n: int, seed: int) -> list[RagRecord]:
    config = WorkloadConfig()
    return [to_record(t, config) for t in generate(n, seed=seed, start_ns=START_NS, config=config).traces]


def record_stream(n: int, seed: int) -> Iterator[RagRecord]:
    """Lazily, 50 traces at a time; a pool of 64 distinct requests, so the generator's own memory
    stops growing after the first 64 records (later records reuse them with new ids)."""
    config = WorkloadConfig(pool_size=64)
    for truths, _ in iter_workload(n, seed=seed, batch=50, start_ns=START_NS, config=config):
        for t in truths:
            yield to_record(t, config)


# --------------------------------------------------------------------------------------------
# (a) tokens and calls per judged record


@dataclass(slots=True)
class Side:
    name: str
    path: str
    calls: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    out_tokens: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    steps: dict[str, tuple[int, int]] = field(default_factory=dict)  # calls, tokens per prompt
    parts: dict[str, float] = field(default_factory=dict)  # tokens per record by part of the prompt
    reported_usd: list[float] = field(default_factory=list)  # the judge's own cost_usd (ours only)
    out_parts: Counter[str] = field(default_factory=Counter)  # output tokens by field, summed (ours)
    note: str = ""

    def summary(self) -> dict[str, Any]:
        n = len(self.calls) or 1
        return {
            "name": self.name,
            "records": len(self.calls),
            "calls_per_record": sum(self.calls) / n,
            "calls_min_max": [min(self.calls, default=0), max(self.calls, default=0)],
            "input_tokens_per_record": sum(self.tokens) / n,
            "input_tokens_median": statistics.median(self.tokens) if self.tokens else 0,
            "output_tokens_per_record": sum(self.out_tokens) / n,
            "mean_faithfulness": statistics.fmean(self.scores) if self.scores else None,
            "errors": self.errors[:5],
            "error_count": len(self.errors),
            "steps": {
                k: {"calls_per_record": c / n, "tokens_per_call": t / c if c else 0.0}
                for k, (c, t) in self.steps.items()
            },
            "parts": self.parts,
            "reported_usd_per_record": sum(self.reported_usd) / n if self.reported_usd else None,
            "output_parts": {k: v / n for k, v in self.out_parts.items()},
            "per_record": {"calls": self.calls, "tokens": self.tokens, "out_tokens": self.out_tokens},
            "note": self.note,
        }


async def measure(
    side: Side, server: FakeLLM, recs: list[RagRecord], judge_one: Callable[[RagRecord], Any]
) -> Side:
    """Judge the records one after another, attributing the server's calls and tokens to each."""
    before = server.steps()
    for r in recs:
        c0, t0, o0 = server.snapshot(side.path)
        try:
            score = await judge_one(r)
            if isinstance(score, float) and score == score:  # NaN: no statements
                side.scores.append(score)
        except Exception as exc:
            side.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        c1, t1, o1 = server.snapshot(side.path)
        side.calls.append(c1 - c0)
        side.tokens.append(t1 - t0)
        side.out_tokens.append(o1 - o0)
    for k, (c, t) in server.steps().items():
        c0, t0 = before.get(k, (0, 0))
        if c > c0:
            side.steps[k] = (c - c0, t - t0)
    return side


async def ours(server: FakeLLM, recs: list[RagRecord], batch: bool = False) -> Side:
    """Our judge on the records one after another; with `batch`, through the Message Batches API
    (each record its own batch, sent at once: what is billed does not depend on the batch size)."""
    options: dict[str, Any] = {
        "base_url": server.url,
        "api_key": "sk-ant-bench-not-a-key",
        "model": ANTHROPIC_MODEL,
        "max_retries": 0,
    }
    if batch:
        options["batch"] = {"enabled": True, "max_wait_seconds": 0.0, "poll_seconds": 0.01}
    judge = create_judge("anthropic", options)
    name = "ours: AnthropicJudge, 1 forced tool call" + (", Message Batches" if batch else "")
    side = Side(name, MESSAGES)
    mismatched = 0

    async def one(r: RagRecord) -> float | None:
        nonlocal mismatched
        _, t0, _ = server.snapshot(MESSAGES)
        j = await judge.judge(r)
        _, t1, _ = server.snapshot(MESSAGES)
        mismatched += j.tokens.input + j.tokens.cache_read + j.tokens.cache_write != t1 - t0
        if not j.ok:
            raise RuntimeError(j.error)
        side.reported_usd.append(j.cost_usd or 0.0)
        raw, count = j.raw if isinstance(j.raw, dict) else {}, server.counter.count
        claims = raw.get("claims") or []
        side.out_parts["claim texts"] += sum(count(c["text"]) for c in claims)
        side.out_parts["evidence quotes"] += sum(count(e["quote"]) for c in claims for e in c["quotes"])
        side.out_parts["chunk ratings"] += count(json.dumps(raw.get("context_relevance")))
        side.out_parts["all"] += count(json.dumps(raw))
        return j.faithfulness

    try:
        await measure(side, server, recs, one)
    finally:
        await judge.aclose()
    side.note = "judge-reported input tokens = server count" if not mismatched else f"{mismatched} mismatches"
    tool = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": output_schema()}
    system, schema = server.counter.count(SYSTEM_PROMPT), server.counter.count(json.dumps(tool))
    record = sum(side.tokens) / max(1, len(side.tokens)) - system - schema
    side.parts = {"system prompt": system, "tool schema": schema, "record (user turn)": record}
    # The same request with structured output through `output_config` instead of a forced tool.
    fmt = {"format": {"type": "json_schema", "schema": output_schema()}}
    side.parts["output_config (instead of the tool)"] = server.counter.count(json.dumps(fmt))
    return side


async def ragas_collections(server: FakeLLM, recs: list[RagRecord]) -> Side:
    from openai import AsyncOpenAI
    from ragas.llms import llm_factory
    from ragas.metrics.collections import Faithfulness

    client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="sk-bench-not-a-key", max_retries=0)
    metric = Faithfulness(llm=llm_factory(RAGAS_MODEL, client=client))

    async def one(r: RagRecord) -> float:
        contexts = [c.content or "" for c in r.chunks]
        result = await metric.ascore(user_input=r.query, response=r.answer, retrieved_contexts=contexts)
        return float(result.value)

    try:
        return await measure(Side("RAGAS Faithfulness (collections, llm_factory)", CHAT), server, recs, one)
    finally:
        await client.close()


async def ragas_legacy(server: FakeLLM, recs: list[RagRecord]) -> Side:
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr
    from ragas.dataset_schema import SingleTurnSample
    from ragas.llms import LangchainLLMWrapper

    with warnings.catch_warnings():  # deprecated in 0.4, still the path ragas.evaluate() documents
        warnings.simplefilter("ignore", DeprecationWarning)
        from ragas.metrics import Faithfulness

        chat = ChatOpenAI(
            model=RAGAS_MODEL,
            base_url=f"{server.url}/v1",
            api_key=SecretStr("sk-bench-not-a-key"),
            max_retries=0,
        )
        metric = Faithfulness(llm=LangchainLLMWrapper(chat))

    async def one(r: RagRecord) -> float:
        sample = SingleTurnSample(
            user_input=r.query, response=r.answer, retrieved_contexts=[c.content or "" for c in r.chunks]
        )
        return float(await metric.single_turn_ascore(sample))

    return await measure(Side("RAGAS Faithfulness (legacy, LangchainLLMWrapper)", CHAT), server, recs, one)


def compare_tokens(args: argparse.Namespace, counter: TokenCounter) -> dict[str, Any]:
    recs = records(args.records_a, args.seed)
    server = FakeLLM(counter).start()
    sides: list[dict[str, Any]] = []
    ragas_version: str | None = None
    ragas_problem = ""
    try:
        sides.append(asyncio.run(ours(server, recs)).summary())
        sides.append(asyncio.run(ours(server, recs, batch=True)).summary())
        try:
            import ragas

            ragas_version = str(ragas.__version__)
        except Exception as exc:  # not installed, or an incompatible langchain_community
            ragas_problem = f"ragas does not import: {type(exc).__name__}: {exc}"
        if ragas_version is not None:
            for run in (ragas_collections, ragas_legacy):
                try:
                    sides.append(asyncio.run(run(server, recs)).summary())
                except Exception as exc:
                    ragas_problem += f"{run.__name__}: {type(exc).__name__}: {exc}; "
        errors = server.stats()["errors"]
    finally:
        server.shutdown()
        server.server_close()
    return {
        "records": len(recs),
        "seed": args.seed,
        "counter": counter.name,
        "ragas_version": ragas_version,
        "ragas_problem": ragas_problem,
        "server_errors": errors,
        "sides": sides,
    }


# --------------------------------------------------------------------------------------------
# (b) throughput and memory, in a subprocess per concurrency


def _rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def run_load(args: argparse.Namespace) -> dict[str, Any]:
    """One (b) run: C workers judge `records` records arriving at `rate`/s through a bounded queue."""
    c, n = args.concurrency[0], args.records
    judge = create_judge(
        "anthropic",
        {
            "base_url": args.url,
            "api_key": "sk-ant-bench-not-a-key",
            "model": ANTHROPIC_MODEL,
            "max_concurrency": c,
            "timeout_seconds": 30.0,
            "max_retries": 0,
        },
    )
    queue: asyncio.Queue[RagRecord] = asyncio.Queue(maxsize=args.queue_size)
    stream = record_stream(n, args.seed)
    latencies: list[float] = []
    failed: list[str] = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    cpu0 = time.process_time()
    samples: list[dict[str, float]] = []
    first: float | None = None
    last = 0.0
    max_queued = 0

    def sample() -> None:
        now = loop.time() - t0
        judged = len(latencies) + len(failed)
        arrived = min(int(now * args.rate), 10**9)
        samples.append(
            {"t": round(now, 2), "rss_mib": round(_rss_mib(), 1), "judged": judged, "lag": arrived - judged}
        )

    async def produce() -> None:
        nonlocal max_queued
        for i, record in enumerate(stream):  # record i arrives at t0 + i / rate
            delay = t0 + i / args.rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await queue.put(record)
            max_queued = max(max_queued, queue.qsize())

    async def work() -> None:
        nonlocal first, last
        while True:
            record = await queue.get()
            if first is None:
                first = loop.time()
            j = await judge.judge(record)
            json.dumps(j.to_json_dict())  # the results line the pipeline writes
            if j.ok:
                latencies.append(j.latency_s)
            else:
                failed.append(j.error or "")
                if len(failed) <= 3:
                    _say(f"judgement failed: {j.error}")
            last = loop.time()
            queue.task_done()
            if len(latencies) + len(failed) >= n:
                done.set()

    async def watch() -> None:
        while True:
            sample()
            await asyncio.sleep(1.0)

    sample()
    tasks = [asyncio.create_task(produce()), asyncio.create_task(watch())]
    tasks += [asyncio.create_task(work()) for _ in range(c)]
    try:
        async with asyncio.timeout(args.timeout):
            await done.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await judge.aclose()
    sample()
    cpu = time.process_time() - cpu0
    seconds = last - (first or last)
    judged = len(latencies) + len(failed)
    tenth = next((s for s in samples if s["judged"] >= judged / 10), samples[-1])
    lat = sorted(latencies) or [0.0]
    return {
        "concurrency": c,
        "records": judged,
        "failed": len(failed),
        "seconds": seconds,
        "per_s": judged / seconds if seconds else 0.0,
        "latency_p50": lat[len(lat) // 2],
        "latency_p95": lat[min(len(lat) - 1, int(len(lat) * 0.95))],
        "cpu_ms_per_record": 1000 * cpu / judged if judged else 0.0,
        "offered_per_s": args.rate,
        "queue_size": args.queue_size,
        "max_queued": max_queued,
        "rss_mib": {
            "start": samples[0]["rss_mib"],
            "at_10pct": tenth["rss_mib"],
            "peak": max(s["rss_mib"] for s in samples),
            "end": samples[-1]["rss_mib"],
        },
        "lag_end": samples[-1]["lag"],
        "samples": samples,
    }


def serve(args: argparse.Namespace) -> None:
    """The (b) server role: a fake Messages API that sleeps `delay` per request, until killed."""
    server = FakeLLM(TokenCounter("len(text)/4", _chars4), delay=args.delay)
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


def _get(url: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:  # loopback only
        data: dict[str, Any] = json.loads(resp.read())
    return data


def throughput(args: argparse.Namespace) -> list[dict[str, Any]]:
    me = [sys.executable, os.path.abspath(__file__)]
    server = subprocess.Popen(
        [*me, "--role", "server", "--delay", str(LATENCY)], stdout=subprocess.PIPE, text=True
    )
    runs = []
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(server.stdout.readline().split()[1])}"
        top = max(args.concurrency)
        for c in args.concurrency:
            n = args.records_b if c == top else c * args.rounds
            capacity = c / LATENCY
            timeout = 60 + 3 * n / capacity
            _get(f"{url}/stats?reset")
            cmd = [*me, "--role", "load", "--url", url, "--concurrency", str(c), "--records", str(n)]
            cmd += ["--rate", f"{2 * capacity:.3f}", "--queue-size", str(args.queue_size)]
            cmd += ["--seed", str(args.seed), "--timeout", f"{timeout:.0f}"]
            _say(f"(b) C={c}: {n:,} records offered at {2 * capacity:,.1f}/s ...")
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30)
            if proc.returncode != 0:
                raise RuntimeError(f"load run C={c} failed:\n{proc.stderr[-3000:]}")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            res["server_max_inflight"] = _get(f"{url}/stats")["max_inflight"]
            r = res["rss_mib"]
            _say(
                f"    {res['per_s']:.1f} judged/s over {res['seconds']:.1f} s, max in flight "
                f"{res['server_max_inflight']}, RSS {r['start']:.0f}/{r['at_10pct']:.0f}/{r['peak']:.0f}/"
                f"{r['end']:.0f} MiB, lag at end {res['lag_end']:,}"
            )
            runs.append(res)
    finally:
        server.terminate()
        server.wait(10)
    return runs


# --------------------------------------------------------------------------------------------
# Report


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("anthropic", "ragas", "openai", "langchain-openai", "instructor", "tiktoken", "bpe-openai"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "-"
    return out


def _usd(input_tokens: float, output_tokens: float, cache_read: float = 0.0, factor: float = 1.0) -> float:
    """USD at `ANTHROPIC_MODEL`'s list price, for every side: the same model's prices; `factor`
    `BATCH_PRICE_FACTOR` for the Message Batches API."""
    return (
        factor
        * (input_tokens * PRICE.input + output_tokens * PRICE.output + cache_read * PRICE.cache_read)
        / 1e6
    )


def _same_ratios(model: str) -> bool:
    """Whether `model`'s four prices are one multiple of `ANTHROPIC_MODEL`'s: then every ratio in
    the table holds on it too."""
    other = price_for(model, DEFAULT_PRICES)
    if other is None:
        return False
    f = other.input / PRICE.input
    mine = (PRICE.output, PRICE.cache_read, PRICE.cache_write)
    return all(
        abs(x * f - y) < 1e-9
        for x, y in zip(mine, (other.output, other.cache_read, other.cache_write), strict=True)
    )


def cost_rows(a: dict[str, Any]) -> list[dict[str, Any]]:
    """Our judge's USD per judged record, every way it can be billed, each with what it assumes.

    Measured: the standard Messages API and the Message Batches API (input and output tokens
    counted on the fake server, plus the hidden tool-use prompt on every request). Computed from
    the same counts: the steady state with cache hits on the constant prefix (tools + hidden tool
    prompt + system, read at 0.1 x input; the writes, 1.25 x once per 5 minutes, left out), and
    structured output through `output_config` (the schema sent as the format, no tool, hence no
    hidden tool prompt — assuming the API adds no prompt of its own for it)."""
    sides = {s["name"]: s for s in a["sides"] if s["name"].startswith("ours")}
    std = next(s for n, s in sides.items() if "Batches" not in n)
    bat = next((s for n, s in sides.items() if "Batches" in n), None)
    calls = std["calls_per_record"]
    hidden = TOOL_PROMPT_TOKENS * calls
    out = std["output_tokens_per_record"]
    parts = std["parts"]
    prefix = parts["system prompt"] + parts["tool schema"] + TOOL_PROMPT_TOKENS
    fmt_in = std["input_tokens_per_record"] - calls * (
        parts["tool schema"] - parts["output_config (instead of the tool)"]
    )
    fmt_prefix = parts["system prompt"] + parts["output_config (instead of the tool)"]
    rows = [
        {
            "name": "standard (Messages API)",
            "input": std["input_tokens_per_record"] + hidden,
            "cached": 0.0,
            "output": out,
            "factor": 1.0,
            "how": "measured",
        },
    ]
    if bat is not None:
        rows.append(
            {
                "name": "Message Batches",
                "input": bat["input_tokens_per_record"] + TOOL_PROMPT_TOKENS * bat["calls_per_record"],
                "cached": 0.0,
                "output": bat["output_tokens_per_record"],
                "factor": BATCH_PRICE_FACTOR,
                "how": "measured",
            }
        )
    rows.append(
        {
            "name": "Message Batches + cache hits",
            "input": std["input_tokens_per_record"] + hidden - prefix * calls,
            "cached": prefix * calls,
            "output": out,
            "factor": BATCH_PRICE_FACTOR,
            "prefix": prefix,
            "how": f"computed: prefix read from cache ({CACHE_MODEL}-class minimum)",
        }
    )
    rows.append(
        {
            "name": "output_config, standard",
            "input": fmt_in,
            "cached": 0.0,
            "output": out,
            "factor": 1.0,
            "how": "computed: no tool, no hidden prompt",
            "prefix": fmt_prefix,
        }
    )
    rows.append(
        {
            "name": "output_config + Message Batches",
            "input": fmt_in,
            "cached": 0.0,
            "output": out,
            "factor": BATCH_PRICE_FACTOR,
            "how": "computed: no tool, no hidden prompt",
            "prefix": fmt_prefix,
        }
    )
    for r in rows:
        r["usd"] = _usd(r["input"], r["output"], r["cached"], r["factor"])
    return rows


def print_tokens(a: dict[str, Any], ragas_version: str) -> None:
    ours_sides = [s for s in a["sides"] if s["name"].startswith("ours")]
    ragas_sides = [s for s in a["sides"] if not s["name"].startswith("ours")]
    ours_row = ours_sides[0]
    calls = ours_row["calls_per_record"]
    sent = ours_row["input_tokens_per_record"]
    hidden = TOOL_PROMPT_TOKENS * calls  # added by the API to every request with a forced tool
    base = sent + hidden
    base_usd = _usd(base, ours_row["output_tokens_per_record"])
    _say(
        f"\n(a) per judged record, {a['records']} records (seed {a['seed']}); tokens counted on the "
        f"server with {a['counter']} over system + messages + tool/response schema (input) and the "
        f"reply (output); ours also pays Anthropic's hidden tool-use system prompt ({TOOL_PROMPT_TOKENS} "
        f"tokens a request); USD at {ANTHROPIC_MODEL} list prices (${PRICE.input:g} / ${PRICE.output:g} "
        "per MTok in/out) for every side"
    )
    header = ("judge", "calls/record (min-max)", "input tok", "output tok", "USD/record", "ours / this")
    rows = [(*header, "faithfulness")]

    def row(name: str, s: dict[str, Any], tokens: float, usd: float, ratio: str) -> None:
        lo, hi = s["calls_min_max"]
        faith = "-" if s["mean_faithfulness"] is None else f"{s['mean_faithfulness']:.2f}"
        err = f"  [{s['error_count']} errors]" if s["error_count"] else ""
        rows.append(
            (
                name + err,
                f"{s['calls_per_record']:.2f} ({lo}-{hi})",
                f"{tokens:,.0f}",
                f"{s['output_tokens_per_record']:,.0f}",
                f"{usd:.6f}",
                ratio,
                faith,
            )
        )

    row(ours_row["name"], ours_row, base, base_usd, "")
    for s in ragas_sides:
        t = s["input_tokens_per_record"]
        usd = _usd(t, s["output_tokens_per_record"])
        ratio = f"in {base / t:.2f}, USD {base_usd / usd:.2f}" if t and usd else "-"
        row(f"{s['name']} {ragas_version}", s, t, usd, ratio)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        _say(
            "  "
            + "  ".join(
                x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    ours_pr = ours_row["per_record"]
    for s in ragas_sides:  # the records RAGAS judged in 2 calls: answers that make statements
        pr = s["per_record"]
        two = [i for i, c in enumerate(pr["calls"]) if c >= 2]
        if two:
            mine = statistics.fmean(
                ours_pr["tokens"][i] + TOOL_PROMPT_TOKENS * ours_pr["calls"][i] for i in two
            )
            mine_usd = statistics.fmean(
                _usd(
                    ours_pr["tokens"][i] + TOOL_PROMPT_TOKENS * ours_pr["calls"][i], ours_pr["out_tokens"][i]
                )
                for i in two
            )
            theirs = statistics.fmean(pr["tokens"][i] for i in two)
            theirs_usd = statistics.fmean(_usd(pr["tokens"][i], pr["out_tokens"][i]) for i in two)
            _say(
                f"  {len(two)} records with statements (RAGAS 2 calls), {s['name']}: input ours "
                f"{mine:,.0f} vs {theirs:,.0f} tokens = {mine / theirs:.2f}; USD {mine_usd:.6f} vs "
                f"{theirs_usd:.6f} = {mine_usd / theirs_usd:.2f}"
            )
    _say("  where the input tokens go, per record:")
    parts = {**ours_row["parts"], f"hidden tool-use prompt ({calls:.2f} x {TOOL_PROMPT_TOKENS})": hidden}
    fmt = parts.pop("output_config (instead of the tool)")
    _say("    ours: " + " + ".join(f"{k} {v:,.0f}" for k, v in parts.items()))
    _say(f"    (structured output through output_config: the schema as the format costs {fmt:,.0f}, no tool)")
    for s in ragas_sides:
        steps = [
            f"{k} {x['calls_per_record']:.2f} calls x {x['tokens_per_call']:,.0f}"
            for k, x in s["steps"].items()
        ]
        _say(f"    {s['name']}: " + " + ".join(steps))
    o = dict(ours_row["output_parts"])
    if o:
        rest = o.pop("all") - sum(o.values())
        _say(
            "  where the output tokens go: "
            + " + ".join(f"{k} {v:,.0f}" for k, v in o.items())
            + f" + keys and JSON {rest:,.0f}"
        )
    if a["ragas_problem"]:
        _say(f"  RAGAS problem: {a['ragas_problem']}")
    for s in ours_sides:
        _say(f"  {s['name']}: {s['note']}")
    _say(f"  fake server errors: {a['server_errors']}")

    # USD per judged record, every way ours can be billed, against RAGAS at standard prices.
    costs = cost_rows(a)
    ragas_usd = [
        (
            s["name"].split(" (")[1].split(",")[0],
            _usd(s["input_tokens_per_record"], s["output_tokens_per_record"]),
        )
        for s in ragas_sides
    ]
    _say(
        f"\n  ours, USD per judged record by how it is billed ({ANTHROPIC_MODEL} prices; "
        "RAGAS at standard prices):"
    )
    head = [
        "ours",
        "input tok (cached)",
        "output tok",
        "USD/record",
        *(f"/ RAGAS {n}" for n, _ in ragas_usd),
        "how",
    ]
    table = [head]
    for r in costs:
        cached = f" ({r['cached']:,.0f})" if r["cached"] else ""
        ratios = [f"{r['usd'] / u:.2f}" for _, u in ragas_usd]
        table.append(
            [
                r["name"],
                f"{r['input'] + r['cached']:,.0f}{cached}",
                f"{r['output']:,.0f}",
                f"{r['usd']:.6f}",
                *ratios,
                r["how"],
            ]
        )
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    for t in table:
        _say(
            "    "
            + "  ".join(
                x.ljust(w) if i in (0, len(head) - 1) else x.rjust(w)
                for i, (x, w) in enumerate(zip(t, widths, strict=True))
            )
        )
    reported = [s for s in ours_sides if s["reported_usd_per_record"] is not None]
    if len(reported) == 2:
        a_std, a_bat = (s["reported_usd_per_record"] for s in reported)
        _say(
            f"    the judge's own cost_usd (fake usage, without the hidden prompt): standard {a_std:.6f}, "
            f"batch {a_bat:.6f} = {a_bat / a_std:.2f} x"
        )
    cache_row = next(r for r in costs if "cache" in r["name"])
    prefix = cache_row["prefix"]
    for model in (ANTHROPIC_MODEL, CACHE_MODEL):
        least = CACHE_MIN_TOKENS[model]
        reached = "reaches" if prefix >= least else "does NOT reach"
        same = "same price ratios" if _same_ratios(model) else "other price ratios"
        _say(
            f"    cache: the constant prefix (tools + hidden tool prompt + system) is {prefix:,.0f} tokens "
            f"({a['counter']}); {model}'s minimum cacheable prompt is {least:,}: it {reached} it ({same})"
        )
    fmt_prefix = next(r for r in costs if r["name"].startswith("output_config"))["prefix"]
    _say(
        f"    output_config drops the tool and its hidden prompt; its prefix (system + format) is "
        f"{fmt_prefix:,.0f} tokens, below the cache minimum of every model listed"
    )
    if ragas_usd:
        cheaper = min(u for _, u in ragas_usd)
        for r in costs:
            verdict = "met" if r["usd"] <= GOAL_TOKEN_RATIO * cheaper else "NOT met"
            if r["cached"] and prefix < CACHE_MIN_TOKENS[ANTHROPIC_MODEL]:
                verdict += f", with {CACHE_MODEL}'s cache minimum; no cache hits on {ANTHROPIC_MODEL}"
            _say(
                f"    goal ours <= {GOAL_TOKEN_RATIO} x the cheaper RAGAS, {r['name']}: "
                f"{r['usd'] / cheaper:.2f} [{verdict}]"
            )


def print_throughput(runs: list[dict[str, Any]], queue_size: int) -> None:
    _say(f"\n(b) AnthropicJudge against a fake Messages API sleeping {LATENCY * 1000:.0f} ms per request")
    rows = [
        (
            "C",
            "records",
            "judged/s",
            "goal 0.9C/0.3",
            "p50/p95 latency s",
            "CPU ms/rec",
            "in flight",
            "RSS start/10%/peak/end MiB",
            "lag at end",
        )
    ]
    for r in runs:
        goal = GOAL_THROUGHPUT * r["concurrency"] / LATENCY
        ok = "ok" if r["per_s"] >= goal else "NOT met"
        m = r["rss_mib"]
        fails = f" ({r['failed']} failed)" if r["failed"] else ""
        rows.append(
            (
                str(r["concurrency"]),
                f"{r['records']:,}{fails}",
                f"{r['per_s']:.1f}",
                f"{goal:.1f} [{ok}]",
                f"{r['latency_p50']:.3f}/{r['latency_p95']:.3f}",
                f"{r['cpu_ms_per_record']:.1f}",
                str(r["server_max_inflight"]),
                f"{m['start']:.0f}/{m['at_10pct']:.0f}/{m['peak']:.0f}/{m['end']:.0f}",
                f"{r['lag_end']:,}",
            )
        )
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    for cells in rows:
        _say("  " + "  ".join(x.rjust(w) for x, w in zip(cells, widths, strict=True)))
    _say(
        f"  records arrive at 2 x C/{LATENCY}/s; queue bound {queue_size} (in memory: queue + C in flight); "
        "lag = arrived - judged"
    )


# --------------------------------------------------------------------------------------------
# CLI


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a short run: fewer records in (a) and (b)")
    p.add_argument("--records-a", type=int, help="records compared in (a) (default 50; quick 20)")
    p.add_argument("--records-b", type=int, help="records judged at the largest C (default 2000; quick 480)")
    p.add_argument("--rounds", type=int, help="records per worker at the other Cs (default 50; quick 20)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[8, 16], help="the Cs of (b)")
    p.add_argument("--queue-size", type=int, default=256, help="bound of the judge queue in (b)")
    p.add_argument(
        "--tokens", choices=("auto", "o200k", "chars4"), default="auto", help="token counter of (a)"
    )
    p.add_argument("--skip", choices=("a", "b"), help="skip one part")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", metavar="FILE", help="write the figures to FILE")
    # Internal: the (b) server and load processes.
    p.add_argument("--role", choices=("server", "load"), help=argparse.SUPPRESS)
    p.add_argument("--delay", type=float, default=LATENCY, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--records", type=int, help=argparse.SUPPRESS)
    p.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=600.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.records_a = args.records_a or (20 if args.quick else 50)
    args.records_b = args.records_b or (480 if args.quick else 2000)
    args.rounds = args.rounds or (20 if args.quick else 50)
    if min(args.records_a, args.records_b, args.rounds, args.queue_size, *args.concurrency) < 1:
        p.error("counts must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role == "server":
        serve(args)
        return 0
    if args.role == "load":
        print(json.dumps(asyncio.run(run_load(args))), flush=True)
        return 0
    started = time.perf_counter()
    command = shlex.join([os.path.relpath(sys.executable), *sys.argv])
    report: dict[str, Any] = {"command": command, "params": vars(args), "versions": _versions()}
    report["machine"] = f"{len(os.sched_getaffinity(0))} CPU, {platform.machine()}"
    if args.skip != "a":
        counter = token_counter(args.tokens)
        _say(f"(a) {args.records_a} records: ours, then RAGAS; tokens: {counter.name}")
        report["tokens"] = compare_tokens(args, counter)
    if args.skip != "b":
        report["throughput"] = throughput(args)
    report["seconds"] = time.perf_counter() - started
    if "tokens" in report:
        print_tokens(report["tokens"], report["versions"]["ragas"])
    if "throughput" in report:
        print_throughput(report["throughput"], args.queue_size)
    versions = ", ".join(f"{k} {x}" for k, x in report["versions"].items())
    _say(f"\n{report['machine']}; {versions}")
    _say(f"total {report['seconds']:.0f} s; command: {command}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
