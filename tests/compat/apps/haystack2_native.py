"""haystack_native.py run under haystack-ai 2.x (requirements-haystack2.txt): the OpenTelemetryTracer still in
core (`haystack.tracing.OpenTelemetryTracer`, auto-enabled on import when a TracerProvider is set), and the
non-chat OpenAIGenerator still there."""

from tests.compat.apps.haystack_native import main

if __name__ == "__main__":
    main()
