"""`rag-monitor review` in a real terminal: a tmux pane of 80x24 (what an SSH session gives), keys
sent with `tmux send-keys`, the screen read with `tmux capture-pane -p`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from review_cases import OSLO, Pane, write_queue


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
    # the key help, whole, with the chunks the number keys are on
    assert "1-0: chunks 1-2  ] [ next/prev ten  g golden set  x skip  u undo  q quit" in shown

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
