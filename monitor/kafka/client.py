"""Settings every Kafka client of the sidecar shares (consumer, producer, admin), and topic
administration.

One place builds the connection keyword arguments, so security settings (TLS, SASL) apply to every
client alike and no client can be forgotten.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import ssl
from collections.abc import Collection
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.helpers import create_ssl_context
from pydantic import SecretStr

from monitor.kafka.config import KafkaConfig

_CLIENTS = (AIOKafkaConsumer, AIOKafkaProducer, AIOKafkaAdminClient)


@functools.cache
def _takes(client: type) -> frozenset[str]:
    """The keyword arguments an aiokafka client's constructor takes."""
    return frozenset(inspect.signature(client).parameters)


def client_kwargs(
    config: KafkaConfig, *, client: type, client_id: str | None = None, fixed: Collection[str] = ()
) -> dict[str, Any]:
    """Connection keyword arguments for `client` (aiokafka's consumer, producer or admin client),
    whose caller sets the `fixed` arguments itself.

    `kafka.extra` settings go to the clients that take them: a consumer's setting (say
    `isolation_level`) is not given to the producer, whose constructor would refuse it.

    Raises ValueError naming the key when an `extra` setting is one the sidecar sets itself or one
    no aiokafka client takes (a typo), and naming the field and file when a certificate, key or
    secret cannot be loaded.
    """
    kwargs: dict[str, Any] = {
        "bootstrap_servers": config.bootstrap_servers,
        "client_id": client_id or config.client_id,
        "security_protocol": config.security_protocol,
    }
    for key, value in config.extra.items():
        if key in fixed or key in kwargs:
            field = f": use kafka.{key}" if key in KafkaConfig.model_fields else ""
            raise ValueError(f"kafka.extra.{key} is set by the sidecar itself{field}")
        if not any(key in _takes(c) for c in _CLIENTS):
            raise ValueError(
                f"kafka.extra.{key} is not a setting of aiokafka's consumer, producer or admin client"
            )
        if key in _takes(client):
            kwargs[key] = value
    if config.security_protocol in ("SSL", "SASL_SSL"):
        kwargs["ssl_context"] = _ssl_context(
            config.ssl_cafile,
            config.ssl_certfile,
            config.ssl_keyfile,
            config.ssl_keyfile_password,
            config.ssl_keyfile_password_file,
            config.ssl_check_hostname,
        )
    if config.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        kwargs["sasl_mechanism"] = config.sasl_mechanism
        kwargs["sasl_plain_username"] = config.sasl_username
        kwargs["sasl_plain_password"] = _secret(
            config.sasl_password, config.sasl_password_file, "sasl_password_file"
        )
    return kwargs


# Keyed by the settings, so the consumer, producer and admin client share one context and the files
# are read once; a failure is not cached.
@functools.lru_cache(maxsize=8)
def _ssl_context(
    cafile: Path | None,
    certfile: Path | None,
    keyfile: Path | None,
    password: SecretStr | None,
    password_file: Path | None,
    check_hostname: bool,
) -> ssl.SSLContext:
    try:
        context: ssl.SSLContext = create_ssl_context(cafile=cafile)  # None: the system CAs
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"kafka.ssl_cafile {cafile}: no usable CA certificate ({_reason(exc)})") from None
    if certfile is not None:
        key_password = _secret(password, password_file, "ssl_keyfile_password_file") or ""
        try:
            # The loading create_ssl_context would do, apart so that an error names the client pair,
            # with a callable password: given None, OpenSSL prompts on the terminal for an encrypted key.
            context.load_cert_chain(certfile, keyfile, password=lambda: key_password)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"kafka.ssl_certfile {certfile} / ssl_keyfile {keyfile}: cannot load the client "
                f"certificate and key ({_reason(exc)}): not PEM, not a pair, or a wrong or missing "
                "ssl_keyfile_password"
            ) from None
    context.check_hostname = check_hostname
    return context


def _secret(value: SecretStr | None, file: Path | None, field: str) -> str | None:
    """The secret, or its file's text without the final newline that mounted secrets often have."""
    if value is not None:
        return value.get_secret_value()
    if file is None:
        return None
    try:
        text = file.read_bytes().decode()
    except OSError as exc:
        raise ValueError(f"kafka.{field} {file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"kafka.{field} {file}: not UTF-8 text") from None
    secret = text.rstrip("\r\n")
    if not secret:
        raise ValueError(f"kafka.{field} {file}: empty")
    return secret


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc)


async def ensure_topics(config: KafkaConfig, topics: list[str], partitions: int = 3) -> None:
    """Create topics that do not exist (the demo and tests; production topics are provisioned)."""
    admin = AIOKafkaAdminClient(
        **client_kwargs(config, client=AIOKafkaAdminClient, client_id=f"{config.client_id}-admin")
    )
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [NewTopic(t, partitions, 1) for t in topics if t not in existing]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):  # a concurrent creator won
                await admin.create_topics(new)
    finally:
        await admin.close()
