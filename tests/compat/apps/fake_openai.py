"""A local OpenAI-compatible server (chat completions, streamed or not, legacy completions and
embeddings) for the apps whose instrumentation wraps an OpenAI client: the real client sends real
HTTP to loopback, and every reply is `harness.ANSWER`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.compat.apps.harness import ANSWER

MODEL = "fake-gpt"
USAGE = {"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51}


def _embedding(text: str, dims: int = 16) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255.0 for b in digest[:dims]]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        path = self.path.split("?")[0]
        if path.endswith("/embeddings"):
            inputs = body.get("input")
            items = inputs if isinstance(inputs, list) else [inputs]
            self._json(
                {
                    "object": "list",
                    "model": body.get("model", MODEL),
                    "data": [
                        {"object": "embedding", "index": i, "embedding": _embedding(str(t))}
                        for i, t in enumerate(items)
                    ],
                    "usage": {"prompt_tokens": 8, "total_tokens": 8},
                }
            )
            return
        chat = path.endswith("/chat/completions")
        if body.get("stream"):
            self._stream(chat, body)
            return
        created = int(time.time())
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": ANSWER},
                "finish_reason": "stop",
            }
        else:
            choice = {"index": 0, "text": ANSWER, "finish_reason": "stop", "logprobs": None}
        self._json(
            {
                "id": "cmpl-fake",
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": MODEL,
                "choices": [choice],
                "usage": USAGE,
            }
        )

    def _json(self, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, chat: bool, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        words = ANSWER.split(" ")
        pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
        created = int(time.time())

        def send(doc: dict[str, Any] | str) -> None:
            line = f"data: {doc if isinstance(doc, str) else json.dumps(doc)}\n\n".encode()
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")

        for i, piece in enumerate(pieces):
            if chat:
                delta: dict[str, Any] = {"content": piece}
                if i == 0:
                    delta["role"] = "assistant"
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
            else:
                choice = {"index": 0, "text": piece, "finish_reason": None}
            send(
                {
                    "id": "cmpl-fake",
                    "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": created,
                    "model": MODEL,
                    "choices": [choice],
                }
            )
        last: dict[str, Any] = {
            "id": "cmpl-fake",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": MODEL,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]
            if chat
            else [{"index": 0, "text": "", "finish_reason": "stop"}],
        }
        if (body.get("stream_options") or {}).get("include_usage"):
            last["usage"] = USAGE
        send(last)
        send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


@contextlib.contextmanager
def serving() -> Iterator[str]:
    """A fake server on a free loopback port for the block; yields its base URL (…/v1)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
