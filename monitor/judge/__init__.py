"""The judge stage: RagRecord in, Judgement out (claim-level faithfulness, the unanswerable check,
answer relevance), with an offline lexical judge and two HTTP LLM judges behind one protocol.

The LLM backends are imported lazily by `create_judge`, so the offline judge needs neither
`anthropic` nor an HTTP client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from monitor.judge.backends import LLM_BACKENDS, llm_backend
from monitor.judge.lexical import LexicalJudge
from monitor.judge.protocol import Judge, skip_reason

if TYPE_CHECKING:
    from monitor.judge.llm_judge import LLMJudgeConfig

__all__ = [
    "Judge",
    "JudgeKind",
    "LexicalJudge",
    "create_judge",
    "llm_judge_config",
    "skip_reason",
]

JudgeKind = Literal["lexical", "anthropic", "openai"]


def create_judge(kind: JudgeKind | str, config: dict[str, Any] | None = None) -> Judge:
    """The judge named by the CLI's ``--judge``, configured from a plain mapping (a config section).

    Raises ValueError for an unknown kind, a bad setting or a missing API key: fail at start-up,
    not on the first record.
    """
    config = config or {}
    if kind == "lexical":
        return LexicalJudge(**config)
    if kind not in LLM_BACKENDS:
        raise ValueError(f"unknown judge {kind!r}: expected lexical, {' or '.join(LLM_BACKENDS)}")
    backend = llm_backend(kind)
    return backend.judge(backend.config.model_validate(config))


def llm_judge_config(kind: str, options: Mapping[str, Any]) -> LLMJudgeConfig:
    """`options` validated as the LLM judge `kind` takes them (pydantic's ValidationError for a bad
    one), without creating the judge: for callers configured like the judge (``judge_options``)
    that build their own calls, such as the golden-set synthesizer."""
    return llm_backend(kind).config.model_validate(dict(options))
