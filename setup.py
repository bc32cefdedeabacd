"""Builds the compiled OTLP span decoder; everything else is in pyproject.toml.

The extension is optional: where no C compiler or Python headers exist, the build warns and the
package installs without it, and `monitor.ingest.decode` runs its pure-Python path (same results).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("monitor.ingest._wire", ["monitor/ingest/_wire.c"], optional=True)])
