"""An instrumented example RAG service: ``python -m examples.rag_service --port P --kafka B --topic T``."""

from examples.rag_service.app import Degrade, RagPipeline, ServiceConfig, classify, create_app

__all__ = ["Degrade", "RagPipeline", "ServiceConfig", "classify", "create_app"]
