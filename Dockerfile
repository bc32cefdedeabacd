# syntax=docker/dockerfile:1
# The sidecar image: `rag-monitor run` with the `sidecar` extra (no embedded broker, no demo).
#   docker build -t rag-monitor .
#   docker run --read-only -v /path/config.yaml:/etc/rag-monitor/config.yaml:ro -p 9612:9612 rag-monitor
# Runs as uid 10001 and writes nothing outside /tmp and /var/lib/rag-monitor (volumes), so it works
# with a read-only root filesystem. SIGTERM drains for up to `pipeline.shutdown_seconds` (25 s):
# give it `docker stop -t 30` / `terminationGracePeriodSeconds: 30`.
ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: a wheel of the project, installed with its `sidecar` extra into a venv ----
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# A C compiler for the compiled span decoder, trace assembler and record accounting (the wheel
# carries them built), and the Python headers where the base lacks them (a Debian python3 base:
# python3-dev); only this stage has them.
RUN include="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
    && headers="$([ -f "$include/Python.h" ] || echo python3-dev)" \
    && apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev $headers \
    && rm -rf /var/lib/apt/lists/* \
    && python -m venv /opt/venv
# pip's settings for this stage only (a mirror, a CA bundle); none reaches the runtime image.
ARG PIP_INDEX_URL
ARG PIP_CERT
COPY pyproject.toml setup.py README.md ./
COPY monitor ./monitor
# The extensions are optional to setuptools: the import makes their absence fail the build rather
# than leave an image silently on the pure-Python span path. pip and setuptools leave the venv
# (about 23 MB): nothing installs at run time.
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/venv/bin/pip wheel --no-deps --wheel-dir /dist . \
    && /opt/venv/bin/pip install "$(ls /dist/rag_monitor-*.whl)[sidecar]" \
    && /opt/venv/bin/python -I -c 'import monitor.ingest._wire, monitor.ingest._assembly, monitor.ingest._accounting' \
    && /opt/venv/bin/python -m pip uninstall -q -y pip setuptools \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

# ---- runtime: the venv alone on a slim Python; the same base image, so the venv's python resolves ----
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="rag-monitor" \
      org.opencontainers.image.description="Online quality monitor for RAG services (the sidecar)" \
      org.opencontainers.image.licenses="Apache-2.0"
# Bytecode was compiled in the builder: nothing is written next to the code at run time. HOME and
# TMPDIR point at the /tmp volume for any library that wants a cache or a temp file.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
RUN groupadd --system --gid 10001 rag-monitor \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin rag-monitor \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/rag-monitor \
    && install -d -m 0755 /etc/rag-monitor \
    && printf '%s\n' \
       '# Defaults (monitor/app/config.py) apply; mount your config.yaml over this file, or set RAGMON_*' \
       '# variables, e.g. RAGMON_KAFKA__BOOTSTRAP_SERVERS=kafka:9092.' \
       > /etc/rag-monitor/config.yaml
COPY --from=builder /opt/venv /opt/venv
USER 10001:10001
WORKDIR /var/lib/rag-monitor
# Writable places under a read-only root: temp files, and state (results.file, judge.budget.state_file).
VOLUME ["/tmp", "/var/lib/rag-monitor"]
# metrics.port: /metrics, /healthz, /readyz.
EXPOSE 9612
# Liveness only (/healthz): readiness (/readyz) is the orchestrator's business, and an unhealthy
# broker must not get the container restarted. The port follows RAGMON_METRICS__PORT when set.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('RAGMON_METRICS__PORT', '9612') + '/healthz', timeout=4)"]
ENTRYPOINT ["rag-monitor"]
CMD ["run", "--config", "/etc/rag-monitor/config.yaml"]
