"""The sidecar's HTTP endpoint: `/metrics` for Prometheus, `/healthz` and `/readyz` for probes,
and the routes a stage adds (`routes`: the golden replay trigger, `POST /golden/replay`).

A small HTTP/1.1 server with its own event loop in a daemon thread, so that neither a scrape nor a
probe waits on the sidecar's event loop, and a port open to a network holds under abuse: idle and
slow clients cost no thread and are dropped after `timeout_seconds`, requests run on a bounded
worker pool, connections are bounded (`MetricsServer`). `/metrics` is prometheus_client's own WSGI
app (gzip and OpenMetrics negotiation included). `/healthz` answers while the process runs
(liveness: a restart would not help a slow broker) unless a `liveness` callback says a stage has
been stalled long enough that one might. `/readyz` asks a `readiness` callback, which
runs on a worker thread: it must be cheap and only read plain attributes that the stages update. A
route gets a `Request` (headers with lower-case names, a body of at most 64 KiB) on a worker thread
and returns a JSON `Response`; there is no access log, so nothing a client sends (an Authorization
header) is ever written.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import json
import logging
import resource
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote

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


MAX_HEAD = 16 * 1024  # request line and headers
_REASONS = {
    "timeout": "did not send a whole request in time (slow or idle client)",
    "evicted": "oldest waiting connection closed to make room (connection limit)",
    "head_too_large": f"request line and headers over {MAX_HEAD} bytes",
    "bad_request": "not an HTTP/1.x request",
}


class _Conn:
    """One client connection: `reading` while the server waits for its request (evictable)."""

    __slots__ = ("reading", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.reading = True


class MetricsServer:
    """`/metrics` (`registry`), `/healthz`, `/readyz` and `routes` on `host:port` (0: any free port).

    An asyncio loop of its own, in a daemon thread, reads requests: an idle or slow connection costs
    a socket and a coroutine, never a thread, and one that has not sent its whole request (headers
    and body) within `timeout_seconds` is dropped (slowloris). Complete requests run on at most
    `workers` threads. Past `max_connections` (capped below the process's file-descriptor limit)
    the connection that has waited longest for its request is closed, so a flood of idle sockets
    can delay a scrape by at most one accept, never lock it out. Each drop reason is logged once and
    counted in `dropped`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        readiness: Callable[[], Readiness] = always_ready,
        routes: Mapping[str, Route] | None = None,
        liveness: Callable[[], Readiness] = always_ready,
        *,
        timeout_seconds: float = 5.0,
        workers: int = 4,
        max_connections: int = 4096,
    ) -> None:
        self._metrics = make_wsgi_app(registry)
        self._readiness = readiness
        self._liveness = liveness
        self._routes = dict(routes or {})
        self._host = host
        self._port = port
        self._timeout = timeout_seconds
        self._workers = workers
        self._max_connections = _fd_capped(max_connections)
        self._conns: dict[int, _Conn] = {}  # insertion order: oldest first
        self._next_id = 0
        self._lock = threading.Lock()
        self.dropped: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def start(self) -> int:
        """Serve from a daemon thread; returns the bound port. Raises OSError if it is taken."""
        loop = asyncio.new_event_loop()
        started: concurrent.futures.Future[int] = concurrent.futures.Future()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                server = loop.run_until_complete(
                    asyncio.start_server(
                        self._serve, self._host, self._port, limit=MAX_HEAD, backlog=1024, reuse_address=True
                    )
                )
            except BaseException as exc:  # handed to start()'s caller
                started.set_exception(exc)
                loop.close()
                return
            self._server = server
            started.set_result(server.sockets[0].getsockname()[1])
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._loop = loop
        self._pool = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="ragmon-http")
        self._thread = threading.Thread(target=serve, name="ragmon-http", daemon=True)
        self._thread.start()
        try:
            port = started.result(timeout=10)
        except BaseException:
            self._thread.join(timeout=5)
            self._pool.shutdown(wait=False)
            self._thread = self._loop = self._pool = None
            raise
        extra = "".join(f", {path}" for path in self._routes)
        log.info("serving /metrics, /healthz, /readyz%s on http://%s:%d", extra, self._host, port)
        return port

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=5)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._loop = self._thread = self._pool = self._server = None

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns.values()):
            conn.writer.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def _drop(self, reason: str) -> None:
        with self._lock:
            first = reason not in self.dropped
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
        if first:
            log.warning("metrics endpoint: dropped a connection: %s", _REASONS[reason])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cid = self._next_id
        self._next_id += 1
        conn = _Conn(writer)
        if len(self._conns) >= self._max_connections:
            oldest = next((k for k, c in self._conns.items() if c.reading), None)
            if oldest is not None:
                self._conns.pop(oldest).writer.close()
                self._drop("evicted")
        self._conns[cid] = conn
        try:
            keep = True
            while keep:
                conn.reading = True
                try:
                    request = await asyncio.wait_for(self._read(reader, writer), self._timeout)
                except TimeoutError:
                    self._drop("timeout")
                    return
                if request is None:  # the client left, or sent something that is not HTTP
                    return
                conn.reading = False
                environ, keep = request
                loop = asyncio.get_running_loop()
                status, headers, body = await loop.run_in_executor(self._pool, self._call, environ)
                if not keep:
                    headers.append(("Connection", "close"))
                head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
                writer.write(head.encode("latin-1"))
                if environ["REQUEST_METHOD"] != "HEAD":
                    writer.write(body)
                try:
                    await asyncio.wait_for(writer.drain(), self._timeout)
                except TimeoutError:  # a client that does not read its answer
                    self._drop("timeout")
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:  # stop(): a connection's own task, ended quietly
            return
        finally:
            self._conns.pop(cid, None)
            writer.close()

    async def _read(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[dict[str, Any], bool] | None:
        """The next request as a WSGI environ and whether the connection stays open after it; None
        when the client closed (or sent garbage: answered 400/431 first)."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        except asyncio.LimitOverrunError:
            self._drop("head_too_large")
            await self._refuse(writer, "431 Request Header Fields Too Large")
            return None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._drop("bad_request")
            await self._refuse(writer, "400 Bad Request")
            return None
        method, target, version = parts
        path, _, query = target.partition("?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "PATH_INFO": unquote(path, "iso-8859-1"),
            "QUERY_STRING": query,
            "SERVER_PROTOCOL": version,
            "SERVER_NAME": self._host,
            "SERVER_PORT": str(self._port),
            "SCRIPT_NAME": "",
            "REMOTE_ADDR": str((writer.get_extra_info("peername") or ("?",))[0]),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                self._drop("bad_request")
                await self._refuse(writer, "400 Bad Request")
                return None
            headers[name.strip().lower()] = value.strip()
            key = name.strip().upper().replace("-", "_")
            if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                environ[key] = value.strip()
            else:
                environ[f"HTTP_{key}"] = value.strip()
        if "transfer-encoding" in headers:  # chunked bodies: no route takes one
            await self._refuse(writer, "411 Length Required")
            return None
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError:
            length = -1
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        body = b""
        if 0 < length <= MAX_BODY:
            body = await reader.readexactly(length)
        elif length != 0:  # not read: the route answers 413 and the connection closes
            keep = False
        environ["wsgi.input"] = io.BytesIO(body)
        return environ, keep

    async def _refuse(self, writer: asyncio.StreamWriter, status: str) -> None:
        writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
        with contextlib.suppress(TimeoutError, ConnectionError):
            await asyncio.wait_for(writer.drain(), 1.0)

    def _call(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        """The WSGI app on a worker thread: status, headers (with Content-Length) and body."""
        got: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            got[:] = [status, list(headers)]
            return lambda data: None

        try:
            chunks = self._app(environ, cast("StartResponse", start_response))
            body = b"".join(chunks)
        except Exception:  # a bug must not take the endpoint down
            log.exception("%s %s failed", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            return "500 Internal Server Error", [("Content-Length", "0")], b""
        status, headers = got
        if not any(k.lower() == "content-length" for k, _ in headers):
            headers.append(("Content-Length", str(len(body))))
        return status, headers, body

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


def _fd_capped(wanted: int) -> int:
    """At most half the process's open-file limit: the rest stays for Kafka, files and the judge."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(16, min(wanted, soft // 2))
