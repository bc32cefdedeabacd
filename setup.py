"""Builds the compiled OTLP span decoder and trace assembler; everything else is in pyproject.toml.

The extensions are optional: where no C compiler or Python headers exist, the build warns and the
package installs without them, and `monitor.ingest.decode` and `monitor.ingest.assemble` run their
pure-Python paths (same results).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("monitor.ingest._wire", ["monitor/ingest/_wire.c"], optional=True),
        Extension("monitor.ingest._assembly", ["monitor/ingest/_assembly.c"], optional=True),
    ]
)
