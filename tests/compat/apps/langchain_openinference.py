"""LangChain LCEL RAG traced by OpenInference (openinference-instrumentation-langchain).

    python -m tests.compat.apps.langchain_openinference \
        --capture tests/compat/captures/langchain_openinference.otlp
"""

from __future__ import annotations

from openinference.instrumentation.langchain import LangChainInstrumentor

from tests.compat.apps import harness
from tests.compat.apps.langchain_rag import run


def main() -> None:
    args = harness.parse_args()
    provider = harness.tracer_provider(args)
    LangChainInstrumentor().instrument(tracer_provider=provider)
    run()
    provider.shutdown()


if __name__ == "__main__":
    main()
