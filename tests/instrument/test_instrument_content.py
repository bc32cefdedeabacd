"""`monitor.instrument`'s content controls: truncation marks and bounds, the default redactor, the
capture switches, limits and a custom redactor, JSON-looking text kept as text, the extractors."""

from __future__ import annotations

from instrument_cases import by_name, handle, records
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.instrument import (
    ContentPolicy,
    configure,
    default_document,
    default_redactor,
    luhn_valid,
    shutdown,
    trace_request,
    truncate,
)


def test_truncate_marks_and_bounds() -> None:
    assert truncate("short", 100) == "short"
    text = "x" * 10_000
    out = truncate(text, 100)
    assert len(out) <= 100 and out.endswith(f"…[truncated {10_000 - out.index('…')} chars]")
    for n in (33, 40, 99, 101, 1000):
        for length in (n + 1, n + 9, n * 10):
            cut = truncate("y" * length, n)
            kept = cut.index("…")
            assert len(cut) <= n and cut == "y" * kept + f"…[truncated {length - kept} chars]"
    assert truncate(text, None) is text


def test_default_redactor() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    text = (
        "Mail bob.smith+rag@mail.example.co.uk or BOB@EXAMPLE.COM; card 4111 1111 1111 1111, "
        "amex 3782-822463-10005, not a card 4111 1111 1111 1112, order 1234567890123, "
        "phone +1 555 123 4567, year 2024."
    )
    out = default_redactor(text)
    assert "@" not in out and out.count("[EMAIL]") == 2
    assert out.count("[CARD]") == 2
    for kept in ("4111 1111 1111 1112", "1234567890123", "+1 555 123 4567", "year 2024."):
        assert kept in out
    assert default_redactor("nothing to see") == "nothing to see"


def test_capture_switches_limits_and_custom_redactor() -> None:
    exporter = InMemorySpanExporter()
    configure(
        "svc",
        exporter=exporter,
        batch=False,
        content=ContentPolicy(
            capture_contexts=False,
            max_chars=64,
            redact=lambda s: s.replace("secret", "******"),
            max_documents=1,
        ),
    )
    try:
        long_query = "secret " + "q" * 200
        handle(long_query)
        spans = by_name(exporter.get_finished_spans())
        q = spans["request"].attributes["input.value"]  # type: ignore[index]
        assert isinstance(q, str) and len(q) <= 64 and q.startswith("****** qqq") and "…[truncated" in q
        ret = spans["retrieve"].attributes
        assert ret is not None
        assert ret["retrieval.documents.0.document.id"] == "c1"
        assert ret["retrieval.documents.0.document.score"] == 0.91
        assert "retrieval.documents.0.document.content" not in ret  # contexts off
        assert "retrieval.documents.1.document.id" not in ret  # max_documents=1

        exporter.clear()
        configure(
            "svc",
            exporter=exporter,
            batch=False,
            content=ContentPolicy(capture_query=False, capture_answer=False, redact=None),
        )
        handle("private question")
        for s in exporter.get_finished_spans():
            attrs = s.attributes or {}
            assert "private question" not in str(dict(attrs))
            assert "Paris." not in str(dict(attrs))
            assert not {"input.value", "output.value", "llm.output_messages.0.message.content"} & set(attrs)
    finally:
        shutdown()


def test_json_looking_text_stays_text_and_extractors(mem: InMemorySpanExporter) -> None:
    @trace_request
    def echo(query: str) -> str:
        return '{"answer": "not this"}'

    echo('["a list-looking query"]')
    (rec,) = records(mem.get_finished_spans()).values()
    assert rec.query == '["a list-looking query"]' and rec.answer == '{"answer": "not this"}'

    class Doc:
        def __init__(self) -> None:
            self.page_content = "body"
            self.metadata = {"id": "m1", "score": 0.5}
            self.id = None

    assert default_document(Doc()) == ("m1", "body", 0.5)
    assert default_document(({"id": 7, "text": "t"}, 0.25)) == ("7", "t", 0.25)
    assert default_document("bare") == (None, "bare", None)
