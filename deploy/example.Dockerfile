# syntax=docker/dockerfile:1
# The example RAG service of examples/rag_service (FastAPI, BM25, an extractive generator), for the
# compose stack of deploy/docker-compose.yml. Built from the repository root:
#   docker build -f deploy/example.Dockerfile -t rag-example .
# Its own image, not the sidecar's: it needs the `example` extra (fastapi, uvicorn, bm25s) and the
# examples/ package, which is not part of the rag-monitor distribution.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# Dependencies first, so that editing the example does not reinstall them.
COPY pyproject.toml README.md ./
COPY monitor ./monitor
RUN pip install '.[example]'
COPY examples ./examples

RUN useradd --system --uid 10001 --no-create-home rag
USER 10001

EXPOSE 8000
# Spans go where the command says: `--otlp URL` (a Collector), `--kafka BOOTSTRAP`, or nowhere.
ENTRYPOINT ["python", "-m", "examples.rag_service"]
CMD ["--host", "0.0.0.0", "--port", "8000"]
