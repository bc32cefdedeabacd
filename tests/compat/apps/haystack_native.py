"""Haystack's own OpenTelemetry tracing (content tracing on) over tiny RAG pipelines.

In haystack-ai 3.x the OpenTelemetryTracer lives in the `opentelemetry-haystack` integration
(`haystack_integrations.tracing.opentelemetry`) and is no longer auto-enabled; in 2.x it was
`haystack.tracing.OpenTelemetryTracer`. Both are tried.
"""

from __future__ import annotations

import os

os.environ["HAYSTACK_CONTENT_TRACING_ENABLED"] = "true"  # before haystack is imported

from opentelemetry import trace

from tests.compat.apps import harness


def main() -> None:
    args = harness.parse_args()
    provider = harness.tracer_provider(args)
    trace.set_tracer_provider(provider)

    import haystack.tracing

    try:
        from haystack_integrations.tracing.opentelemetry import OpenTelemetryTracer
    except ImportError:  # haystack-ai 2.x
        from haystack.tracing import OpenTelemetryTracer  # type: ignore[attr-defined,no-redef]

    haystack.tracing.enable_tracing(OpenTelemetryTracer(provider.get_tracer("haystack_native")))
    assert haystack.tracing.tracer.is_content_tracing_enabled

    from tests.compat.apps import fake_openai
    from tests.compat.apps._haystack_pipelines import run_all

    with fake_openai.serving() as url:
        run_all(url)
    provider.shutdown()


if __name__ == "__main__":
    main()
