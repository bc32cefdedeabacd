"""The outputs' config sections: `alerts` sinks (the drift section adds its detectors to them),
the `metrics` server, the `results` file and topic, and the verdict exporters (`events`: log
events, the judgement span, Phoenix annotations)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from monitor.llm.usage import DEFAULT_PRICES, Price

TRACE_ID_PLACEHOLDER = "{trace_id}"
# Query parameters that carry a credential: a template goes verbatim into every alert, which
# people and chat channels see, so it must not hold one.
_CREDENTIAL_PARAM = re.compile(r"token|secret|passw|api[_-]?key|auth|session|sig", re.IGNORECASE)


class AlertSinksConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    alertmanager_url: str | None = Field(None, description="Alertmanager base URL (API v2 is used)")
    webhook_url: str | None = Field(None, description="POSTed a JSON object per transition")
    dashboard_url: str | None = Field(None, description="put in every alert's annotations")
    generator_url: str | None = Field(None, description="the alerts' generatorURL; default: dashboard_url")
    resend_seconds: float = Field(60.0, gt=0)
    timeout_seconds: float = Field(5.0, gt=0)
    attempts: int = Field(3, ge=1, description="tries per send before it counts as failed")
    trace_url_template: str | None = Field(
        None,
        description="link to one trace in a tracing UI (Tempo, Jaeger, Grafana Explore), "
        "{trace_id} replaced by a hex trace id; drift alerts link their example traces with it. "
        "http(s) only, no credentials (it is shown in every alert)",
    )

    @field_validator("trace_url_template")
    @classmethod
    def _trace_url(cls, template: str | None) -> str | None:
        """Checked at load, so a bad template fails the start, not every alert."""
        if not template:
            return None
        if TRACE_ID_PLACEHOLDER not in template:
            raise ValueError(f"must contain the placeholder {TRACE_ID_PLACEHOLDER}")
        if any(ord(c) < 0x21 or ord(c) == 0x7F for c in template):
            raise ValueError("must not contain spaces or control characters")
        url = urlsplit(template.replace(TRACE_ID_PLACEHOLDER, "0"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if url.username is not None or url.password is not None:
            raise ValueError("must not carry credentials (user:password@): alerts show it")
        for name, _ in parse_qsl(url.query, keep_blank_values=True):
            if _CREDENTIAL_PARAM.search(name):
                raise ValueError(f"query parameter {name!r} looks like a credential: alerts show it")
        return template


class MetricsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

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
    service_prices: dict[str, Price] = Field(
        default_factory=lambda: dict(DEFAULT_PRICES),
        description="USD per million tokens (input, output) of the RAG service's own generator models, for "
        "ragmon_generator_cost_usd_total (a key matches a model exactly or as its longest prefix); "
        "a model missing: its tokens are counted, its cost is not (ragmon_generator_unpriced_total)",
    )


class PhoenixConfig(BaseModel):
    """`events.phoenix`: each check also posted to Phoenix as an annotation on the judged root span
    (`monitor/outputs/phoenix_annotations.py`). Off unless `url` is set."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, description="Phoenix base URL, e.g. http://phoenix:6006; None = off")
    token_file: Path | None = Field(
        None, description="Phoenix API key, sent as a bearer token: a file (e.g. a mounted Kubernetes secret)"
    )
    token: SecretStr | None = Field(
        None, description="the key itself, for RAGMON_EVENTS__PHOENIX__TOKEN (prefer the file)"
    )
    batch_size: int = Field(100, gt=0, le=1000, description="annotations a request")
    max_queue_size: int = Field(4096, gt=0, description="annotations pending; beyond: dropped")
    max_queue_bytes: int = Field(4 << 20, gt=0, description="their bytes; beyond: dropped")
    timeout_seconds: float = Field(10.0, gt=0, description="per request")
    attempts: int = Field(5, ge=1, description="tries of a batch Phoenix fails (5xx, 429, no answer)")
    span_wait_seconds: float = Field(
        300.0, ge=0, description="how long an annotation waits for Phoenix to have its span (404)"
    )
    span_retry_seconds: float = Field(5.0, gt=0, description="between tries of an annotation waiting so")

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        return _check_url(v, "http://phoenix:6006")

    @model_validator(mode="after")
    def _one_token(self) -> PhoenixConfig:
        if self.token_file is not None and self.token is not None:
            raise ValueError("give token_file or token, not both")
        return self

    def bearer(self) -> str | None:
        """The API key (the file's content, whitespace stripped), None without one. ValueError,
        naming the file but never its content, when it cannot be read."""
        if self.token is not None:
            return self.token.get_secret_value()
        if self.token_file is None:
            return None
        try:
            return self.token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
            raise ValueError(f"cannot read events.phoenix.token_file {self.token_file}: {reason}") from None


class EventsConfig(BaseModel):
    """`events` section: verdicts into the tracing UI. Log events (`mode` logs or both) go to
    `endpoint`, the judgement span (`mode` span or both) to `traces_endpoint`, annotations to
    `phoenix.url`; each is off while its URL is unset."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["logs", "span", "both"] = Field(
        "logs", description="logs: gen_ai.evaluation.result log events; span: a rag.judgement span; both"
    )
    endpoint: str | None = Field(
        None, description="OTLP logs URL, e.g. http://collector:4318/v1/logs; None = off"
    )
    traces_endpoint: str | None = Field(
        None, description="OTLP traces URL for the judgement span, e.g. http://collector:4318/v1/traces"
    )
    protocol: Literal["http", "grpc"] = Field(
        "http", description="OTLP transport of both: http (protobuf) or grpc (URL http://host:4317)"
    )
    # Often credentials (Authorization, API keys): kept out of repr, and only names are ever logged.
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    timeout_seconds: float = Field(10.0, gt=0, description="per export request, retries included")
    max_queue_size: int = Field(
        2048, gt=0, description="log events, or spans, waiting for export (each exporter); beyond: dropped"
    )
    max_queue_bytes: int = Field(8 << 20, gt=0, description="their bytes (each exporter); beyond: dropped")
    export_interval_seconds: float = Field(1.0, gt=0, description="longest wait before a batch is sent")
    compression: Literal["none", "gzip"] = "none"
    resource_attributes: dict[str, str] = Field(default_factory=lambda: {"service.name": "rag-monitor"})
    include_text: bool = Field(
        False, description="send claim text, quotes and chunk ids (cleaned, clipped); off: verdicts only"
    )
    max_text_chars: int = Field(300, ge=16, le=4096, description="each text clipped to this")
    max_claims: int = Field(50, ge=0, le=1000, description="claim events a judgement span carries")
    phoenix: PhoenixConfig = Field(default_factory=PhoenixConfig)

    @field_validator("endpoint", "traces_endpoint")
    @classmethod
    def _http_urls(cls, v: str | None) -> str | None:
        return _check_url(v, "http://collector:4318/v1/logs")

    @model_validator(mode="after")
    def _span_needs_traces_endpoint(self) -> EventsConfig:
        if self.mode != "logs" and self.traces_endpoint is None:
            raise ValueError(f"mode {self.mode} needs traces_endpoint (OTLP traces URL)")
        return self

    @property
    def logs_on(self) -> bool:
        return self.mode != "span" and self.endpoint is not None

    @property
    def span_on(self) -> bool:
        return self.mode != "logs" and self.traces_endpoint is not None

    @property
    def text_limit(self) -> int | None:
        """Characters of each text sent, None: no text at all."""
        return self.max_text_chars if self.include_text else None

    def redacted(self) -> dict[str, object]:
        """The config as a dict fit for a log line: header values, the token and URL credentials
        masked."""
        out = self.model_dump(mode="json")
        out["headers"] = dict.fromkeys(self.headers, "***")
        for key in ("endpoint", "traces_endpoint"):
            url = getattr(self, key)
            out[key] = safe_url(url) if url else None
        phoenix = out["phoenix"]
        assert isinstance(phoenix, dict)
        phoenix["url"] = safe_url(self.phoenix.url) if self.phoenix.url else None
        return out


def _check_url(v: str | None, example: str) -> str | None:
    if v is None:
        return None
    parts = urlsplit(v)
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ValueError("has an invalid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s) URL such as {example}")
    return v


def safe_url(url: str) -> str:
    """The URL without credentials or query string, for log lines."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class ResultsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

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


DEFAULT_PUSH_JOB = "rag-monitor-replay"


class PushgatewayConfig(BaseModel):
    """Where `replay` pushes its `ragmon_golden_*` gauges: a batch job (a CronJob pod) is gone
    before Prometheus could scrape it, so its results go to a Pushgateway, which Prometheus scrapes
    with `honor_labels: true` (the pushed `job` and `instance` labels are kept)."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(
        None, description="Pushgateway base URL, e.g. http://pushgateway:9091 (unset: no push)"
    )
    job: str = Field(DEFAULT_PUSH_JOB, min_length=1, description="`job` label of the pushed group")
    instance: str | None = Field(
        None,
        min_length=1,
        description="`instance` label of the pushed group (default: the golden file's name)",
    )
    auth_env: str | None = Field(
        None, min_length=1, description="environment variable holding basic auth as user:password"
    )
    timeout_seconds: float = Field(10.0, gt=0, description="seconds for the push request")
