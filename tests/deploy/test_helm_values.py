"""The Helm chart's values: its Secret is mounted as the files the config reads, an existing Secret is
referenced instead of created; missing or misplaced settings fail the install, and values.schema.json
rejects typos and wrong types at render time, naming the key; a config change rolls only its pods."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from helm_cases import (
    CASES,
    GOLDEN,
    deployment,
    of_kind,
    pod_annotations,
    pod_config,
    pod_spec,
    render,
    render_error,
)


def test_chart_secret_is_mounted_as_files_the_config_reads() -> None:
    values, _ = CASES["chart-secrets"]
    objects = render(copy.deepcopy(values))
    (secret,) = of_kind(objects, "Secret").values()
    assert set(secret["data"]) == {
        "judge-api-key",
        "kafka-sasl-password",
        "kafka-ssl-key-password",
        "replay-secret",
    }
    mount = "/var/run/secrets/rag-monitor"
    judge = pod_config(objects, pod_spec(deployment(objects, "judge")))
    assert judge["judge"]["options"]["api_key_file"] == f"{mount}/judge-api-key"
    assert judge["kafka"]["sasl_password_file"] == f"{mount}/kafka-sasl-password"
    assert judge["kafka"]["ssl_keyfile_password_file"] == f"{mount}/kafka-ssl-key-password"
    # Only the judge holds the judge's key; every role holds the Kafka credentials.
    ingest_pod = pod_spec(deployment(objects, "ingest"))
    assert "options" not in pod_config(objects, ingest_pod)["judge"]
    (volume,) = [v for v in ingest_pod["volumes"] if v["name"] == "ragmon-secrets"]
    assert {i["key"] for i in volume["secret"]["items"]} == {"kafka-sasl-password", "kafka-ssl-key-password"}
    (tls,) = [v for v in ingest_pod["volumes"] if v["name"] == "ragmon-kafka-tls"]
    assert tls["secret"]["secretName"] == "kafka-user-tls"
    # Changing a secret rolls the pods.
    changed = copy.deepcopy(values)
    changed["secrets"]["kafkaSaslPassword"] = "rotated"
    after = pod_annotations(deployment(render(changed), "ingest"))
    before = pod_annotations(deployment(objects, "ingest"))
    assert after["checksum/secrets"] != before["checksum/secrets"]
    assert after["checksum/config"] == before["checksum/config"]


def test_phoenix_token_reaches_only_the_judging_pods() -> None:
    values = {
        "config": {"events": {"phoenix": {"url": "http://phoenix.obs:6006"}}},
        "secrets": {"phoenixToken": "px-token-0123456789"},
    }
    objects = render(copy.deepcopy(values))
    (secret,) = of_kind(objects, "Secret").values()
    assert set(secret["data"]) == {"phoenix-token"}
    judge = pod_config(objects, pod_spec(deployment(objects, "judge")))
    assert judge["events"]["phoenix"]["token_file"] == "/var/run/secrets/rag-monitor/phoenix-token"
    assert "token" not in judge["events"]["phoenix"]
    ingest = pod_spec(deployment(objects, "ingest"))
    assert "token_file" not in pod_config(objects, ingest).get("events", {}).get("phoenix", {})
    assert not [v for v in ingest["volumes"] if v["name"] == "ragmon-secrets"]
    # Without a key (Phoenix without authentication) nothing is wired, and the install goes on.
    plain = render({"config": values["config"]})
    assert not of_kind(plain, "Secret")
    assert "token_file" not in pod_config(plain, pod_spec(deployment(plain, "judge")))["events"]["phoenix"]
    # The key itself never goes into the config: the schema has no place for it.
    assert "token" in render_error(
        {"config": {"events": {"phoenix": {"url": "http://p:6006", "token": "x"}}}}
    )


def test_existing_secret_is_referenced_not_created() -> None:
    values, _ = CASES["existing-secret"]
    objects = render(copy.deepcopy(values))
    assert not of_kind(objects, "Secret")
    pod = pod_spec(deployment(objects, "judge"))
    (volume,) = [v for v in pod["volumes"] if v["name"] == "ragmon-secrets"]
    assert volume["secret"]["secretName"] == "ragmon-credentials"
    assert {i["key"] for i in volume["secret"]["items"]} == {"judge-api-key", "kafka-sasl-password"}
    config = pod_config(objects, pod)
    assert config["kafka"]["sasl_password_file"] == "/var/run/secrets/rag-monitor/kafka-sasl-password"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"config": {"judge": {"backend": "anthropic"}}}, "secrets.judgeApiKey"),
        (
            {"config": {"kafka": {"security_protocol": "SASL_SSL", "sasl_username": "u"}}},
            "secrets.kafkaSaslPassword",
        ),
        ({"config": {"judge": {"backend": "openai", "options": {"api_key": "sk-x"}}}}, "ConfigMap"),
        ({"terminationGracePeriodSeconds": 20}, "shutdown_seconds"),
        ({"replay": {"enabled": True, "target": "http://rag"}}, "golden.data"),
        ({"replay": {"enabled": True}, "golden": {"data": GOLDEN}}, "replay.target"),
        ({"secrets": {"replaySecret": "0123456789\n"}}, "secrets.replaySecret is shorter than 16 bytes"),
    ],
)
def test_missing_or_misplaced_settings_fail_the_install(values: dict[str, Any], message: str) -> None:
    assert message in render_error(values)


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"replicaCount": 2}, "replicaCount"),
        ({"ingest": {"replica": 2}}, "replica"),
        ({"ingest": {"replicas": "two"}}, "/ingest/replicas"),
        ({"serviceMonitor": {"enabled": "yes"}}, "/serviceMonitor/enabled"),
        ({"mode": "both"}, "/mode"),
        ({"config": {"kafka": {"bootstrap_server": "kafka:9092"}}}, "bootstrap_server"),
        ({"config": {"sampling": {"rate": 2}}}, "/config/sampling/rate"),
        ({"config": {"kafka": {"sasl_password": "hunter2"}}}, "sasl_password"),
        ({"config": {"pipeline": {"role": "judge"}}}, "role"),
    ],
)
def test_schema_rejects_typos_and_wrong_types(values: dict[str, Any], key: str) -> None:
    error = render_error(values)
    assert "schema" in error and key in error, error


def test_config_change_rolls_only_its_pods() -> None:
    before = render()
    after = render({"config": {"kafka": {"topic": "spans_v2"}}})
    for component in ("ingest", "judge", "drift"):
        old = pod_annotations(deployment(before, component))["checksum/config"]
        assert pod_annotations(deployment(after, component))["checksum/config"] != old
    judge_only = render({"judge": {"replicas": 4}})
    for component, changed in (("ingest", False), ("judge", True)):
        old = pod_annotations(deployment(before, component))["checksum/config"]
        assert (pod_annotations(deployment(judge_only, component))["checksum/config"] != old) is changed
