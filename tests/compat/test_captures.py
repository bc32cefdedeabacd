"""Each compat app's captured spans (tests/compat/captures, made by the real libraries in
`make test-compat`) read right by the decoder and assembler: every request a record with the
query, answer and chunks the app used, nothing else a record. Runs in `make test`, on the
compiled and the pure-Python paths."""

from __future__ import annotations

import pytest

from tests.compat.readback import LIMITS, capture_names, mismatches, read_capture_file


@pytest.mark.parametrize("name", capture_names())
def test_a_captured_app_reads_right(name: str) -> None:
    expected, reading = read_capture_file(name)
    records = [r.to_json_dict() for r in reading.records]
    assert mismatches(name, expected, records) == [], (name, dict(reading.rejects))
    # nothing that looked like a request was lost quietly: every trace is a record, harmless, or
    # (where the spans cannot make one) counted as the request it was
    unreadable = sum(not lim.record for (app, _), lim in LIMITS.items() if app == name)
    assert reading.rejects["missing_answer"] + reading.rejects["missing_query"] == unreadable
    assert set(reading.rejects) <= {"not_rag", "missing_answer", "missing_query"}, dict(reading.rejects)


def test_there_are_captures_of_every_library() -> None:
    names = capture_names()
    for lib in ("llamaindex", "langchain", "haystack", "dspy"):
        assert any(n.startswith(lib) for n in names), (lib, names)


def test_the_compatibility_table_in_the_docs_is_the_one_the_captures_give() -> None:
    from tests.compat.table import committed, table

    assert committed() == table(), "run: python -m tests.compat.table --write"
