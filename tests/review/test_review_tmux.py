"""`rag-monitor review` in a real terminal: a tmux pane of 80x24 (what an SSH session gives), keys
sent with `tmux send-keys`, the screen read with `tmux capture-pane -p`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from review_cases import OSLO, write_queue


class Pane:
    """One tmux server of its own (a socket in the test's directory) with one 80x24 pane."""

    def __init__(self, socket: Path) -> None:
        path = shutil.which("tmux")
        if path is None:
            pytest.fail("tmux not found: `make debs` installs it (Debian tmux)")
        self.base = [path, "-S", str(socket)]

    def tmux(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], check=True, capture_output=True, text=True).stdout

    def start(self, command: list[str], cwd: Path) -> None:
        # remain-on-exit: the pane (and what the command printed last) stays after it exits
        self.tmux(
            "new-session", "-d", "-x", "80", "-y", "24", "-s", "review", "-c", str(cwd),
            "-e", "TERM=xterm-256color", *command, ";", "set-option", "-t", "review", "remain-on-exit", "on",
        )  # fmt: skip

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "review")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "review", *keys)

    def wait_for(self, text: str, within: float = 30.0) -> str:
        deadline = time.monotonic() + within
        while True:
            shown = self.screen()
            if text in shown:
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not on the screen within {within}s:\n{shown}")
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True)


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    p = Pane(tmp_path / "tmux.sock")
    yield p
    p.close()


def test_review_in_an_80x24_tmux_pane(pane: Pane, tmp_path: Path) -> None:
    queue = write_queue(tmp_path / "queue.jsonl", bad=True)
    labels = tmp_path / "labels.jsonl"
    command = [sys.executable, "-m", "monitor", "review", "--queue", str(queue), "--labels", str(labels)]
    pane.start(command, tmp_path)
    shown = pane.wait_for("0 of 3 labelled")
    lines = shown.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert "When was the Oslo office opened?" in shown
    assert "▶1. The Oslo office opened in 1999." in shown
    assert "The Oslo office opened in 1999 after a long search.‹1›" in shown
    assert "bad queue lines: 3" in shown
    assert "g golden set  ⏎ save  x skip  u undo  q quit" in shown  # the key help, whole

    pane.keys("s", "n", "a", "e")
    pane.wait_for("note: Enter keeps it")
    pane.keys("-l", "staff count is 40")
    pane.keys("Enter")
    pane.wait_for("note: staff count is 40")
    pane.keys("Enter")
    shown = pane.wait_for("1 of 3 labelled")
    assert "Who leads the Bergen office?" in shown
    pane.keys("q")
    shown = pane.wait_for("1 of 3 queued records labelled in")

    (line,) = [json.loads(x) for x in labels.read_text().splitlines()]
    assert line["trace_id"] == OSLO
    assert line["labels"]["faithful"] == [True, False]
    assert line["note"] == "staff count is 40"
