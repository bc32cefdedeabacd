"""The `kafka` config section: the input topic, the consumer group, and the connection every
client of the sidecar shares (TLS, SASL), checked at start-up (docs/contract.md, Kafka connection)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator


# The wire format of the input topic's messages; auto tells them apart (no docstring: it would
# become the description of `kafka.encoding` in the chart's generated values schema).
class Encoding(StrEnum):
    AUTO = "auto"
    OTLP_PROTO = "otlp_proto"
    OTLP_JSON = "otlp_json"
    JSON = "json"


class KafkaConfig(BaseModel):
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
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

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
