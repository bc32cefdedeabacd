"""The same tiny Haystack RAG pipelines traced by openinference-instrumentation-haystack
(Haystack's own tracing left off)."""

from __future__ import annotations

from opentelemetry import trace

from tests.compat.apps import harness


def main() -> None:
    args = harness.parse_args()
    provider = harness.tracer_provider(args)
    trace.set_tracer_provider(provider)

    from openinference.instrumentation.haystack import HaystackInstrumentor

    HaystackInstrumentor().instrument(tracer_provider=provider)

    import haystack.tracing

    assert not haystack.tracing.is_tracing_enabled()

    from tests.compat.apps import fake_openai
    from tests.compat.apps._haystack_pipelines import run_all

    with fake_openai.serving() as url:
        run_all(url)
    provider.shutdown()


if __name__ == "__main__":
    main()
