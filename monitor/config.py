"""Sidecar configuration: a YAML file, then `RAGMON_` environment variables, then CLI flags.

Pydantic validates it once at start-up, so a bad value fails fast with the field's name instead of
surfacing as a strange error deep in the pipeline.
"""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from monitor.estimate import EstimatePolicy
from monitor.ingest.decode import Encoding
from monitor.ingest.sample import SamplingPolicy
from monitor.judge.budget import BudgetPolicy
from monitor.outputs.evaluation_events import EventsConfig

DEFAULT_QUERY_TYPES = (
    "lookup",
    "comparison",
    "multi_hop",
    "exact_match",
    "abstractive",
    "out_of_corpus",
    "other",
    "unknown",
)


_ENV_APPLIED: ContextVar[bool] = ContextVar("_ENV_APPLIED", default=False)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KafkaConfig(_Section):
    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "otlp_spans"
    group_id: str = "rag-monitor"
    client_id: str = "rag-monitor"
    encoding: Encoding = Encoding.AUTO
    dead_letter_topic: str | None = None
    auto_offset_reset: str = Field("earliest", pattern="^(earliest|latest)$")
    # Messages above this are rejected as too_large (and dead-lettered); fetch limits follow it so a
    # large message can never wedge a partition.
    max_message_bytes: int = Field(8 * 1024 * 1024, gt=0)
    max_poll_records: int = Field(2000, gt=0)
    commit_interval_seconds: float = Field(2.0, gt=0)
    session_timeout_ms: int = Field(30_000, gt=0)
    reconnect_backoff_max_seconds: float = Field(10.0, gt=0)
    # Passed unchanged to aiokafka (security_protocol, sasl_mechanism, ssl_context is not supported).
    extra: dict[str, Any] = Field(default_factory=dict)


class AssemblyConfig(_Section):
    grace_seconds: float = Field(1.0, ge=0, description="wait after the root span for late children")
    timeout_seconds: float = Field(30.0, gt=0, description="emit or drop a trace whose root never came")
    max_open_traces: int = Field(50_000, gt=0)
    max_open_bytes: int = Field(128 * 1024 * 1024, gt=0)
    recent_trace_ids: int = Field(100_000, ge=0, description="emitted ids remembered to drop late spans")


class SlicesConfig(_Section):
    query_types: list[str] = Field(default_factory=lambda: list(DEFAULT_QUERY_TYPES))
    services: list[str] | None = Field(None, description="allow-list; default: first max_services seen")
    max_services: int = Field(20, gt=0)
    classify: Literal["rules", "judge", "off"] = Field(
        "rules",
        description="query type when spans carry no rag.query_type: rules, rules then the LLM judge's "
        "label for judged records, or off (unknown)",
    )

    @field_validator("classify", mode="before")
    @classmethod
    def _from_bool(cls, v: Any) -> Any:
        # `classify: true/false` was the first form of this setting.
        return {True: "rules", False: "off"}.get(v, v) if isinstance(v, bool) else v

    @field_validator("query_types")
    @classmethod
    def _needs_fallbacks(cls, v: list[str]) -> list[str]:
        for required in ("other", "unknown"):
            if required not in v:
                v = [*v, required]
        return v


class JudgeConfig(_Section):
    backend: Literal["lexical", "anthropic", "openai", "none"] = "lexical"
    workers: int = Field(8, gt=0, description="judgements in flight at once")
    repeat_fraction: float = Field(
        0.0,
        ge=0,
        le=1,
        description="share of judged records judged a second time to expose judge instability",
    )
    budget: BudgetPolicy = Field(default_factory=BudgetPolicy)
    # Passed to the backend: model, base_url, api_key_file, max_concurrency, timeout_seconds,
    # prices... (monitor/judge/base.py LLMJudgeConfig). Prefer api_key_file or the environment
    # variable over a key in this file.
    options: dict[str, Any] = Field(default_factory=dict)


class GoldenConfig(_Section):
    """Scheduled golden replay inside `rag-monitor run`; off unless `file` and `target` are set."""

    file: Path | None = None
    target: str | None = Field(None, description="http(s) URL of the RAG service, or module:function")
    interval_seconds: float = Field(3600.0, gt=0)
    k: int = Field(5, gt=0)
    baseline: Path | None = None
    concurrency: int = Field(8, gt=0)


class SamplingConfig(SamplingPolicy):
    """Per-query-type rates, priority signals and per-window floors (monitor/ingest/sample.py)."""


class MetricsConfig(_Section):
    host: str = "0.0.0.0"
    port: int = Field(9612, ge=0, le=65535)


class ResultsConfig(_Section):
    file: Path | None = None
    topic: str | None = None


class PipelineConfig(_Section):
    queue_size: int = Field(1000, gt=0, description="records waiting for judging/output")
    drain_timeout_seconds: float = Field(20.0, gt=0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAGMON_", env_nested_delimiter="__", extra="forbid")

    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig)
    slices: SlicesConfig = Field(default_factory=SlicesConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    golden: GoldenConfig = Field(default_factory=GoldenConfig)
    estimates: EstimatePolicy = Field(default_factory=EstimatePolicy)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    results: ResultsConfig = Field(default_factory=ResultsConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    events: EventsConfig = Field(default_factory=EventsConfig)

    @model_validator(mode="after")
    def _judge_labels_need_an_llm(self) -> Settings:
        if self.slices.classify == "judge" and self.judge.backend not in ("anthropic", "openai"):
            raise ValueError(
                f"slices.classify=judge needs an LLM judge (judge.backend anthropic or openai), "
                f"not {self.judge.backend!r}"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the file (passed as init kwargs): the Kubernetes convention of a
        # ConfigMap file with per-pod env overrides. CLI flags are merged after, without env.
        if _ENV_APPLIED.get():
            return (init_settings,)
        return env_settings, init_settings


class ConfigError(Exception):
    """A configuration problem, worded for the operator."""


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_settings(path: Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """File, then environment, then CLI overrides (nested dicts; None values are ignored)."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: top level must be a mapping")
        data = loaded or {}
    try:
        settings = Settings(**data)
        clean = _drop_none(overrides or {})
        if clean:
            token = _ENV_APPLIED.set(True)
            try:
                settings = Settings(**_deep_merge(settings.model_dump(), clean))
            finally:
                _ENV_APPLIED.reset(token)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    return settings


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            value = _drop_none(value)
            if value:
                out[key] = value
        elif value is not None:
            out[key] = value
    return out


def _describe(exc: ValidationError) -> str:
    lines = ["invalid configuration:"]
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")  # our own validators name their fields
        lines.append(f"  {where}: {msg}" if where else f"  {msg}")
    return "\n".join(lines)
