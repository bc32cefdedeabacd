"""The sidecar's HTTP endpoint: `/metrics` for Prometheus, `/healthz` and `/readyz` for probes,
and the routes a stage adds (`routes`: the golden replay trigger, `POST /golden/replay`).

A small threaded WSGI server in its own daemon thread, so that neither a scrape nor a probe waits on
the event loop. `/metrics` is prometheus_client's own WSGI app (gzip and OpenMetrics negotiation
included). `/healthz` answers while the process runs (liveness: a restart would not help a slow
broker) unless a `liveness` callback says a stage has been stalled long enough that one might.
`/readyz` asks a `readiness` callback, which runs on the server's thread: it must be cheap
and only read plain attributes that the stages update. A route gets a `Request` (headers with
lower-case names, a body of at most 64 KiB) on the server's thread and returns a JSON `Response`;
there is no access log, so nothing a client sends (an Authorization header) is ever written.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
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


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    client: str  # the peer's address, for logs


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: dict[str, object]
    headers: tuple[tuple[str, str], ...] = ()


Route = Callable[[Request], Response]
MAX_BODY = 64 * 1024


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
    """`/metrics` (`registry`), `/healthz`, `/readyz` and `routes` on `host:port` (0: any free port)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        readiness: Callable[[], Readiness] = always_ready,
        routes: Mapping[str, Route] | None = None,
        liveness: Callable[[], Readiness] = always_ready,
    ) -> None:
        self._metrics = make_wsgi_app(registry)
        self._readiness = readiness
        self._liveness = liveness
        self._routes = dict(routes or {})
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
        extra = "".join(f", {path}" for path in self._routes)
        log.info("serving /metrics, /healthz, /readyz%s on http://%s:%d", extra, self._host, port)
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
            live = self._liveness()
            if live.ready:
                return _reply(start_response, "200 OK", "text/plain; charset=utf-8", b"ok\n")
            return _reply(start_response, "503 Service Unavailable", "application/json", _body(live))
        if path == "/readyz":
            state = self._readiness()
            status = "200 OK" if state.ready else "503 Service Unavailable"
            return _reply(start_response, status, "application/json", _body(state))
        route = self._routes.get(path)
        if route is not None:
            return self._route(route, environ, start_response)
        return _reply(start_response, "404 Not Found", "text/plain; charset=utf-8", b"not found\n")

    def _route(self, route: Route, environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            return _json(start_response, Response(413, {"error": f"the body must be 0 to {MAX_BODY} bytes"}))
        headers = {
            key[5:].replace("_", "-").lower(): str(value)
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        if "CONTENT_TYPE" in environ:
            headers["content-type"] = str(environ["CONTENT_TYPE"])
        body = environ["wsgi.input"].read(length) if length else b""
        request = Request(
            environ.get("REQUEST_METHOD", "GET"),
            environ.get("PATH_INFO", ""),
            headers,
            body,
            str(environ.get("REMOTE_ADDR", "?")),
        )
        try:
            response = route(request)
        except Exception:  # a bug in a route must not take the metrics server down
            log.exception("%s %s failed", request.method, request.path)
            response = Response(500, {"error": "internal error"})
        return _json(start_response, response)


def _json(start_response: StartResponse, response: Response) -> list[bytes]:
    body = json.dumps(response.body).encode() + b"\n"
    status = f"{response.status} {HTTPStatus(response.status).phrase}"
    start_response(
        status,
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            *response.headers,
        ],
    )
    return [body]


def _body(state: Readiness) -> bytes:
    return json.dumps(state.checks).encode()


def _reply(start_response: StartResponse, status: str, content_type: str, body: bytes) -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]
