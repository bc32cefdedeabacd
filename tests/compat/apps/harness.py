"""What every compat app shares: the corpus, the fake model's answer, the OTel SDK set-up and the
line each app prints per request."""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

# The corpus every app indexes: ids the libraries keep as the document/node id.
CORPUS = {
    "doc-eiffel": "The Eiffel Tower is 330 metres tall and stands on the Champ de Mars in Paris.",
    "doc-louvre": "The Louvre in Paris is the most visited art museum in the world.",
    "doc-rhine": "The Rhine rises in the Swiss Alps and flows into the North Sea.",
    "doc-danube": "The Danube flows through ten countries and empties into the Black Sea.",
}
# What every fake model answers, whatever it is asked.
ANSWER = "The Eiffel Tower is 330 metres tall."


@dataclass
class Expected:
    """One request an app made, as the sidecar's results line should read it. `kind` is
    "request" (must become a record) or "not_request" (an index build, an embedding call: must not)."""

    style: str
    query: str
    answer: str = ANSWER
    kind: str = "request"
    # The chunk ids the spans carry, in rank order ([] where the spans carry none: then texts).
    chunk_ids: list[str] = field(default_factory=list)
    chunk_texts: list[str] = field(default_factory=list)
    # What the app knows the spans carry beyond query/answer/chunks, e.g. {"model": "fake-model"}.
    extra: dict[str, object] = field(default_factory=dict)


class CaptureExporter(SpanExporter):
    """Appends each export call's OTLP protobuf (ExportTraceServiceRequest bytes, as the OTLP
    exporters send and the Collector's kafkaexporter writes) to a file, 4-byte big-endian length first."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        body = encode_spans(spans).SerializeToString()
        with self._path.open("ab") as f:
            f.write(struct.pack(">I", len(body)) + body)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def read_capture(path: Path) -> list[bytes]:
    """The export bodies a `CaptureExporter` wrote."""
    data = path.read_bytes()
    out, i = [], 0
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        out.append(data[i + 4 : i + 4 + n])
        i += 4 + n
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", help="OTLP/HTTP traces endpoint, e.g. http://127.0.0.1:4318/v1/traces")
    p.add_argument("--capture", type=Path, help="append OTLP protobuf export bodies to this file")
    p.add_argument("--service", default="compat-app")
    p.add_argument("--release", default="1.0.0")
    return p.parse_args(argv)


def tracer_provider(args: argparse.Namespace) -> TracerProvider:
    """The SDK set up as the instrumentation's docs say, exporting synchronously (SimpleSpanProcessor)
    so that nothing is lost when the app exits."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": args.service, "service.version": args.release})
    )
    if args.endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=args.endpoint)))
    if args.capture:
        provider.add_span_processor(SimpleSpanProcessor(CaptureExporter(args.capture)))
    return provider


def emit(expected: Expected) -> None:
    """Print one request's expected reading (stdout, one JSON line)."""
    sys.stdout.write(json.dumps(asdict(expected)) + "\n")
    sys.stdout.flush()
