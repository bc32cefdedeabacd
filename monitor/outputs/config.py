"""The outputs' config sections: `alerts` sinks (the drift section adds its detectors to them),
the `metrics` server, and the `results` file and topic. (`events` lives beside its sink, in
monitor/outputs/evaluation_events.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
