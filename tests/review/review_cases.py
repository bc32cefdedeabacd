"""Review-queue lines for the review UI's tests: records judged by the offline judge (so the claim
split, verdicts and evidence quotes are a real judge's), queued with a `review` object as the judge
stage writes it (`ReviewLine`)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from monitor.contracts.model import Chunk, RagRecord
from monitor.contracts.results import ResultLine, ReviewLine, encode_result, result_line
from monitor.judge.lexical import LexicalJudge

OSLO = "4bf92f3577b34da6a3ce929d0e0e4736"
BERGEN = "00f067aa0ba902b7a3ce929d0e0e4736"
TROMSO = "1a2b3c4d5e6f77889900aabbccddeeff"
SIZE = (80, 24)  # the terminal an SSH session gives by default


async def screen(pilot: Pilot[None]) -> str:
    """The terminal's lines as the reviewer sees them (the compositor's output, styles dropped),
    once the keys pressed are handled."""
    await pilot.pause()
    return "\n".join(strip.text for strip in pilot.app.screen._compositor.render_strips())


def _record(trace_id: str, query: str, answer: str, chunks: list[Chunk]) -> RagRecord:
    return RagRecord(
        trace_id=trace_id, span_id="00f067aa0ba902b7", service="svc", query=query, query_type="lookup",
        chunks=chunks, answer=answer,
    )  # fmt: skip


RECORDS = [
    # two claims: the first quoted from c7, the second (400 staff) not in the context
    _record(
        OSLO,
        "When was the Oslo office opened?",
        "The Oslo office opened in 1999. It has 400 staff.",
        [
            Chunk("c7", "The Oslo office opened in 1999 after a long search. It has 40 staff.", 0.8),
            Chunk("c9", "Opening hours are 9 to 5.", 0.4),
        ],
    ),
    _record(
        BERGEN,
        "Who leads the Bergen office?",
        "Kari Nordmann leads the Bergen office.",
        [Chunk("b1", "Kari Nordmann leads the Bergen office since 2019.", 0.9)],
    ),
    _record(
        TROMSO,
        "Does the Tromsø office have parking?",
        "I don't know.",
        [Chunk("t1", "The Tromsø office is by the harbour.", 0.3)],
    ),
]
REVIEWS: list[dict[str, Any]] = [
    {"reasons": ["boundary", "uniform"], "uniform": True, "weight": 12.5, "queued_at": 1764600000.0},
    {"reasons": ["disagreement"], "queued_at": 1764600001.0},
    {"reasons": ["uniform"], "uniform": True, "weight": 12.5, "queued_at": 1764600002.0},
]


def long_record() -> RagRecord:
    """An answer the judge splits into twelve claims: more than 80x24 shows at once."""
    facts = " ".join(f"The office number {i} opened in {1990 + i}." for i in range(12))
    return _record("ab" * 16, "When did the offices open?", facts, [Chunk("c1", facts, 0.5)])


def many_chunks_record(trace_id: str, n: int = 23) -> RagRecord:
    """A record with `n` retrieved chunks (`k1`...), more than the ten number keys reach at once;
    the one-claim answer is quoted from chunk 12."""
    chunks = [
        Chunk(f"k{i}", f"Fact number {i} about the harbour office.", round(1 - i / 100, 2))
        for i in range(1, n + 1)
    ]
    return _record(trace_id, "What is fact twelve?", "Fact number 12 about the harbour office.", chunks)


def judged(records: list[RagRecord] = RECORDS) -> list[ResultLine]:
    """The results lines the judge stage writes for `records` (the offline judge's verdicts)."""
    judge = LexicalJudge()

    async def go() -> list[ResultLine]:
        return [
            result_line(r, sampling_weight=4.0, query_type_source="span", judgement=await judge.judge(r))
            for r in records
        ]

    return asyncio.run(go())


def queue_lines(reviews: list[dict[str, Any]] = REVIEWS) -> list[ReviewLine]:
    out = []
    for line, review in zip(judged(), reviews, strict=True):
        out.append(ReviewLine.model_validate({**line.model_dump(exclude_unset=True), "review": review}))
    return out


def write_queue(path: Path, *, bad: bool = False) -> Path:
    """The queue file; with `bad`, three unreadable lines among the good ones (not JSON, another
    `v`, no trace id)."""
    lines = [encode_result(q) for q in queue_lines()]
    if bad:
        lines.insert(1, b'{"not a queue line"\n')
        lines.insert(2, b'{"v": 2, "trace_id": "ffffffffffffffffffffffffffffffff"}\n')
        lines.append(b'{"v": 1, "query": "no trace id here"}\n')
    path.write_bytes(b"".join(lines))
    return path


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
