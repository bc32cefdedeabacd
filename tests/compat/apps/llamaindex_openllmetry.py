"""LlamaIndex RAG pipeline instrumented with OpenLLMetry/Traceloop
(opentelemetry-instrumentation-llamaindex): one trace per request style, see _llamaindex_common."""

from __future__ import annotations

from tests.compat.apps import harness


def main() -> None:
    args = harness.parse_args()
    provider = harness.tracer_provider(args)

    from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=provider)

    from tests.compat.apps._llamaindex_common import run

    try:
        run(provider)
    finally:
        provider.shutdown()


if __name__ == "__main__":
    main()
