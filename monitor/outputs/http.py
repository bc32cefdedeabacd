"""The sidecar's HTTP endpoint: `/metrics` for Prometheus, `/healthz` and `/readyz` for probes.

A small threaded WSGI server in its own daemon thread, so that neither a scrape nor a probe waits on
the event loop. `/metrics` is prometheus_client's own WSGI app (gzip and OpenMetrics negotiation
included). `/healthz` answers while the process runs (liveness: a restart would not help a slow
broker). `/readyz` asks a `readiness` callback, which runs on the server's thread: it must be cheap
and only read plain attributes that the stages update.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Readiness:
    """`/readyz`'s answer: 200 when `ready`, else 503; the body is `checks` as JSON, one short
    human phrase per part (e.g. {"ingest": "3 partitions assigned", "broker": "unreachable for 12s"})."""

    ready: bool
    checks: dict[str, str] = field(default_factory=dict)


def always_ready() -> Readiness:
    return Readiness(True)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck client never holds up shutdown

    def __init__(self, host: str, port: int) -> None:
        # The family of the address asked for, so that "::" or an IPv6-only name works as well.
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        super().__init__((host, port), _QuietHandler)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log: probes and scrapes come every few seconds."""


class MetricsServer:
    """`/metrics` (`registry`), `/healthz` and `/readyz` on `host:port` (0: any free port)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        readiness: Callable[[], Readiness] = always_ready,
    ) -> None:
        self._metrics = make_wsgi_app(registry)
        self._readiness = readiness
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Serve from a daemon thread; returns the bound port. Raises OSError if it is taken."""
        server = _Server(self._host, self._port)
        server.set_app(self._app)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="ragmon-http", daemon=True)
        self._thread.start()
        port: int = server.server_port
        log.info("serving /metrics, /healthz and /readyz on http://%s:%d", self._host, port)
        return port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            body: Iterable[bytes] = self._metrics(environ, start_response)
            return body
        if path == "/healthz":
            return _reply(start_response, "200 OK", "text/plain; charset=utf-8", b"ok\n")
        if path == "/readyz":
            state = self._readiness()
            status = "200 OK" if state.ready else "503 Service Unavailable"
            return _reply(start_response, status, "application/json", json.dumps(state.checks).encode())
        return _reply(start_response, "404 Not Found", "text/plain; charset=utf-8", b"not found\n")


def _reply(start_response: StartResponse, status: str, content_type: str, body: bytes) -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]
