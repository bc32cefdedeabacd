"""Kafka security from the config: TLS and mutual TLS to a real broker, validation, and secrets.

The embedded broker (tansu) speaks plaintext; stunnel terminates TLS in front of it with certificates
made here by the `openssl` CLI, and the broker advertises the stunnel port, so the connections made
after bootstrap (partition leader, group coordinator) go through TLS too.

SASL is checked at the configuration and client-argument level only: tansu 0.6 does SCRAM with
`--authentication`, but its users are created through the broker (`tansu user create`), which then
needs an authenticated connection already, and a memory-storage broker has no user to start from.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from pydantic import ValidationError
from support import eventually

from monitor.app.config import ConfigError, Settings, load_settings
from monitor.contracts.metrics import Metrics
from monitor.demo.broker import EmbeddedBroker, free_port
from monitor.kafka.client import client_kwargs, ensure_topics
from monitor.kafka.config import KafkaConfig
from monitor.kafka.consumer import KafkaSource, SourceSpec
from monitor.kafka.offsets import OffsetTracker
from monitor.kafka.producer import KafkaOutput

SECRET = "s3cr3t-Pa55-do-not-print"
KEY_PASSWORD = "k3y-Pa55-do-not-print"
TIMEOUT = 30.0  # seconds for any one Kafka exchange; a failure must come well before it


@dataclass(frozen=True)
class Pki:
    ca: Path
    other_ca: Path  # signed nothing here: verification against it must fail
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_key_encrypted: Path  # the client key under KEY_PASSWORD


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")

    def openssl(command: str) -> None:  # arguments without spaces, so split() is enough
        subprocess.run(["openssl", *command.split()], cwd=d, check=True, capture_output=True)

    new_key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    for ca in ("ca", "other-ca"):
        openssl(f"req -x509 {new_key} -keyout {ca}.key -out {ca}.pem -days 2 -subj /CN=test-{ca}")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for leaf in ("server", "client"):
        openssl(f"req {new_key} -keyout {leaf}.key -out {leaf}.csr -subj /CN={leaf}")
        openssl(
            f"x509 -req -in {leaf}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2"
            f" -extfile {leaf}.ext -out {leaf}.pem"
        )
    openssl(f"pkey -in client.key -aes256 -passout pass:{KEY_PASSWORD} -out client-encrypted.key")
    return Pki(
        d / "ca.pem",
        d / "other-ca.pem",
        d / "server.pem",
        d / "server.key",
        d / "client.pem",
        d / "client.key",
        d / "client-encrypted.key",
    )


@dataclass(frozen=True)
class TlsBroker:
    bootstrap_servers: str
    port: int
    stunnel_log: Path


@contextmanager
def tls_broker(pki: Pki, workdir: Path, *, mutual: bool) -> Iterator[TlsBroker]:
    """A broker reachable only through stunnel's TLS port, which it also advertises."""
    stunnel = shutil.which("stunnel4") or shutil.which("stunnel")
    if stunnel is None:
        pytest.fail("stunnel is not installed: `make debs` installs it (Debian package stunnel4)")
    port = free_port()
    log = workdir / "stunnel.log"
    with EmbeddedBroker(advertised_port=port, log_file=workdir / "tansu.log") as broker:
        conf = workdir / "stunnel.conf"
        conf.write_text(
            "foreground = yes\npid =\ndebug = info\n[kafka]\n"
            f"accept = 127.0.0.1:{port}\nconnect = {broker.bootstrap_servers}\n"
            f"cert = {pki.server_cert}\nkey = {pki.server_key}\n"
            + (f"CAfile = {pki.ca}\nverify = 2\n" if mutual else "")
        )
        with log.open("wb") as out:
            proc = subprocess.Popen([stunnel, str(conf)], stdout=out, stderr=out)
        try:
            _wait_for_port(port, proc, log)
            yield TlsBroker(f"127.0.0.1:{port}", port, log)
        finally:
            proc.terminate()
            proc.wait(timeout=5)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"stunnel exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"stunnel did not listen on {port}: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def tls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    with tls_broker(pki, tmp_path_factory.mktemp("tls"), mutual=False) as b:
        yield b


@pytest.fixture(scope="module")
def mtls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    with tls_broker(pki, tmp_path_factory.mktemp("mtls"), mutual=True) as b:
        yield b


async def _round_trip(config: KafkaConfig) -> list[tuple[str, int]]:
    """Create a topic, produce a message, read it back in a consumer group, all with
    `client_kwargs(config)`; returns the broker addresses the metadata advertised."""
    topic = f"tls-{uuid.uuid4().hex[:10]}"
    async with asyncio.timeout(TIMEOUT):
        await ensure_topics(config, [topic], partitions=1)
        producer = AIOKafkaProducer(
            request_timeout_ms=5000, **client_kwargs(config, client=AIOKafkaProducer, client_id="t-out")
        )
        try:
            await producer.start()
            await producer.send_and_wait(topic, b"over tls", key=b"k")
            advertised = sorted((b.host, b.port) for b in producer.client.cluster.brokers())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            group_id=f"g-{topic}",
            auto_offset_reset="earliest",
            **client_kwargs(config, client=AIOKafkaConsumer, client_id="t-in"),
        )
        try:
            await consumer.start()
            msg = await consumer.getone()
        finally:
            await consumer.stop()
    assert (msg.key, msg.value) == (b"k", b"over tls")
    return advertised


async def _connect_fails(config: KafkaConfig) -> None:
    producer = AIOKafkaProducer(
        request_timeout_ms=3000, **client_kwargs(config, client=AIOKafkaProducer, client_id="t-fail")
    )
    try:
        with pytest.raises(KafkaConnectionError):
            async with asyncio.timeout(TIMEOUT):
                await producer.start()
    finally:
        await producer.stop()


async def test_produce_and_consume_through_tls(tls: TlsBroker, pki: Pki) -> None:
    config = KafkaConfig(bootstrap_servers=tls.bootstrap_servers, security_protocol="SSL", ssl_cafile=pki.ca)
    assert await _round_trip(config) == [("127.0.0.1", tls.port)]  # only the TLS port, ever
    kwargs = client_kwargs(config, client=AIOKafkaProducer)
    assert kwargs["security_protocol"] == "SSL" and kwargs["ssl_context"].check_hostname
    other = client_kwargs(config, client=AIOKafkaConsumer, client_id="other")
    assert other["ssl_context"] is kwargs["ssl_context"]  # cached


async def test_tls_rejects_a_broker_signed_by_another_ca(
    tls: TlsBroker, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    config = KafkaConfig(
        bootstrap_servers=tls.bootstrap_servers, security_protocol="SSL", ssl_cafile=pki.other_ca
    )
    with caplog.at_level(logging.ERROR, logger="aiokafka"):
        await _connect_fails(config)
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text


async def test_mutual_tls_needs_the_client_certificate(mtls: TlsBroker, pki: Pki, tmp_path: Path) -> None:
    password_file = tmp_path / "key-password"
    password_file.write_text(KEY_PASSWORD + "\n")  # as `kubectl create secret --from-file` leaves it
    base: dict[str, Any] = {
        "bootstrap_servers": mtls.bootstrap_servers,
        "security_protocol": "SSL",
        "ssl_cafile": pki.ca,
    }
    await _round_trip(KafkaConfig(**base, ssl_certfile=pki.client_cert, ssl_keyfile=pki.client_key))
    await _round_trip(
        KafkaConfig(
            **base,
            ssl_certfile=pki.client_cert,
            ssl_keyfile=pki.client_key_encrypted,
            ssl_keyfile_password_file=password_file,
        )
    )
    await _connect_fails(KafkaConfig(**base))
    # stunnel says why it refused: at once ("Peer certificate required"), and with the TLS error
    # ("peer did not return a certificate") once the handshake ends; its log is written async.
    reasons = ("Peer certificate required", "peer did not return a certificate")
    await eventually(lambda: any(r in mtls.stunnel_log.read_text() for r in reasons), within=10)


def test_certificate_errors_name_the_file_and_never_the_password(pki: Pki, tmp_path: Path) -> None:
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(ValueError, match=rf"ssl_cafile {not_pem}: no usable CA certificate"):
        client_kwargs(KafkaConfig(security_protocol="SSL", ssl_cafile=not_pem), client=AIOKafkaProducer)
    wrong = KafkaConfig(
        security_protocol="SSL",
        ssl_certfile=pki.client_cert,
        ssl_keyfile=pki.client_key_encrypted,
        ssl_keyfile_password=SECRET,  # not the key's password
    )
    with pytest.raises(ValueError, match=rf"ssl_keyfile {pki.client_key_encrypted}: cannot load") as err:
        client_kwargs(wrong, client=AIOKafkaProducer)
    assert SECRET not in str(err.value)
    # An encrypted key without a password fails too, instead of OpenSSL prompting on the terminal.
    with pytest.raises(ValueError, match="wrong or missing ssl_keyfile_password"):
        client_kwargs(
            KafkaConfig(**{**wrong.model_dump(), "ssl_keyfile_password": None}), client=AIOKafkaProducer
        )
    no_check = KafkaConfig(
        security_protocol="SASL_SSL",
        ssl_cafile=pki.ca,
        ssl_check_hostname=False,
        sasl_username="svc",
        sasl_password=SECRET,
    )
    assert client_kwargs(no_check, client=AIOKafkaProducer)["ssl_context"].check_hostname is False


def test_sasl_password_from_a_file_and_from_the_environment(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_file = tmp_path / "sasl-password"
    secret_file.write_text(SECRET + "\n")
    settings = load_settings(
        None,
        {
            "kafka": {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "rag-monitor",
                "sasl_password_file": str(secret_file),
            }
        },
    )
    kwargs = client_kwargs(settings.kafka, client=AIOKafkaProducer)
    assert {k: kwargs[k] for k in ("security_protocol", "sasl_mechanism", "sasl_plain_username")} == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "rag-monitor",
    }
    assert kwargs["sasl_plain_password"] == SECRET
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)  # system CAs: managed Kafka

    monkeypatch.setenv("RAGMON_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("RAGMON_KAFKA__SSL_CAFILE", str(pki.ca))
    monkeypatch.setenv("RAGMON_KAFKA__SASL_USERNAME", "rag-monitor")
    monkeypatch.setenv("RAGMON_KAFKA__SASL_PASSWORD", SECRET)
    # A flag as well: the flags are merged through a dump of the settings, which must keep the secret.
    settings = load_settings(None, {"kafka": {"bootstrap_servers": "kafka:9093"}})
    kwargs = client_kwargs(settings.kafka, client=AIOKafkaProducer)
    assert (kwargs["sasl_mechanism"], kwargs["sasl_plain_password"]) == ("PLAIN", SECRET)
    assert settings.kafka.ssl_cafile == pki.ca and kwargs["bootstrap_servers"] == "kafka:9093"
    for text in (repr(settings), str(settings), settings.model_dump_json(), str(settings.model_dump())):
        assert SECRET not in text


@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        ({"security_protocol": "SSL", "ssl_cafile": "{tmp}/missing.pem"}, "kafka.ssl_cafile: cannot read"),
        (
            {"security_protocol": "SASL_SSL", "sasl_username": "u", "sasl_password_file": "{tmp}/empty"},
            "kafka.sasl_password_file: {tmp}/empty is empty",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_username": "u"},
            "SASL_SSL needs sasl_password or sasl_password_file",
        ),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_password": SECRET},
            "SASL_PLAINTEXT needs sasl_username",
        ),
        (
            {
                "security_protocol": "SASL_SSL",
                "sasl_username": "u",
                "sasl_password": SECRET,
                "sasl_password_file": "{tmp}/secret",
            },
            "give sasl_password or sasl_password_file, not both",
        ),
        (
            {"ssl_cafile": "{tmp}/ca.pem"},
            "ssl_cafile: only used with SSL or SASL_SSL, ignored with PLAINTEXT",
        ),
        (
            {"security_protocol": "SSL", "ssl_check_hostname": False, "sasl_password": SECRET},
            "sasl_password: only used with SASL_PLAINTEXT or SASL_SSL, ignored with SSL",
        ),
        (
            {"security_protocol": "SSL", "ssl_certfile": "{tmp}/ca.pem"},
            "ssl_certfile and ssl_keyfile go together",
        ),
        (
            {"security_protocol": "SSL", "ssl_keyfile_password": SECRET},
            r"ssl_keyfile_password\(_file\) given without ssl_keyfile",
        ),
        (
            {"extra": {"sasl_plain_password": SECRET}},
            "extra.sasl_plain_password is not passed to aiokafka: use kafka.sasl_password",
        ),
        ({"extra": {"security_protocol": "SSL"}}, "use kafka.security_protocol"),
    ],
)
def test_bad_security_settings_name_the_field_and_never_the_secret(
    kafka: dict[str, Any], message: str, tmp_path: Path, pki: Pki
) -> None:
    (tmp_path / "empty").touch()
    (tmp_path / "secret").write_text(SECRET)
    shutil.copy(pki.ca, tmp_path / "ca.pem")
    kafka = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in kafka.items()}
    with pytest.raises(ConfigError, match=message.format(tmp=tmp_path)) as err:
        load_settings(None, {"kafka": kafka})
    assert len(str(err.value).splitlines()) == 2  # the heading and one line naming the field
    # Built directly, pydantic's own error text must not show the secret either.
    for build in (lambda: KafkaConfig(**kafka), lambda: Settings(kafka=kafka)):
        with pytest.raises(ValidationError) as raw:
            build()
        assert SECRET not in str(raw.value)
    assert SECRET not in str(err.value)


# -- kafka.extra ---------------------------------------------------------------------------------


async def test_extra_settings_go_to_the_clients_that_take_them() -> None:
    """A consumer's setting reaches the consumer and is not given to the producer or the admin
    client, whose constructors would refuse it; a setting every client takes reaches each."""
    config = KafkaConfig(extra={"isolation_level": "read_committed", "request_timeout_ms": 7000})
    consumer = client_kwargs(config, client=AIOKafkaConsumer)
    producer = client_kwargs(config, client=AIOKafkaProducer)
    assert consumer["isolation_level"] == "read_committed" and "isolation_level" not in producer
    assert consumer["request_timeout_ms"] == producer["request_timeout_ms"] == 7000
    output = KafkaOutput(config)  # builds the real producer: no TypeError
    await output.close()
    built = AIOKafkaConsumer(**consumer)
    assert built._isolation_level == "read_committed"
    await built.stop()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"max_poll_records": 5},
            "kafka.extra.max_poll_records is set by the sidecar itself: use kafka.max_poll_records",
        ),
        ({"enable_auto_commit": True}, "kafka.extra.enable_auto_commit is set by the sidecar itself$"),
        ({"client_id": "x"}, "kafka.extra.client_id is set by the sidecar itself: use kafka.client_id"),
        (
            {"fetch_min_byts": 1},
            "kafka.extra.fetch_min_byts is not a setting of aiokafka's consumer, producer or admin",
        ),
    ],
)
async def test_extra_settings_the_sidecar_sets_or_no_client_takes_are_refused(
    extra: dict[str, Any], message: str
) -> None:
    """Refused when the consumer is built, before any connection, with the key named (the CLI
    prints it and exits 2); before, aiokafka's constructor raised a TypeError."""
    config = KafkaConfig(bootstrap_servers="127.0.0.1:9", extra=extra)
    spec = SourceSpec("spans", "g", "earliest", 100)
    metrics = Metrics()

    async def revoked(partitions: set[Any]) -> None:
        pass

    source = KafkaSource(
        config,
        spec,
        OffsetTracker(),
        metrics.consumer,
        revoked,
    )
    with pytest.raises(ValueError, match=message):
        await source.start(asyncio.Event())
