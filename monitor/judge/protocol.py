"""The judge protocol every backend implements, when a record is not judged at all, and the
identity every judgement of a record carries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from monitor.contracts.model import Judgement, RagRecord

__all__ = ["SKIP_NO_ANSWER", "SKIP_NO_CONTEXT_CONTENT", "Judge", "RecordMeta", "skip_reason"]


@runtime_checkable
class Judge(Protocol):
    """A judge of RAG records. Implementations never raise for a bad record or a failed API call:
    they return a `Judgement` whose `error` says what went wrong (and that carries no scores)."""

    @property
    def name(self) -> str:
        """Backend name: the `backend` label (`lexical`, `anthropic`, `openai`)."""
        ...

    @property
    def model(self) -> str: ...

    async def judge(self, record: RagRecord, *, sampling_weight: float = 1.0) -> Judgement: ...

    async def aclose(self) -> None: ...


# -- when not to judge ------------------------------------------------------------------------------

SKIP_NO_ANSWER = "no_answer"
SKIP_NO_CONTEXT_CONTENT = "no_context_content"


def skip_reason(record: RagRecord) -> str | None:
    """Why judging `record` would be meaningless (a `ragmon_judge_skipped_total` reason), or None.

    A record with *no* chunks is judged (answering with nothing retrieved is exactly the
    hallucination to catch); chunks whose text the instrumentation did not capture are not: every
    claim would look unsupported.
    """
    if not record.answer.strip():
        return SKIP_NO_ANSWER
    if record.chunks and not any(c.content for c in record.chunks):
        return SKIP_NO_CONTEXT_CONTENT
    return None


# -- what every judgement of a record carries -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordMeta:
    """The identity fields every judgement of one record carries."""

    trace_id: str
    query_type: str
    service: str
    backend: str
    model: str
    sampling_weight: float

    def kwargs(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "query_type": self.query_type,
            "service": self.service,
            "backend": self.backend,
            "model": self.model,
            "sampling_weight": self.sampling_weight,
        }
