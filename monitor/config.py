"""Sidecar configuration: a YAML file, then `RAGMON_` environment variables, then CLI flags.

Pydantic validates it once at start-up, so a bad value fails fast with the field's name instead of
surfacing as a strange error deep in the pipeline.
"""

from __future__ import annotations

import functools
import inspect
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, get_type_hints
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from monitor.drift import DriftPolicy
from monitor.estimate import EstimatePolicy
from monitor.ingest.decode import Encoding
from monitor.ingest.sampler import SamplingPolicy
from monitor.judge.budget import BudgetPolicy
from monitor.judge.lexical import LexicalJudge
from monitor.outputs.alerts import AlertSinksConfig
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


# The CLI flags of the `load_settings` call under way: the source that beats the environment.
_FLAGS: ContextVar[dict[str, Any] | None] = ContextVar("_FLAGS", default=None)

SECRET_MASK = "**********"  # how pydantic prints a SecretStr
_SECRET_NAME = re.compile("key|password|secret|token|credential", re.IGNORECASE)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KafkaConfig(_Section):
    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "otlp_spans"
    group_id: str = "rag-monitor"
    client_id: str = "rag-monitor"
    encoding: Encoding = Encoding.AUTO
    dead_letter_topic: str | None = None
    auto_offset_reset: Literal["earliest", "latest"] = Field(
        "latest",
        description="where a group with no committed offset starts: latest (now: a first deployment on "
        "a busy topic does not judge its backlog) or earliest; a committed offset always wins",
    )
    # Messages above this are rejected as too_large (and dead-lettered); fetch limits follow it so a
    # large message can never wedge a partition.
    max_message_bytes: int = Field(8 * 1024 * 1024, gt=0)
    max_poll_records: int = Field(2000, gt=0)
    commit_interval_seconds: float = Field(2.0, gt=0)
    session_timeout_ms: int = Field(30_000, gt=0)
    reconnect_backoff_max_seconds: float = Field(10.0, gt=0)
    fetch_watchdog_seconds: float = Field(
        120.0,
        ge=0,
        description="restart the consumer when no fetch returns this long while assigned (0 = off)",
    )
    dead_letter_max_inflight: int = Field(100, gt=0, description="dead-letter copies awaiting their ack")
    # Passed unchanged to aiokafka, for its settings without a field here; security has its fields.
    extra: dict[str, Any] = Field(default_factory=dict)
    # Security, in aiokafka's own names (docs/contract.md, Kafka connection). Files are checked here and read
    # when the clients start (monitor/kafka/client.py). security_protocol comes last: its validator
    # checks the fields above together.
    ssl_cafile: Path | None = Field(None, description="CA bundle for the brokers; default: system CAs")
    ssl_certfile: Path | None = Field(None, description="client certificate (mutual TLS)")
    ssl_keyfile: Path | None = Field(None, description="client private key (mutual TLS)")
    ssl_keyfile_password: SecretStr | None = None
    ssl_keyfile_password_file: Path | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = Field(None, description="e.g. a mounted Kubernetes secret")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", validate_default=True
    )

    # Pydantic prints a failed model's input in its errors; here that input holds the secrets.
    model_config = ConfigDict(hide_input_in_errors=True)

    @field_validator(
        "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_keyfile_password_file", "sasl_password_file"
    )
    @classmethod
    def _readable(cls, path: Path | None) -> Path | None:
        """A missing certificate fails start-up, not the first connection minutes later."""
        if path is not None:
            try:
                with path.open("rb") as f:
                    empty = not f.read(1)
            except OSError as exc:
                raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
            if empty:
                raise ValueError(f"{path} is empty")
        return path

    @field_validator("security_protocol")
    @classmethod
    def _security_is_consistent(cls, protocol: str, info: ValidationInfo) -> str:
        """Options the protocol would silently ignore are errors, as are half-given credentials.

        A field validator, not a model validator: the error then shows this field's value, never the
        section's input with its passwords, even where `hide_input_in_errors` does not reach.
        """
        got = info.data
        if _CHECKED - got.keys():
            return protocol  # one of them failed already, with its own error
        for key in got["extra"]:
            if key in ("security_protocol", "ssl_context") or key.startswith("sasl_"):
                raise ValueError(
                    f"extra.{key} is not passed to aiokafka: use kafka.{_EXTRA_FIELDS.get(key, 'sasl_*')}"
                )
        tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol.startswith("SASL_")
        tls_set = [n for n in _TLS_OPTIONS if got[n] is not None]
        tls_set += [] if got["ssl_check_hostname"] else ["ssl_check_hostname"]
        sasl_set = [n for n in _SASL_OPTIONS if got[n] is not None]
        sasl_set += [] if got["sasl_mechanism"] == "PLAIN" else ["sasl_mechanism"]
        if tls_set and not tls:
            raise ValueError(f"{', '.join(tls_set)}: only used with SSL or SASL_SSL, ignored with {protocol}")
        if sasl_set and not sasl:
            raise ValueError(
                f"{', '.join(sasl_set)}: only used with SASL_PLAINTEXT or SASL_SSL, ignored with {protocol}"
            )
        if sasl and not got["sasl_username"]:
            raise ValueError(f"{protocol} needs sasl_username")
        if sasl and got["sasl_password"] is None and got["sasl_password_file"] is None:
            raise ValueError(f"{protocol} needs sasl_password or sasl_password_file")
        if sasl and None not in (got["sasl_password"], got["sasl_password_file"]):
            raise ValueError("give sasl_password or sasl_password_file, not both")
        if (got["ssl_certfile"] is None) != (got["ssl_keyfile"] is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together (mutual TLS)")
        key_passwords = [got["ssl_keyfile_password"], got["ssl_keyfile_password_file"]]
        if key_passwords != [None, None] and got["ssl_keyfile"] is None:
            raise ValueError("ssl_keyfile_password(_file) given without ssl_keyfile")
        if None not in key_passwords:
            raise ValueError("give ssl_keyfile_password or ssl_keyfile_password_file, not both")
        return protocol


_TLS_OPTIONS = (
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_keyfile_password",
    "ssl_keyfile_password_file",
)
_SASL_OPTIONS = ("sasl_username", "sasl_password", "sasl_password_file")
_CHECKED = frozenset({"extra", "ssl_check_hostname", "sasl_mechanism", *_TLS_OPTIONS, *_SASL_OPTIONS})
# aiokafka argument -> the field that now sets it
_EXTRA_FIELDS = {
    "security_protocol": "security_protocol",
    "ssl_context": "ssl_cafile, ssl_certfile and ssl_keyfile",
    "sasl_mechanism": "sasl_mechanism",
    "sasl_plain_username": "sasl_username",
    "sasl_plain_password": "sasl_password or sasl_password_file",
}


class AssemblyConfig(_Section):
    grace_seconds: float = Field(1.0, ge=0, description="wait after the root span for late children")
    timeout_seconds: float = Field(30.0, gt=0, description="emit or drop a trace whose root never came")
    max_open_traces: int = Field(50_000, gt=0)
    max_open_bytes: int = Field(
        128 * 1024 * 1024,
        gt=0,
        description="bytes of the messages open traces hold, each message charged whole once",
    )
    max_spans_per_trace: int = Field(
        10_000, gt=0, description="spans taken per trace; later ones are dropped (too_many_spans)"
    )
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


class BreakerConfig(_Section):
    """The judge circuit breaker: consecutive outage errors (connection refused, 429, 5xx, 529,
    timeout) open it; judging then pauses, one probe at a time, instead of burning samples as
    failed judgements."""

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
        if self.backend in ("anthropic", "openai"):
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
    problems = [_error_line(e) for e in errors if e not in unknown]
    if unknown:
        names = ", ".join(repr(e["loc"][0]) for e in unknown)
        verb = "is not an option" if len(unknown) == 1 else "are not options"
        problems.insert(0, f"{names} {verb} of {owner} (options: {', '.join(known)})")
    return "; ".join(problems)


@functools.cache
def _judge_options_model(backend: str) -> type[BaseModel]:
    """The model `create_judge` validates `judge.options` with. The LLM modules are imported for
    their own backend only: they pull in their SDKs."""
    if backend == "anthropic":
        from monitor.judge.anthropic_judge import AnthropicJudgeConfig

        return AnthropicJudgeConfig
    if backend == "openai":
        from monitor.judge.openai_judge import OpenAIJudgeConfig

        return OpenAIJudgeConfig
    # The lexical judge takes its options as keyword arguments: the model is its signature.
    hints = get_type_hints(LexicalJudge.__init__)
    fields: dict[str, Any] = {
        name: (hints[name], param.default)
        for name, param in inspect.signature(LexicalJudge).parameters.items()
    }
    return create_model("LexicalJudgeOptions", __config__=ConfigDict(extra="forbid"), **fields)


class GoldenConfig(_Section):
    """Scheduled golden replay inside `rag-monitor run`; off unless `file` and `target` are set."""

    file: Path | None = None
    target: str | None = Field(None, description="http(s) URL of the RAG service, or module:function")
    interval_seconds: float = Field(3600.0, gt=0)
    k: int = Field(5, gt=0)
    baseline: Path | None = None
    concurrency: int = Field(8, gt=0)
    baselines: list[Literal["oracle", "no_context"]] = Field(
        default_factory=list,
        description="also replay with the labelled chunks as context (oracle) and with none (no_context)",
    )
    report_dir: Path | None = Field(None, description="write each replay's JSON report here")
    trigger_token_file: Path | None = Field(
        None, description="bearer token for POST /golden/replay on the metrics port (unset: no endpoint)"
    )
    trigger_token: SecretStr | None = Field(
        None, description="the token itself, for RAGMON_GOLDEN__TRIGGER_TOKEN (prefer the file)"
    )
    replay_secret_file: Path | None = Field(
        None,
        description="shared secret signing the X-RAG-Replay mark, so the service keeps replays out of "
        "production metrics (unset: replay_secret, else $RAGMON_REPLAY_SECRET(_FILE), else unmarked)",
    )
    replay_secret: SecretStr | None = Field(
        None, description="the secret itself, for RAGMON_GOLDEN__REPLAY_SECRET (prefer the file)"
    )

    @model_validator(mode="after")
    def _trigger_needs_a_replay(self) -> GoldenConfig:
        if (self.trigger_token_file is not None or self.trigger_token) and not (self.file and self.target):
            raise ValueError("a golden trigger token needs golden.file and golden.target (what to replay)")
        return self


class SamplingConfig(SamplingPolicy):
    """Per-query-type rates, priority signals and per-window floors (monitor/ingest/sampler.py)."""


class AlertsConfig(AlertSinksConfig):
    """Where alerts go (monitor/outputs/alerts.py) and the drift detectors that raise them
    (monitor/drift.py)."""

    drift: DriftPolicy = Field(default_factory=DriftPolicy)


class MetricsConfig(_Section):
    host: str = Field(
        "0.0.0.0",
        description="bind address of /metrics, /healthz, /readyz and the golden trigger: all interfaces, "
        "for Prometheus and the kubelet in another network namespace; 127.0.0.1 keeps it local",
    )
    port: int = Field(9612, ge=0, le=65535)
    timeout_seconds: float = Field(
        5.0, gt=0, description="a client that has not sent its whole request by then is dropped"
    )
    workers: int = Field(4, gt=0, description="threads that answer requests (idle clients hold none)")
    max_connections: int = Field(
        4096,
        gt=0,
        description="open connections; beyond, the longest-waiting is closed (at most half the fd limit)",
    )


class ResultsConfig(_Section):
    file: Path | None = None
    file_max_bytes: int = Field(
        100 * 1024 * 1024, ge=0, description="rotate the results file past this size (0: never)"
    )
    file_keep: int = Field(5, ge=0, description="rotated results files kept: file.1 (newest) .. file.N")
    topic: str | None = Field(
        "rag-monitor-judgements",
        description="keyed by query type; the drift stage reads it. Unset: <kafka.group_id>-judgements; "
        'null or "": no results topic (and no drift)',
    )

    @field_validator("topic")
    @classmethod
    def _empty_is_off(cls, topic: str | None) -> str | None:
        """`RAGMON_RESULTS__TOPIC=` (an environment variable cannot be null) turns it off too."""
        return topic or None


Role = Literal["all", "ingest", "judge", "drift"]

# Settings section -> field -> suffix: the names derived from kafka.group_id when unset (a new
# internal topic or group adds its line here).
DERIVED_NAMES: dict[str, dict[str, str]] = {
    "pipeline": {"samples_topic": "samples", "judge_group_id": "judge", "drift_group_id": "drift"},
    "results": {"topic": "judgements"},
}


class PipelineConfig(_Section):
    """The two stages and the durable samples topic between them (docs/contract.md, Pipeline)."""

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
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: top level must be a mapping")
        data = loaded or {}
    token = _FLAGS.set(_drop_none(overrides or {}))
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
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


def _describe(exc: ValidationError) -> str:
    return "\n".join(["invalid configuration:", *(f"  {_error_line(err)}" for err in exc.errors())])


def _error_line(err: ErrorDetails) -> str:
    where = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")  # our own validators name their fields
    return f"{where}: {msg}" if where else msg
