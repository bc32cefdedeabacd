"""What the golden tests share: the example RAG service as a real process, one per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import example_service


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    """The example RAG service's URL (no span exporter: tracing is off)."""
    with example_service() as (url, _):
        yield url
