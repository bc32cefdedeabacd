"""Golden replays out of schedule: the sidecar's `POST /golden/replay`, and the client CI calls.

`GoldenRunner` runs the sidecar's replays one at a time, scheduled or triggered by a change event,
on the member that owns replays (the owner of partition 0 of the samples topic: `is_leader`);
a triggered run is recorded in the report (`report_dir`) and in
`ragmon_golden_last_change_timestamp_seconds{kind}`. `TriggerEndpoint` is the HTTP side, served by
the metrics server (`monitor.outputs.http`) on the metrics port:

- ``Authorization: Bearer <token>`` (`golden.trigger_token_file` or `RAGMON_GOLDEN__TRIGGER_TOKEN`),
  compared in constant time (`hmac.compare_digest`); 401 without it, 403 with another token. The
  token is never logged: log lines carry the client address, the change and the outcome only.
- body ``{"kind": "deploy|reindex|prompt|model|other", "ref": "v1.2.3"}``: 400 otherwise.
- 202 accepted (the replay runs in the background); 409 when this member does not run golden
  replays (another member owns partition 0; it cannot tell which, Kafka tells each member only
  its own partitions: the client tries the next address); 429 while a replay, scheduled or
  triggered, is running (``Retry-After``); 503 while the judge stage is not running.

Not forwarded to the right member: a member knows only that it is not the one. `trigger_replay`
(the `rag-monitor golden trigger` command) posts to every address a sidecar name resolves to (a
headless Service gives one per pod) until one accepts.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx

from monitor.golden.change import Change, parse_change
from monitor.golden.report import ReplayReport
from monitor.outputs.http import Request, Response
from monitor.plumbing.errors import plural
from monitor.plumbing.files import write_atomic

__all__ = [
    "MIN_TOKEN_BYTES",
    "PATH",
    "GoldenRunner",
    "TriggerEndpoint",
    "TriggerOutcome",
    "load_token",
    "trigger_replay",
]

log = logging.getLogger(__name__)

PATH = "/golden/replay"
MIN_TOKEN_BYTES = 16
_MAX_BODY = 4096

TriggerOutcome = Literal["accepted", "busy", "not_leader", "not_running"]


def load_token(file: Path | None, value: str | None) -> bytes | None:
    """The trigger token from a file (mounted Secret; surrounding whitespace stripped) or a value
    (the environment); None when neither is set (the endpoint is then not served). ValueError when
    both are set, the file cannot be read, or the token is shorter than 16 bytes."""
    if file is not None and value:
        raise ValueError("golden.trigger_token_file and golden.trigger_token are both set: choose one")
    if file is not None:
        try:
            token = file.read_bytes().strip()
        except OSError as exc:
            raise ValueError(f"cannot read golden.trigger_token_file {file}: {exc.strerror or exc}") from None
    elif value:
        token = value.strip().encode()
    else:
        return None
    if len(token) < MIN_TOKEN_BYTES:
        raise ValueError(f"the golden trigger token is shorter than {MIN_TOKEN_BYTES} bytes")
    return token


class GoldenRunner:
    """One golden replay at a time on this member, scheduled or triggered.

    `replay(change)` runs one replay (None: it failed and said why in the log); `is_leader` says
    whether this member runs replays (read from the HTTP thread: plain attribute reads only).
    `attach` binds the event loop replays run on; `trigger` may be called from any thread.
    """

    def __init__(
        self,
        replay: Callable[[Change | None], Awaitable[ReplayReport | None]],
        is_leader: Callable[[], bool],
        *,
        report_dir: Path | None = None,
        member: str | None = None,
    ) -> None:
        self._replay = replay
        self._is_leader = is_leader
        self.report_dir = report_dir
        self.member = member or socket.gethostname()
        self._lock = threading.Lock()
        self._running: str | None = None  # "schedule" or the change being replayed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.last_report: ReplayReport | None = None

    @property
    def running(self) -> str | None:
        return self._running

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    async def aclose(self) -> None:
        """Stop taking triggers; cancel a triggered replay under way (the next start runs anew)."""
        self._loop = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _claim(self, what: str) -> bool:
        with self._lock:
            if self._running is not None:
                return False
            self._running = what
            return True

    def _release(self) -> None:
        with self._lock:
            self._running = None

    async def run_scheduled(self) -> ReplayReport | None:
        """The schedule's replay, when this member runs replays and none is under way."""
        if not self._is_leader():
            return None
        if not self._claim("schedule"):
            log.info("golden replay: the scheduled run is skipped, %s is still running", self._running)
            return None
        try:
            return await self._run(None)
        finally:
            self._release()

    def trigger(self, change: Change) -> TriggerOutcome:
        """Start a replay for `change` in the background (thread-safe)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return "not_running"
        if not self._is_leader():
            return "not_leader"
        if not self._claim(f"the replay for {change}"):
            return "busy"
        try:
            loop.call_soon_threadsafe(self._spawn, change)
        except RuntimeError:  # the loop closed meanwhile
            self._release()
            return "not_running"
        return "accepted"

    def _spawn(self, change: Change) -> None:
        task = asyncio.get_running_loop().create_task(self._triggered(change), name="ragmon-golden-trigger")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _triggered(self, change: Change) -> None:
        try:
            await self._run(change)
        finally:
            self._release()

    async def _run(self, change: Change | None) -> ReplayReport | None:
        why = f"triggered by {change.kind} change {change.ref!r}" if change else "scheduled"
        log.info("golden replay (%s) started", why)
        report = await self._replay(change)
        if report is None:
            return None
        self.last_report = report
        where = ""
        if self.report_dir is not None:
            try:
                path = await asyncio.to_thread(_write_report, self.report_dir, report)
                where = f"; report {path}"
            except OSError as exc:
                log.error("golden replay: cannot write the report to %s: %s", self.report_dir, exc)
        log.info(
            "golden replay (%s): exit code %d, %s%s",
            why,
            report.exit_code,
            plural(len(report.regressions), "regression"),
            where,
        )
        return report


def _write_report(directory: Path, report: ReplayReport) -> Path:
    """`replay-<UTC time>[-<kind>].json`, written whole or not at all (temporary file, rename)."""
    stamp = datetime.fromtimestamp(report.started_at, UTC).strftime("%Y%m%dT%H%M%S")
    name = f"replay-{stamp}{'-' + report.change.kind if report.change else ''}.json"
    write_atomic(directory / name, json.dumps(report.to_json_dict(), indent=2) + "\n")
    return directory / name


class TriggerEndpoint:
    """`POST /golden/replay` (see the module docstring for the answers)."""

    def __init__(
        self, runner: GoldenRunner, token: bytes, *, samples_topic: str = "rag-monitor-samples"
    ) -> None:
        if len(token) < MIN_TOKEN_BYTES:
            raise ValueError(f"the golden trigger token is shorter than {MIN_TOKEN_BYTES} bytes")
        self._runner = runner
        self._token = token
        self._leader_rule = f"the owner of partition 0 of {samples_topic} runs golden replays"

    def handle(self, request: Request) -> Response:
        if request.method != "POST":
            return Response(405, {"error": "use POST"}, (("Allow", "POST"),))
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            log.warning("golden trigger from %s refused: no bearer token", request.client)
            return Response(
                401, {"error": "Authorization: Bearer <token> required"}, (("WWW-Authenticate", "Bearer"),)
            )
        if not hmac.compare_digest(presented.strip().encode(), self._token):
            log.warning("golden trigger from %s refused: wrong token", request.client)
            return Response(403, {"error": "wrong token"})
        try:
            body = json.loads(request.body or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            kind, ref = body.get("kind"), body.get("ref", "")
            if not isinstance(kind, str) or not isinstance(ref, str):
                raise ValueError(
                    'the body must be {"kind": "deploy|reindex|prompt|model|other", "ref": "..."}'
                )
            change = parse_change(kind=kind, ref=ref)
        except ValueError as exc:  # JSONDecodeError included
            return Response(400, {"error": str(exc)})
        outcome = self._runner.trigger(change)
        log.info(
            "golden trigger from %s for %s change %r: %s", request.client, change.kind, change.ref, outcome
        )
        member = self._runner.member
        if outcome == "accepted":
            return Response(202, {"status": "accepted", "member": member, "change": change.to_json_dict()})
        if outcome == "not_leader":
            return Response(
                409,
                {
                    "error": f"this member ({member}) does not run golden replays: {self._leader_rule}; "
                    "send the trigger to the others (rag-monitor golden trigger tries every address)",
                    "member": member,
                },
            )
        if outcome == "busy":
            return Response(
                429,
                {"error": f"a golden replay is already running ({self._runner.running})", "member": member},
                (("Retry-After", "30"),),
            )
        return Response(503, {"error": "the judge stage is not running", "member": member})


# -- the client -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TriggerResult:
    exit_code: int  # 0 accepted, 1 not accepted (busy, no member runs replays, unreachable), 2 refused
    message: str


def _addresses(url: str) -> list[tuple[str, str]]:
    """(URL to post to, Host header) for every address the URL's host resolves to, or the URL
    itself when it cannot be resolved (the request then says why)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path.rstrip("/") + PATH if not parts.path.endswith(PATH) else parts.path
    base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    if parts.scheme == "https":  # certificates name the host, not its addresses
        return [(base, parts.netloc)]
    try:
        ipaddress.ip_address(host)
        return [(base, parts.netloc)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return [(base, parts.netloc)]
    out: list[tuple[str, str]] = []
    for info in infos:
        addr = str(info[4][0])
        netloc = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
        target = (urlunsplit((parts.scheme, netloc, path, "", "")), parts.netloc)
        if target not in out:
            out.append(target)
    return out


def trigger_replay(
    sidecars: Sequence[str], change: Change, token: str, *, timeout: float = 10.0
) -> TriggerResult:
    """POST the change to each sidecar address until one accepts (202). A 409 (not the member
    that runs replays) or a refused connection moves on to the next; 429, 401/403 and 400 stop."""
    body = {"kind": change.kind, "ref": change.ref}
    notes: list[str] = []
    with httpx.Client(timeout=timeout) as client:
        for sidecar in sidecars:
            for url, host in _addresses(sidecar):
                headers = {"Authorization": f"Bearer {token}", "Host": host}
                try:
                    r = client.post(url, json=body, headers=headers)
                except httpx.HTTPError as exc:
                    notes.append(f"{url}: {exc.__class__.__name__}")
                    continue
                detail = _detail(r)
                if r.status_code == 202:
                    return TriggerResult(0, f"accepted by {detail.get('member', url)}: {change}")
                if r.status_code == 409:
                    notes.append(f"{url}: {detail.get('error', 'not the replay member')}")
                    continue
                if r.status_code == 429:
                    return TriggerResult(1, f"{url}: busy: {detail.get('error', '')}")
                if r.status_code in (400, 401, 403):
                    return TriggerResult(
                        2, f"{url}: HTTP {r.status_code}: {detail.get('error', r.text[:200])}"
                    )
                notes.append(f"{url}: HTTP {r.status_code}: {detail.get('error', r.text[:200])}")
    return TriggerResult(1, "no sidecar accepted the trigger:\n  " + "\n  ".join(notes or ["no address"]))


def _detail(r: httpx.Response) -> dict[str, Any]:
    try:
        data = r.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
