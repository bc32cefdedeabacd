"""`compare --prometheus` against a Prometheus that answers badly (issue 38 item 8): one deadline
for the whole command, however slowly the server sends (a byte every 2 s was still being read at
50 s: the timeout was per read), a cap on the body, and every bad shape (a JSON list, a sample
with a short `value`, not JSON, too large) exit 2 with a one-line message, never a traceback.
Each against a real local HTTP server."""

from __future__ import annotations

import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 3.0  # `--timeout`: the command's deadline here


def _response(body: bytes, status: str = "200 OK") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body


SHAPES: dict[str, bytes] = {
    "a JSON list": _response(b"[]"),
    "a short value": _response(
        b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1]}]}}'
    ),
    "a value not a number": _response(
        b'{"status": "success", "data": {"resultType": "vector",'
        b' "result": [{"metric": {"release": "v1"}, "value": [1, "lots"]}]}}'
    ),
    "a data list": _response(b'{"status": "success", "data": []}'),
    "an error string list": _response(b'{"status": "error", "error": ["x"]}', "400 Bad Request"),
    "not JSON": _response(b"<html>502 Bad Gateway</html>", "502 Bad Gateway"),
}


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def prometheus() -> Iterator[tuple[str, dict[str, str]]]:
    """A local server answering every request as `mode["how"]` says: a shape of `SHAPES`,
    `trickle-head` / `trickle-body` (a byte every 2 s) or `endless` (1 MiB writes without end)."""
    mode = {"how": ""}

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # the request's head
            how = mode["how"]
            try:
                if how in SHAPES:
                    self.wfile.write(SHAPES[how])
                elif how.startswith("trickle"):
                    full = _response(b'{"status": "success", "data": {"resultType": "vector", "result": []}}')
                    at = 0 if how == "trickle-head" else full.index(b"\r\n\r\n") + 4
                    self.wfile.write(full[:at])
                    for byte in full[at:]:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(2.0)
                elif how == "endless":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
                    block = b" " * (1 << 20)
                    while True:
                        self.wfile.write(block)
            except OSError:
                pass  # the client went: what the deadline and the cap are for

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", mode
    server.shutdown()
    server.server_close()


def compare(url: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """`rag-monitor compare --prometheus` run to its end: what it said, and how long the command
    ran after its start-up (the interpreter's imports are not the deadline's)."""
    code = (
        "import sys, time; from monitor.cli import app; t = time.monotonic()\n"
        "try:\n    app(sys.argv[1:])\n"
        "finally:\n    print(f'ran {time.monotonic() - t:.2f}', file=sys.stderr)\n"
    )
    args = ["compare", "--prometheus", url, "--range", "1h", "--timeout", str(TIMEOUT)]
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    ran = float(done.stderr.rsplit("ran ", 1)[-1])
    return done, ran


def said(done: subprocess.CompletedProcess[str]) -> str:
    """What the command said besides its run time: one line, no traceback."""
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("ran ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.parametrize("how", ["trickle-head", "trickle-body"])
def test_a_server_sending_a_byte_every_2s_ends_the_command_at_its_deadline(
    prometheus: tuple[str, dict[str, str]], how: str
) -> None:
    url, mode = prometheus
    mode["how"] = how
    done, ran = compare(url)
    assert done.returncode == 2
    assert said(done) == f"error: Prometheus did not answer within {TIMEOUT:g}s"
    assert ran < TIMEOUT + 3.0  # the process's own start included; before: still reading at 50 s


def test_an_endless_body_is_cut_at_the_cap(prometheus: tuple[str, dict[str, str]]) -> None:
    url, mode = prometheus
    mode["how"] = "endless"
    done, _ = compare(url)
    assert done.returncode == 2
    assert said(done) == f"error: Prometheus answered more than {32 * 1024 * 1024} bytes: not read"


@pytest.mark.parametrize("shape", SHAPES)
def test_every_bad_shape_is_exit_2_with_a_line(prometheus: tuple[str, dict[str, str]], shape: str) -> None:
    url, mode = prometheus
    mode["how"] = shape
    done, _ = compare(url)
    assert done.returncode == 2, done.stderr  # before: a traceback and exit 1 for the first three
    assert said(done).startswith(("error: Prometheus", "error: expected an instant vector"))
