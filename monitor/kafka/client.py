"""Settings every Kafka client of the sidecar shares (consumer, producer, admin), and topic
administration.

One place builds the connection keyword arguments, so security settings (TLS, SASL) apply to every
client alike and no client can be forgotten.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.helpers import create_ssl_context
from pydantic import SecretStr

from monitor.config import KafkaConfig


def client_kwargs(config: KafkaConfig, *, client_id: str | None = None) -> dict[str, Any]:
    """Connection keyword arguments for any aiokafka client.

    Raises ValueError, naming the field and file, when a certificate, key or secret cannot be loaded.
    """
    kwargs: dict[str, Any] = {
        "bootstrap_servers": config.bootstrap_servers,
        "client_id": client_id or config.client_id,
        "security_protocol": config.security_protocol,
        **config.extra,
    }
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
    admin = AIOKafkaAdminClient(**client_kwargs(config, client_id=f"{config.client_id}-admin"))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [NewTopic(t, partitions, 1) for t in topics if t not in existing]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):  # a concurrent creator won
                await admin.create_topics(new)
    finally:
        await admin.close()
