"""A local alert webhook for the demo: what a team's chat or paging hook would receive.

The sidecar's `alerts.webhook_url` points here, so the demo shows an alert leaving the product
over real HTTP (`monitor.outputs.alerts`) rather than a call inside the process. An asyncio server
on loopback with just enough HTTP/1.1 for a JSON POST (keep-alive, `Content-Length` bodies): the
demo extra has no web framework to spare, and this needs no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

_MAX_BODY = 1 << 20  # an alert is a few kilobytes


@dataclass(frozen=True, slots=True)
class ReceivedAlert:
    """One webhook notification (one alert transition), as it arrived."""

    at: float  # time.monotonic() on arrival
    status: str  # "firing" | "resolved"
    labels: dict[str, str]
    annotations: dict[str, str]
    wall: float = 0.0  # time.time() on arrival
    example_trace_ids: tuple[str, ...] = ()  # the payload's `examples`, worst first
    suspects: tuple[dict[str, Any], ...] = ()  # the payload's `attribution.suspects`
    starts_at: str = ""  # the payload's `startsAt`: one per alert episode, kept by its updates

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "?")

    def names_release(self, release: str) -> bool:
        return any(s.get("dimension") == "release" and s.get("value") == release for s in self.suspects)


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


@dataclass(slots=True)
class WebhookReceiver:
    """Accepts `POST {path}` with an alert JSON object; keeps every one it got, in order."""

    host: str = "127.0.0.1"
    path: str = "/alerts"
    received: list[ReceivedAlert] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def start(self) -> str:
        """Listen on a free loopback port; the URL to configure as `alerts.webhook_url`."""
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://{self.host}:{port}{self.path}"

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._writers):  # keep-alive connections would hold wait_closed
            writer.close()
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ValueError, asyncio.IncompleteReadError, ConnectionError):
            pass  # a malformed request or a dropped connection ends that connection only
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection should close."""
        line = await reader.readline()
        if not line:
            return False
        method, target, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = header.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "transfer-encoding" in headers:
            status = "411 Length Required"  # alert senders give a length; not worth parsing chunks
            keep = False
        else:
            length = int(headers.get("content-length", "0"))
            if length > _MAX_BODY:
                status, keep = "413 Content Too Large", False
            else:
                status = self._accept(method, target, await reader.readexactly(length))
                keep = headers.get("connection", "").lower() != "close"
        writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n".encode())
        await writer.drain()
        return keep

    def _accept(self, method: str, target: str, body: bytes) -> str:
        if method != "POST" or target != self.path:
            return "404 Not Found"
        try:
            alert = json.loads(body)
        except ValueError:
            return "400 Bad Request"
        if not isinstance(alert, dict) or not isinstance(alert.get("labels"), dict):
            return "400 Bad Request"
        annotations = alert.get("annotations")
        attribution = alert.get("attribution")
        suspects = _dicts(attribution.get("suspects")) if isinstance(attribution, dict) else []
        self.received.append(
            ReceivedAlert(
                time.monotonic(),
                str(alert.get("status", "")),
                {str(k): str(v) for k, v in alert["labels"].items()},
                {str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, dict) else {},
                time.time(),
                tuple(str(e.get("trace_id", "")) for e in _dicts(alert.get("examples"))),
                tuple(suspects),
                str(alert.get("startsAt", "")),
            )
        )
        return "200 OK"
