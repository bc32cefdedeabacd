"""The judge stage's config sections (`judge`, its `breaker` and `budget`; `review`), the check of
`judge.options` against the backend's own option model, and what the stage takes from `pipeline`."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_type_hints

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from monitor.contracts.results import ReviewReason
from monitor.judge.backends import LLM_BACKENDS, llm_backend
from monitor.judge.budget import BudgetPolicy
from monitor.judge.lexical import LexicalJudge
from monitor.plumbing.errors import error_line


class BreakerConfig(BaseModel):
    """The judge circuit breaker: consecutive outage errors (connection refused, 429, 5xx, 529,
    timeout) open it; judging then pauses, one probe at a time, instead of burning samples as
    failed judgements."""

    model_config = ConfigDict(extra="forbid")

    failures: int = Field(5, gt=0, description="consecutive outage errors that open the breaker")
    min_pause_seconds: float = Field(1.0, gt=0)
    max_pause_seconds: float = Field(60.0, gt=0)
    max_attempts: int = Field(
        5,
        gt=0,
        description="outage errors of one sample before it is written failed, provided other samples "
        "(or a canary record) were judged since its first (the sample is the trouble); in an outage "
        "nothing is given up",
    )


class JudgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["lexical", "anthropic", "openai", "none"] = "lexical"
    workers: int = Field(8, gt=0, description="judgements in flight at once")
    repeat_fraction: float = Field(
        0.0,
        ge=0,
        le=1,
        description="share of judged records judged a second time to expose judge instability",
    )
    budget: BudgetPolicy = Field(default_factory=BudgetPolicy)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    # Passed to the backend: model, base_url, api_key_file, max_concurrency, timeout_seconds,
    # prices... (monitor/judge/llm_judge.py LLMJudgeConfig). Prefer api_key_file or the environment
    # variable over a key in this file.
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _money_is_bounded(self) -> JudgeConfig:
        """An LLM judge with no USD limit configured gets the default daily cap, so a wrong
        sampling rate or a flood of traffic costs a bounded sum (`judge.budget.usd_per_day: null`
        lifts it)."""
        if self.backend in LLM_BACKENDS:
            self.budget = self.budget.with_default_cap()
        return self

    @field_validator("options")
    @classmethod
    def _options_of_the_backend(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Options the backend does not have stop start-up: LLM options on the lexical judge mean the
        operator believes an LLM judges. Checked with the backend's own option model, without
        creating the judge, so no API key is needed to validate (or show) a configuration."""
        backend = info.data.get("backend")
        if backend is None or not options:  # a bad backend has its own error
            return options
        if backend == "none":
            raise ValueError("no option applies: the judge is off (judge.backend none)")
        model = _judge_options_model(backend)
        try:
            model.model_validate(options)
        except ValidationError as exc:
            raise ValueError(
                _option_problems(exc, f"the {backend} judge", sorted(model.model_fields))
            ) from None
        return options


def _option_problems(exc: ValidationError, owner: str, known: list[str]) -> str:
    """One line: the unknown options together, with the list of known ones, then bad values."""
    errors = exc.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
    problems = [error_line(e) for e in errors if e not in unknown]
    if unknown:
        names = ", ".join(repr(e["loc"][0]) for e in unknown)
        verb = "is not an option" if len(unknown) == 1 else "are not options"
        problems.insert(0, f"{names} {verb} of {owner} (options: {', '.join(known)})")
    return "; ".join(problems)


@functools.cache
def _judge_options_model(backend: str) -> type[BaseModel]:
    """The model `create_judge` validates `judge.options` with. The LLM modules are imported for
    their own backend only: they pull in their SDKs."""
    if backend in LLM_BACKENDS:
        return llm_backend(backend).config
    # The lexical judge takes its options as keyword arguments: the model is its signature.
    hints = get_type_hints(LexicalJudge.__init__)
    fields: dict[str, Any] = {
        name: (hints[name], param.default)
        for name, param in inspect.signature(LexicalJudge).parameters.items()
    }
    return create_model("LexicalJudgeOptions", __config__=ConfigDict(extra="forbid"), **fields)


@dataclass(frozen=True, slots=True)
class JudgeQueue:
    """What the judge stage takes from the `pipeline` section (kept there in the configuration
    file, beside the topics): the samples topic and group it reads, what it may hold, and the
    largest message it may write (the results topic's max.message.bytes)."""

    samples_topic: str
    group_id: str
    queue_size: int
    queue_bytes: int
    max_message_bytes: int


class ReviewConfig(BaseModel):
    """The review queue (`monitor.judge.review`): judged records a person should look at, each
    with why. Off by default; on, its lines go to `topic` and/or `file`."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="queue judged records for human review (rag-monitor review)")
    topic: str | None = Field(
        "rag-monitor-review",
        description='keyed by trace id; unset: <kafka.group_id>-review; null or "": no review topic',
    )
    file: Path | None = Field(None, description="JSONL review queue (rotated like results.file)")
    file_max_bytes: int = Field(
        100 * 1024 * 1024, ge=0, description="rotate the review file past this size (0: never)"
    )
    file_keep: int = Field(5, ge=0, description="rotated review files kept: file.1 (newest) .. file.N")
    reasons: list[ReviewReason] = Field(
        default_factory=lambda: list(ReviewReason),
        description="which reasons queue a record: disagreement (repeat judgements differ, needs "
        "judge.repeat_fraction), boundary (undecided or overridden claims, one claim from faithful), "
        "alert (an example trace of a drift alert raised in this process), uniform (a random share)",
    )
    uniform_share: float = Field(
        0.02,
        ge=0,
        le=1,
        description="share of judged records drawn at random (per trace id) for review, whatever "
        "they look like: the labels that estimate judge agreement without selection bias",
    )
    max_per_hour: int = Field(
        200,
        gt=0,
        description="queued records in any 60 minutes, all reasons, group-wide: each judge replica takes"
        " the share of it its samples-topic partitions carry",
    )
    uniform_budget: float = Field(
        0.5,
        ge=0,
        le=1,
        description="part of max_per_hour kept for the uniform share; the rest is split evenly between "
        "the other reasons, so hard cases never crowd out the unbiased share (nor one another)",
    )
    queue_size: int = Field(
        1000, gt=0, description="lines waiting for the topic or file; past it (sinks down) lines are dropped"
    )
    queue_max_bytes: int = Field(
        64 * 1024 * 1024,
        gt=0,
        description="bytes of lines waiting for the topic or file (large records: a few fill it before "
        "queue_size does); past it lines are dropped",
    )

    @field_validator("topic")
    @classmethod
    def _empty_is_off(cls, topic: str | None) -> str | None:
        """`RAGMON_REVIEW__TOPIC=` (an environment variable cannot be null) turns it off too."""
        return topic or None
