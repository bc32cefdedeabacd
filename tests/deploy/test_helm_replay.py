"""The golden replay in the Helm chart: a CronJob runs the real CLI (and pushes to a Pushgateway when
one is set, its values checked by the schema), or the judge runs it on a schedule; replays sign
their mark with the chart's Secret or an existing one, and unsigned replays render but NOTES warns."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_cases import (
    CASES,
    GOLDEN,
    SECRET_VALUES,
    cli_accepts,
    deployment,
    load_settings_from,
    notes,
    of_kind,
    pod_config,
    pod_spec,
    render,
    render_error,
)

from monitor.golden.config import ReplayConfig


def test_replay_cronjob_runs_the_real_cli() -> None:
    values, _ = CASES["replay-cronjob"]
    objects = render(copy.deepcopy(values) | {"replay": values["replay"] | {"schedule": "0 3 * * *"}})
    (cron,) = of_kind(objects, "CronJob").values()
    assert cron["spec"]["schedule"] == "0 3 * * *"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and cron["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    (container,) = pod["containers"]
    args = container["args"]
    cli_accepts(args)
    assert args[args.index("--target") + 1] == "http://rag.default:8000/query"
    assert args[args.index("--golden") + 1] == "/etc/rag-monitor/golden/golden.jsonl"
    assert args[args.index("--baseline") + 1] == "/etc/rag-monitor/golden/baseline.json"
    golden = of_kind(objects, "ConfigMap")["rm-rag-monitor-golden"]
    assert golden["data"]["golden.jsonl"] == GOLDEN
    replay_config = yaml.safe_load(
        of_kind(objects, "ConfigMap")["rm-rag-monitor-config"]["data"]["replay.yaml"]
    )
    assert replay_config == {"judge_options": {"api_key_file": "/var/run/secrets/rag-monitor/judge-api-key"}}
    assert not of_kind(render(), "CronJob")


def _replay_container(values: dict[str, Any]) -> dict[str, Any]:
    (cron,) = of_kind(render(values), "CronJob").values()
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_replay_cronjob_pushes_to_a_pushgateway_when_set() -> None:
    """A Job's pod exports nothing Prometheus could scrape: with replay.pushgateway.url the Job runs
    `replay --pushgateway` (job label, instance per release), the basic auth from a Secret key as
    an env var; without it, no push flag."""
    values, _ = CASES["replay-pushgateway"]
    container = _replay_container(copy.deepcopy(values))
    args = container["args"]
    cli_accepts(args)
    assert args[args.index("--pushgateway") + 1] == "http://prometheus-pushgateway.monitoring:9091"
    assert args[args.index("--push-job") + 1] == "rag-monitor-replay"
    assert args[args.index("--push-instance") + 1] == "obs/rm-rag-monitor"
    env_name = args[args.index("--push-auth-env") + 1]
    (auth,) = [e for e in container["env"] if e["name"] == env_name]
    assert auth["valueFrom"] == {"secretKeyRef": {"name": "pushgateway-auth", "key": "auth"}}

    anonymous = copy.deepcopy(values)
    anonymous["replay"]["pushgateway"] = {"url": "https://pg:9091", "job": "nightly", "instance": "eu-1"}
    args = _replay_container(anonymous)["args"]
    cli_accepts(args)
    assert args[args.index("--push-job") + 1] == "nightly"
    assert args[args.index("--push-instance") + 1] == "eu-1"
    assert "--push-auth-env" not in args

    without, _ = CASES["replay-cronjob"]
    container = _replay_container(copy.deepcopy(without))
    assert not any(a.startswith("--push") for a in container["args"])
    assert [e["name"] for e in container["env"]] == ["HOME"]


@pytest.mark.parametrize(
    ("pushgateway", "key"),
    [
        ({"url": "http://user:secret@pg:9091"}, "/replay/pushgateway/url"),
        ({"url": "pg:9091"}, "/replay/pushgateway/url"),
        ({"jobs": "x"}, "jobs"),
        ({"basicAuth": {"password": "x"}}, "password"),
    ],
)
def test_schema_rejects_bad_pushgateway_values(pushgateway: dict[str, Any], key: str) -> None:
    values = {"replay": {"enabled": True, "target": "http://rag", "pushgateway": pushgateway}}
    error = render_error(values | {"golden": {"data": GOLDEN}})
    assert "schema" in error and key in error, error


def test_scheduled_golden_replay_in_the_judge() -> None:
    objects = render({"config": {"golden": {"target": "http://rag:8000/q"}}, "golden": {"data": GOLDEN}})
    judge = pod_spec(deployment(objects, "judge"))
    assert pod_config(objects, judge)["golden"]["file"] == "/etc/rag-monitor/golden/golden.jsonl"
    assert "ragmon-golden" in {v["name"] for v in judge["volumes"]}
    assert "ragmon-golden" not in {v["name"] for v in pod_spec(deployment(objects, "ingest"))["volumes"]}


MOUNT = "/var/run/secrets/rag-monitor"


def _secret_items(pod: dict[str, Any]) -> tuple[str, set[str]]:
    """The Secret a pod mounts at secrets.mountPath, and the keys it takes from it."""
    (container,) = pod["containers"]
    assert {"name": "ragmon-secrets", "mountPath": MOUNT, "readOnly": True} in container["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "ragmon-secrets"]
    assert all(i["key"] == i["path"] for i in volume["secret"]["items"])
    return volume["secret"]["secretName"], {i["key"] for i in volume["secret"]["items"]}


def _replay_pod(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The replay CronJob's pod spec and its replay.yaml, as `replay --config` validates it."""
    (cron,) = of_kind(objects, "CronJob").values()
    pod = pod_spec(cron["spec"]["jobTemplate"])
    text = of_kind(objects, "ConfigMap")["rm-rag-monitor-config"]["data"]["replay.yaml"]
    config: dict[str, Any] = yaml.safe_load(text)
    ReplayConfig.model_validate(config)
    return pod, config


REPLAYS = {
    "replay": {"enabled": True, "target": "http://rag.default:8000/query"},
    "config": {"golden": {"target": "http://rag.default:8000/query"}},
    "golden": {"data": GOLDEN},
}


def test_replays_sign_their_mark_with_the_chart_secret() -> None:
    """The replay CronJob and the judge's scheduled replay read the replay secret from the chart's
    Secret, mounted as a file (never an env value), so the RAG service keeps them out of its
    production metrics; the roles that do not replay do not get it."""
    objects = render(REPLAYS | {"secrets": {"replaySecret": SECRET_VALUES["replaySecret"]}})
    (secret,) = of_kind(objects, "Secret").values()
    assert base64.b64decode(secret["data"]["replay-secret"]).decode() == SECRET_VALUES["replaySecret"]
    pod, config = _replay_pod(objects)
    assert _secret_items(pod) == ("rm-rag-monitor-secrets", {"replay-secret"})
    assert config == {"target": {"replay_secret_file": f"{MOUNT}/replay-secret"}}
    judge = pod_spec(deployment(objects, "judge"))
    assert _secret_items(judge) == ("rm-rag-monitor-secrets", {"replay-secret"})
    assert load_settings_from(pod_config(objects, judge)).golden.replay_secret_file == Path(
        f"{MOUNT}/replay-secret"
    )
    for other in ("ingest", "drift"):
        assert "ragmon-secrets" not in {v["name"] for v in pod_spec(deployment(objects, other))["volumes"]}
    for workload in [*of_kind(objects, "Deployment").values(), *of_kind(objects, "CronJob").values()]:
        assert "REPLAY_SECRET" not in json.dumps(workload)  # a file, not an env var
    text = notes(REPLAYS | {"secrets": {"replaySecret": SECRET_VALUES["replaySecret"]}})
    assert "WARNING" not in text
    assert "key replay-secret of Secret rm-rag-monitor-secrets" in text
    assert "RAGMON_REPLAY_SECRET_FILE" in text
    # Combined mode: the one Deployment replays.
    combined = render(
        REPLAYS | {"mode": "combined", "secrets": {"replaySecret": SECRET_VALUES["replaySecret"]}}
    )
    (dep,) = of_kind(combined, "Deployment").values()
    assert _secret_items(pod_spec(dep))[1] == {"replay-secret"}
    assert pod_config(combined, pod_spec(dep))["golden"]["replay_secret_file"] == f"{MOUNT}/replay-secret"


def test_replay_secret_from_an_existing_secret() -> None:
    values, _ = CASES["replay-signed-existing-secret"]
    objects = render(copy.deepcopy(values))
    assert not of_kind(objects, "Secret")
    pod, config = _replay_pod(objects)
    assert _secret_items(pod) == ("ragmon-credentials", {"rag-replay"})
    assert config["target"]["replay_secret_file"] == f"{MOUNT}/rag-replay"
    (dep,) = of_kind(objects, "Deployment").values()
    assert _secret_items(pod_spec(dep)) == ("ragmon-credentials", {"rag-replay"})
    assert pod_config(objects, pod_spec(dep))["golden"]["replay_secret_file"] == f"{MOUNT}/rag-replay"
    assert "key rag-replay of Secret ragmon-credentials" in notes(copy.deepcopy(values))


def test_unsigned_replays_render_but_notes_warn() -> None:
    """No replay secret: the install goes through (the product replays unmarked with a warning, and
    an upgrade must not break over it) and NOTES.txt names each replay that pollutes production."""
    objects = render(copy.deepcopy(REPLAYS))
    pod, config = _replay_pod(objects)
    assert "ragmon-secrets" not in {v["name"] for v in pod["volumes"]} and config == {}
    judge = pod_config(objects, pod_spec(deployment(objects, "judge")))
    assert "replay_secret_file" not in judge["golden"]
    text = notes(copy.deepcopy(REPLAYS))
    assert "WARNING: no replay secret" in text and "counts as production traffic" in text
    assert "- the replay CronJob (replay.enabled)" in text
    assert "- the judge pods' scheduled golden replay (config.golden.target)" in text
    # A Secret you manage without the key (keys.replaySecret ""): the same warning.
    existing = {"secrets": {"existingSecret": "ragmon-credentials", "keys": {"replaySecret": ""}}}
    assert "- the replay CronJob" in notes(copy.deepcopy(REPLAYS) | existing)
    # The secret given some other way (the config's own file, or extraEnv): no warning.
    own = copy.deepcopy(REPLAYS)
    own["replay"]["config"] = {"target": {"replay_secret_file": "/mnt/replay/secret"}}
    own["extraEnv"] = [{"name": "RAGMON_GOLDEN__REPLAY_SECRET_FILE", "value": "/mnt/replay/secret"}]
    assert "WARNING" not in notes(own)
    assert "replay secret" not in notes()  # nothing replays: nothing to say
