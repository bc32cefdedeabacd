"""Tiny RAG pipelines built with the libraries users run, instrumented the way their docs say.

Each module runs in the compat virtualenv (`make test-compat`), never in the main one: the
libraries are too heavy for `make test`. Run one as
``python -m tests.compat.apps.<module> --endpoint URL`` (OTLP/HTTP, as a service would export) or
``--capture FILE`` (the OTLP protobuf of every export call appended, length-prefixed); it prints
one JSON line per request it made (`harness.Expected`), which the tests compare with the
sidecar's results lines.
"""
