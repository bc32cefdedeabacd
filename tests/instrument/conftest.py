"""Fixtures of the `monitor.instrument` tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.instrument import configure, shutdown


@pytest.fixture
def mem() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    configure("svc-test", exporter=exporter, batch=False)
    yield exporter
    shutdown()
