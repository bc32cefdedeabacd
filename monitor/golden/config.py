"""The golden replay's config: the sidecar's `golden` section (the scheduled replay) and the
`--config` file of `rag-monitor replay` (the same replay as a batch job)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from monitor.golden.comparison import GateConfig
from monitor.golden.intervals import IntervalConfig
from monitor.outputs.config import PushgatewayConfig
from monitor.plumbing import replay_mark


class ResponseMapping(BaseModel):
    """Dotted paths into the target's JSON response (``data.result.answer``; list items by index)."""

    model_config = ConfigDict(extra="forbid")

    answer: str = "answer"
    chunks: str = "chunks"
    chunk_id: str = "id"
    chunk_content: str | None = "content"
    chunk_score: str | None = "score"


class ContextMapping(BaseModel):
    """Where given context goes in the request: a dotted path into the body (null: the target
    cannot take context, and the oracle/no-context baselines are reported as not measured), and
    the names of each chunk's two keys."""

    model_config = ConfigDict(extra="forbid")

    field: str | None = "context"
    chunk_id: str = "id"
    chunk_content: str = "content"


class HttpTargetConfig(BaseModel):
    """How to talk to an HTTP RAG endpoint. The auth secret is read from an environment variable
    (never from a file in the repository or a flag, which would end up in shell history)."""

    model_config = ConfigDict(extra="forbid")

    url: str = ""
    method: str = "POST"
    request_template: Any = Field(default_factory=lambda: {"query": "{query}", "k": "{k}"})
    response: ResponseMapping = Field(default_factory=ResponseMapping)
    context: ContextMapping = Field(default_factory=ContextMapping)
    headers: dict[str, str] = Field(default_factory=dict)
    auth_header: str = "Authorization"
    auth_env: str | None = None  # name of the env var holding the header value
    auth_scheme: str | None = None  # e.g. "Bearer": the value is sent as "Bearer <env value>"
    replay_secret_file: Path | None = Field(
        None, description="the shared replay secret that signs the X-RAG-Replay mark (a mounted Secret)"
    )
    replay_secret_env: str = Field(
        replay_mark.SECRET_ENV, description="else the env var holding it (RAGMON_REPLAY_SECRET)"
    )
    timeout_seconds: float = Field(10.0, gt=0)
    retries: int = Field(2, ge=0)
    backoff_seconds: float = Field(0.2, ge=0)


class ReplayRunConfig(BaseModel):
    """How a golden replay runs and is gated: one model for the sidecar's `golden` section and
    `replay`'s `--config` file (where each flag given wins), so the two cannot drift apart."""

    model_config = ConfigDict(extra="forbid")

    k: int = Field(5, gt=0, description="chunks asked for and scored (recall@k…)")
    concurrency: int = Field(8, gt=0, description="requests in flight to the target")
    baselines: list[Literal["oracle", "no_context"]] = Field(
        default_factory=list,
        description="also replay with the labelled chunks as context (oracle) and with none (no_context)",
    )
    gate: GateConfig = Field(default_factory=GateConfig)
    intervals: IntervalConfig = Field(default_factory=IntervalConfig)


class GoldenConfig(ReplayRunConfig):
    """Scheduled golden replay inside `rag-monitor run`; off unless `file` and `target` are set."""

    file: Path | None = None
    target: str | None = Field(None, description="http(s) URL of the RAG service, or module:function")
    interval_seconds: float = Field(3600.0, gt=0)
    baseline: Path | None = None
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


class ReplayConfig(ReplayRunConfig):
    """`--config` file of `replay`: the run as the sidecar's `golden` section has it, plus how to
    talk to an HTTP target, the judge's options and where to push the results."""

    target: HttpTargetConfig = Field(default_factory=HttpTargetConfig)
    judge_options: dict[str, Any] = Field(default_factory=dict)
    pushgateway: PushgatewayConfig = Field(default_factory=PushgatewayConfig)
