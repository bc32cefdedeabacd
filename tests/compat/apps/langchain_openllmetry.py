"""LangChain LCEL RAG traced by OpenLLMetry (opentelemetry-instrumentation-langchain, Traceloop).
Runs with the current release (requirements-langchain.txt) and with 0.40.x
(requirements-langchain-040.txt, which writes no retriever span).

    python -m tests.compat.apps.langchain_openllmetry \
        --capture tests/compat/captures/langchain_openllmetry.otlp
"""

from __future__ import annotations

from opentelemetry.instrumentation.langchain import LangchainInstrumentor

from tests.compat.apps import harness
from tests.compat.apps.langchain_rag import run


def main() -> None:
    args = harness.parse_args()
    provider = harness.tracer_provider(args)
    LangchainInstrumentor().instrument(tracer_provider=provider)
    run()
    provider.shutdown()


if __name__ == "__main__":
    main()
