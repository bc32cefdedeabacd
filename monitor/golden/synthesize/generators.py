"""Which generator a run uses (`make_generator`)."""

from __future__ import annotations

from collections.abc import Sequence

from monitor.golden.synthesize.corpus import SourceChunk
from monitor.golden.synthesize.llm import LLMGenerator
from monitor.golden.synthesize.tasks import Generator
from monitor.golden.synthesize.template import TemplateGenerator
from monitor.judge.backends import LLM_BACKENDS
from monitor.llm.chat import OpenAIClientConfig
from monitor.llm.config import ClientConfig

LLM_GENERATORS = LLM_BACKENDS  # a generator is configured as that judge is (`judge_options`)


def make_generator(kind: str, chunks: Sequence[SourceChunk], llm: ClientConfig | None = None) -> Generator:
    """`template` (offline), or one of `LLM_GENERATORS` configured by `llm` (the judge's settings,
    `judge_options`, validated by the caller as that judge takes them). ValueError for an unknown
    kind or a missing key: before anything is sent."""
    if kind == "template":
        return TemplateGenerator(chunks)
    if kind in LLM_GENERATORS:
        if llm is None or isinstance(llm, OpenAIClientConfig) != (kind == "openai"):
            raise ValueError(f"the {kind} generator needs the {kind} client's settings")
        return LLMGenerator(llm)
    raise ValueError(f"unknown generator {kind!r}: expected template, anthropic or openai")
