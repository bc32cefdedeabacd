"""The LLM judge backends by name, in one place: `create_judge`, `llm_judge_config` and the
`judge.options` check all dispatch through `llm_backend`. Each is imported on first use, for its
own name only: it pulls in its SDK, which the offline judge does without."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from monitor.judge.llm_judge import LLMJudgeConfig
    from monitor.judge.protocol import Judge

__all__ = ["LLM_BACKENDS", "LLMBackend", "llm_backend"]

LLM_BACKENDS: tuple[Literal["anthropic", "openai"], ...] = ("anthropic", "openai")


@dataclass(frozen=True, slots=True)
class LLMBackend:
    judge: Callable[[Any], Judge]  # takes an instance of `config`
    config: type[LLMJudgeConfig]


@functools.cache
def llm_backend(kind: str) -> LLMBackend:
    """The judge class and its options model; ValueError for a name that is no LLM backend."""
    if kind == "anthropic":
        from monitor.judge.anthropic_judge import AnthropicJudge, AnthropicJudgeConfig

        return LLMBackend(AnthropicJudge, AnthropicJudgeConfig)
    if kind == "openai":
        from monitor.judge.openai_judge import OpenAIJudge, OpenAIJudgeConfig

        return LLMBackend(OpenAIJudge, OpenAIJudgeConfig)
    raise ValueError(f"no LLM judge {kind!r}: expected {' or '.join(LLM_BACKENDS)}")
