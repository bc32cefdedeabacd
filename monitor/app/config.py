"""Sidecar configuration: a YAML file, then `RAGMON_` environment variables, then CLI flags.

Pydantic validates it once at start-up, so a bad value fails fast with the field's name instead of
surfacing as a strange error deep in the pipeline. Each section's model lives with its feature
(`monitor/kafka/config.py`, `monitor/ingest/config.py`, `monitor/judge/config.py`...); this module
assembles them into `Settings`, holds the wiring section (`pipeline`), and prints (redacted) what is
in effect for `rag-monitor config show`.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from monitor.contracts.estimate import EstimatePolicy
from monitor.contracts.slices import SlicesConfig
from monitor.drift.config import AlertsConfig
from monitor.golden.config import GoldenConfig
from monitor.ingest.config import AssemblyConfig, IngestLimits, SamplingConfig
from monitor.judge.backends import LLM_BACKENDS
from monitor.judge.config import JudgeConfig, JudgeQueue, ReviewConfig
from monitor.kafka.config import KafkaConfig
from monitor.outputs.config import EventsConfig, MetricsConfig, ResultsConfig
from monitor.plumbing.errors import error_line, yaml_error

# The CLI flags of the `load_settings` call under way: the source that beats the environment.
_FLAGS: ContextVar[dict[str, Any] | None] = ContextVar("_FLAGS", default=None)

SECRET_MASK = "**********"  # how pydantic prints a SecretStr
_SECRET_NAME = re.compile("key|password|secret|token|credential", re.IGNORECASE)


Role = Literal["all", "ingest", "judge", "drift"]

# Settings section -> field -> suffix: the names derived from kafka.group_id when unset (a new
# internal topic or group adds its line here).
DERIVED_NAMES: dict[str, dict[str, str]] = {
    "pipeline": {"samples_topic": "samples", "judge_group_id": "judge", "drift_group_id": "drift"},
    "results": {"topic": "judgements"},
    "review": {"topic": "review"},
}


class PipelineConfig(BaseModel):
    """The two stages and the durable samples topic between them (docs/contract.md, Pipeline)."""

    model_config = ConfigDict(extra="forbid")

    role: Role = Field("all", description="run every stage in this process, or one of them")
    samples_topic: str = Field(
        "rag-monitor-samples",
        min_length=1,
        description="ingest -> judge, durable; unset: <kafka.group_id>-samples",
    )
    judge_group_id: str = Field(
        "rag-monitor-judge",
        min_length=1,
        description="the judge stage's group; unset: <kafka.group_id>-judge",
    )
    drift_group_id: str = Field(
        "rag-monitor-drift",
        min_length=1,
        description="the drift stage's group (on the results topic); unset: <kafka.group_id>-drift",
    )
    topics_replication: int = Field(
        1,
        ge=1,
        validation_alias=AliasChoices("topics_replication", "samples_replication"),  # the old name
        description="replication factor of the samples and results topics when the sidecar creates"
        " them (production: 3, the chart's default)",
    )
    create_topics: bool = Field(
        True,
        description="create the samples and results topics when missing (false: they are provisioned;"
        " a missing one is logged at start)",
    )
    queue_size: int = Field(
        1000, gt=0, description="samples held by the judge stage (queued, judged, being written)"
    )
    queue_bytes: int = Field(
        256 * 1024 * 1024,
        gt=0,
        description="bytes of the samples held by the judge stage (their messages); past it, as past "
        "queue_size, its partitions are paused",
    )
    max_inflight_produces: int = Field(
        10_000, gt=0, description="samples produced and not yet acknowledged before ingest waits"
    )
    max_message_bytes: int = Field(
        1_000_000,
        ge=10_000,
        description="the samples and results topics' max.message.bytes (Kafka's default is 1 MB): a"
        " message over it is dropped and counted (ragmon_produce_dropped_total), never retried",
    )
    sample_max_chunks: int = Field(
        100, ge=1, description="chunks a sample carries (the lowest ranked beyond are left out, recorded)"
    )
    sample_max_chunk_chars: int = Field(
        16_000,
        ge=100,
        description="text a sample carries per chunk and query (the answer: twice this); the cut is"
        " recorded in the sample and its results line",
    )
    stall_seconds: float = Field(
        120.0,
        gt=0,
        description="a stage with work waiting and no progress this long is stalled: /readyz answers"
        " 503 naming it and ragmon_stage_stalled{stage} is 1",
    )
    liveness_stall_seconds: float = Field(
        600.0,
        gt=0,
        description="stalled this long, /healthz answers 503 too, so that Kubernetes restarts the pod",
    )
    shutdown_seconds: float = Field(
        25.0,
        gt=0,
        description="SIGTERM to exit, everything included (Kubernetes' default grace period is 30 s)",
    )

    # The section holds wiring (role, topics, groups, stall and shutdown times: the sidecar's) and,
    # beside the topics they bound, two stages' limits, which each stage is handed on its own.

    def ingest_limits(self) -> IngestLimits:
        return IngestLimits(
            samples_topic=self.samples_topic,
            max_inflight_produces=self.max_inflight_produces,
            max_message_bytes=self.max_message_bytes,
            sample_max_chunks=self.sample_max_chunks,
            sample_max_chunk_chars=self.sample_max_chunk_chars,
        )

    def judge_queue(self) -> JudgeQueue:
        return JudgeQueue(
            samples_topic=self.samples_topic,
            group_id=self.judge_group_id,
            queue_size=self.queue_size,
            queue_bytes=self.queue_bytes,
            max_message_bytes=self.max_message_bytes,
        )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RAGMON_", env_nested_delimiter="__", extra="forbid", hide_input_in_errors=True
    )

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
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    review: ReviewConfig = Field(default_factory=ReviewConfig)

    @model_validator(mode="after")
    def _derive_internal_names(self) -> Settings:
        """Each internal topic and group unset in the configuration is `<kafka.group_id>-<suffix>`
        (README, Configuration), as Kafka Streams derives its internal topics from `application.id`: two
        deployments on one cluster (staging and production, or two services' monitors) then never
        share a topic or a group, never judge each other's samples. A set name wins, null included."""
        group = self.kafka.group_id
        for section_name, suffixes in DERIVED_NAMES.items():
            section: BaseModel = getattr(self, section_name)
            unset = {
                field: f"{group}-{suffix}"
                for field, suffix in suffixes.items()
                if field not in section.model_fields_set
            }
            if unset:
                # A new section (never the caller's instance, which may be shared), still marked
                # unset: the names follow group_id again if these settings are ever re-validated.
                values = {**dict(section), **unset}
                setattr(self, section_name, section.model_construct(section.model_fields_set, **values))
        return self

    @model_validator(mode="after")
    def _judge_labels_need_an_llm(self) -> Settings:
        if self.slices.classify == "judge" and self.judge.backend not in LLM_BACKENDS:
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
        # Flags beat the environment, which beats the file (passed as init kwargs): the Kubernetes
        # convention of a ConfigMap file with per-pod env overrides. All merged before the one
        # validation, so checks across fields see the values in effect, not the file's alone.
        flags = InitSettingsSource(settings_cls, init_kwargs=_FLAGS.get() or {})
        return flags, env_settings, init_settings

    def redacted(self) -> dict[str, Any]:
        """The settings as plain data fit to print: every SecretStr masked, and so is any value in a
        free-form mapping (judge.options, kafka.extra...) whose key names a credential. The events
        section redacts itself: every header value, and credentials in its URL."""
        out: dict[str, Any] = _redact(self, self.model_dump(mode="json"))
        out["events"] = self.events.redacted()
        return out

    def secrets(self) -> set[str]:
        """The strings `redacted` masks: what the log filter (`cli._setup_logging`) blanks."""
        dumped = self.model_dump(mode="json")
        plain = _reveal(self, dumped)
        return secret_strings(plain, self.redacted())


def secret_strings(original: Any, redacted: Any) -> set[str]:
    """What `redacted` (a `Settings.redacted()`) masks of `original` (the same settings dumped),
    as the strings no log line may carry: a masked value whole; of a URL, the credentials, the
    query and fragment, and the path where it was masked (a webhook's)."""
    out: set[str] = set()
    if isinstance(original, dict) and isinstance(redacted, dict):
        for key, value in original.items():
            out |= secret_strings(value, redacted.get(key))
    elif isinstance(original, list) and isinstance(redacted, list):
        for a, b in zip(original, redacted, strict=False):
            out |= secret_strings(a, b)
    elif isinstance(original, str) and original != redacted:
        if not _URL.match(original):
            out.add(original)
        else:
            try:
                parts = urlsplit(original)
            except ValueError:
                return {original}
            userinfo = parts.netloc.rpartition("@")[0]  # the user name alone is no secret
            out |= {userinfo, userinfo.partition(":")[2], parts.query, parts.fragment}
            if isinstance(redacted, str) and URL_MASK in urlsplit(redacted).path:
                out.add(parts.path.rstrip("/"))
    return {s for s in out if len(s) >= 4}


def _redact(value: Any, dumped: Any, name: str = "") -> Any:
    """`dumped` (the JSON-mode dump of `value`) with its secrets masked. Walks the live objects
    alongside, since only they say which fields are secrets and which mappings are free-form. URLs
    lose their credentials (user:password@, the query) and, for a webhook, the path: Slack's and
    most others' webhook secret is the path itself."""
    if isinstance(value, SecretStr):
        return SECRET_MASK
    if isinstance(value, str) and _URL.match(value):
        return _mask_url(value, hide_path="webhook" in name.lower())
    if isinstance(value, BaseModel):
        return {key: _redact(getattr(value, key), d, key) for key, d in dumped.items()}
    if isinstance(value, dict):
        return {
            key: SECRET_MASK
            if _SECRET_NAME.search(str(key)) and not _never_secret(v)
            else _redact(v, d, str(key))
            for (key, v), d in zip(value.items(), dumped.values(), strict=True)
        }
    if isinstance(value, list | tuple):
        return [_redact(v, d, name) for v, d in zip(value, dumped, strict=True)]
    return dumped


def _reveal(value: Any, dumped: Any) -> Any:
    """`dumped` with each SecretStr's own value in place of pydantic's mask."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, BaseModel) and isinstance(dumped, dict):
        return {key: _reveal(getattr(value, key, None), d) for key, d in dumped.items()}
    if isinstance(value, dict) and isinstance(dumped, dict):
        return {key: _reveal(v, d) for (key, v), d in zip(value.items(), dumped.values(), strict=False)}
    if isinstance(value, list | tuple) and isinstance(dumped, list):
        return [_reveal(v, d) for v, d in zip(value, dumped, strict=False)]
    return dumped


_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://")
URL_MASK = "***"


def _mask_url(url: str, *, hide_path: bool) -> str:
    """`url` with the user info, query and fragment masked, and the path too with `hide_path`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return URL_MASK
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{URL_MASK}@{host}" if "@" in parts.netloc else host
    path = f"/{URL_MASK}" if hide_path and parts.path.strip("/") else parts.path
    return urlunsplit(
        (
            parts.scheme,
            netloc,
            path,
            URL_MASK if parts.query else "",
            URL_MASK if parts.fragment else "",
        )
    )


def _never_secret(value: Any) -> bool:
    """Numbers, booleans and unset values are no credentials, and worth seeing (`max_tokens`)."""
    return isinstance(value, int | float | None)


class ConfigError(Exception):
    """A configuration problem, worded for the operator."""


def load_settings(path: Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """File, then environment, then CLI overrides (nested dicts; None values are ignored)."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            where, what = yaml_error(exc)
            raise ConfigError(f"config file {path}{', ' + where if where else ''}: {what}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: top level must be a mapping")
        data = loaded or {}
    token = _FLAGS.set(_drop_none(overrides or {}))
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None
    except SettingsError as exc:  # a RAGMON_ variable holding a section or a mapping is not JSON
        raise ConfigError(f"invalid configuration:\n  environment: {exc} ({exc.__cause__})") from None
    finally:
        _FLAGS.reset(token)


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


def _describe(exc: ValidationError, path: Path | None) -> str:
    """One line a bad key; the header names where the values came from (a key may be set by the
    file, a RAGMON_ variable or a flag)."""
    where = f" ({path}, then the RAGMON_ environment and flags)" if path is not None else ""
    header = f"invalid configuration{where}:"
    return "\n".join([header, *(f"  {error_line(err)}" for err in exc.errors())])
