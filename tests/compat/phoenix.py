"""A real Arize Phoenix server for the tests: `phoenix serve` from its own virtualenv
(`.venv-compat/phoenix`, `make compat-venvs`; its pins are not the sidecar's), on loopback, free
ports for HTTP and OTLP/gRPC, a SQLite working directory of its own; and headless Chromium reading
one of its pages."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import wait_healthy

from monitor.demo.broker import free_port

REPO = Path(__file__).resolve().parent.parent.parent
PHOENIX = REPO / ".venv-compat" / "phoenix" / "bin" / "phoenix"


@dataclass(frozen=True)
class Phoenix:
    url: str  # the UI, the REST API and OTLP/HTTP (/v1/traces)
    grpc_url: str  # OTLP/gRPC

    def get(self, path: str, **params: Any) -> Any:
        response = httpx.get(f"{self.url}{path}", params=params, timeout=10)
        response.raise_for_status()
        return response.json()

    def spans(self, trace_id: str) -> list[dict[str, Any]]:
        return list(self.get("/v1/projects/default/spans", trace_id=trace_id, limit=100)["data"])

    def annotations(self, span_id: str) -> list[dict[str, Any]]:
        return list(self.get("/v1/projects/default/span_annotations", span_ids=span_id, limit=100)["data"])


@contextmanager
def phoenix_server(workdir: Path) -> Iterator[Phoenix]:
    """Up once /healthz answers (migrations take a few seconds); its log in `workdir/phoenix.log`."""
    if not PHOENIX.exists():
        pytest.fail(f"{PHOENIX} missing: `make compat-venvs` (tests/compat/requirements-phoenix.txt)")
    port, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    with open(workdir / "phoenix.log", "wb") as log:
        proc = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    phoenix = Phoenix(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{grpc_port}")
    try:
        log_text = (workdir / "phoenix.log").read_text
        wait_healthy(phoenix.url, proc, "phoenix", 120, lambda: log_text(errors="replace"))
        yield phoenix
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def chromium() -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.fail("chromium missing: `make debs` installs it")
    return binary


def browse(url: str, screenshot: Path | None = None, budget_ms: int = 20000) -> str:
    """The visible text of `url` once its scripts ran for `budget_ms` of virtual time (headless
    Chromium's DOM dump), and a screenshot if asked."""
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--virtual-time-budget={budget_ms}", "--window-size=1600,1000"]  # fmt: skip
    run = {"capture_output": True, "timeout": 120, "check": True}
    dom = subprocess.run([*base, "--dump-dom", url], **run).stdout  # type: ignore[call-overload]
    if screenshot is not None:
        subprocess.run([*base, f"--screenshot={screenshot}", url], **run)  # type: ignore[call-overload]
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", dom.decode(errors="replace"), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())
