"""The judge stage: RagRecord in, Judgement out (claim-level faithfulness, the unanswerable check,
answer relevance), with an offline lexical judge and two HTTP LLM judges behind one protocol.

The LLM backends are imported lazily by `create_judge`, so the offline judge needs neither
`anthropic` nor an HTTP client.
"""

from __future__ import annotations

from typing import Any, Literal

from monitor.judge.base import Judge, skip_reason
from monitor.judge.lexical import LexicalJudge
from monitor.judge.model import JudgeOutcome, TokenUsage

__all__ = [
    "Judge",
    "JudgeKind",
    "JudgeOutcome",
    "LexicalJudge",
    "TokenUsage",
    "create_judge",
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
    if kind == "anthropic":
        from monitor.judge.anthropic_judge import AnthropicJudge, AnthropicJudgeConfig

        return AnthropicJudge(AnthropicJudgeConfig.model_validate(config))
    if kind == "openai":
        from monitor.judge.openai_judge import OpenAIJudge, OpenAIJudgeConfig

        return OpenAIJudge(OpenAIJudgeConfig.model_validate(config))
    raise ValueError(f"unknown judge {kind!r}: expected lexical, anthropic or openai")
