"""The review tests' tmux pane fixture (`review_cases.Pane`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from review_cases import Pane


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    """A tmux server of the test's own with one 80x24 pane; killed after the test."""
    p = Pane(tmp_path / "tmux.sock")
    yield p
    p.close()
