"""Builds the compiled OTLP span decoder, trace assembler, record accounting and Kafka record reader;
everything else is in pyproject.toml.

The extensions are optional: where no C compiler or Python headers exist, the build warns and the
package installs without them, and `monitor.ingest.decode`, `monitor.ingest.assemble` and the ingest
stage run their pure-Python paths (same results).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("monitor.ingest._wire", ["monitor/ingest/_wire.c"], optional=True),
        Extension("monitor.ingest._assembly", ["monitor/ingest/_assembly.c"], optional=True),
        Extension("monitor.ingest._accounting", ["monitor/ingest/_accounting.c"], optional=True),
        Extension("monitor.kafka._records", ["monitor/kafka/_records.c"], optional=True),
    ]
)
