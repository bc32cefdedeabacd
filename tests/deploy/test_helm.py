"""The Helm chart helm/rag-monitor, rendered offline by Helm's own Go library (helm-python-sdk):

- every object of every mode and feature combination validates against the Kubernetes schemas
  (kubernetes-validate, strict: no unknown field) of the newest Kubernetes version it ships; the
  prometheus-operator objects, which it has no schema for, are checked structurally;
- what an operator relies on: each Deployment runs its own pipeline.role with the shared consumer
  groups, the sidecar accepts the rendered config and flags, secrets never reach a ConfigMap,
  the monitoring objects appear only when the cluster serves their API, the PrometheusRule is
  deploy/prometheus/ (and passes `promtool check rules`), one dashboard ConfigMap per JSON file;
- values.schema.json rejects typos and wrong types at render time, naming the key;
- the chart's copies (rules, the generated part of the schema) match their sources.

helm-python-sdk's `Chart.render` has no `api_versions`/`kube_version` parameters, but the native
`helm_render` it wraps takes them (`helm template --api-versions/--kube-version`); `render` below
calls it directly."""

from __future__ import annotations

import base64
import copy
import functools
import importlib.util
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import helm_python
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import typer
import yaml
from helm_python import _native
from support import REPO

from monitor.cli import app
from monitor.config import Settings, load_settings
from monitor.golden.config import ReplayConfig

CHART = REPO / "helm" / "rag-monitor"
KUBE_VERSION = kubernetes_validate.latest_version()  # the newest schemas it ships
MONITORING = ("monitoring.coreos.com/v1",)
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
SECRET_VALUES = {
    "judgeApiKey": "sk-ant-judge-0123456789",
    "kafkaSaslPassword": "sasl-pass-0123456789",
    "kafkaSslKeyPassword": "tls-key-pass-0123456789",
    "replaySecret": "replay-secret-0123456789abcdef",
}
GOLDEN = '{"id": "q1", "query": "what?", "query_type": "lookup", "relevant_chunk_ids": ["c1"], '
GOLDEN += '"reference_answer": "that", "answerable": true}\n'


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: `make debs` installs it (Debian prometheus)")
    return path


@functools.cache
def chart(path: Path = CHART) -> helm_python.Chart:
    return helm_python.Chart.load(path)


def render_files(
    values: dict[str, Any] | None = None, *, api_versions: tuple[str, ...] = (), path: Path = CHART
) -> dict[str, str]:
    """Template path -> rendered text, as `helm template rm <chart> -n obs --api-versions …`."""
    opts = {"name": "rm", "namespace": "obs", "api_versions": list(api_versions)}
    opts["kube_version"] = f"v{KUBE_VERSION}"
    out = _native.call_string("helm_render", chart(path)._raw(), json.dumps(values or {}), json.dumps(opts))
    files: dict[str, str] = json.loads(out)
    return files


def render(
    values: dict[str, Any] | None = None, *, api_versions: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The release's objects (NOTES.txt aside)."""
    files = render_files(values, api_versions=api_versions)
    return [
        doc
        for name, text in sorted(files.items())
        if not name.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def notes(values: dict[str, Any] | None = None, *, api_versions: tuple[str, ...] = ()) -> str:
    return render_files(values, api_versions=api_versions)["rag-monitor/templates/NOTES.txt"]


def render_error(values: dict[str, Any]) -> str:
    with pytest.raises(helm_python.HelmError) as caught:
        render(values)
    return str(caught.value)


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def deployment(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    (found,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return found


def pod_config(objects: list[dict[str, Any]], pod: dict[str, Any]) -> dict[str, Any]:
    """The config file a pod's container reads: the ConfigMap key its config volume mounts."""
    (volume,) = [v for v in pod["volumes"] if v["name"] == "ragmon-config"]
    config_map = of_kind(objects, "ConfigMap")[volume["configMap"]["name"]]
    (item,) = volume["configMap"]["items"]
    loaded: dict[str, Any] = yaml.safe_load(config_map["data"][item["key"]])
    return loaded


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def pod_annotations(workload: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = workload["spec"]["template"]["metadata"]["annotations"]
    return found


def cli_accepts(args: list[str]) -> None:
    """The real `rag-monitor` command line parses `args` (option names and types), runs nothing."""
    group: Any = typer.main.get_command(app)  # typer's own click Group
    name, *rest = args
    group.commands[name].make_context(name, rest)


# Every mode and feature combination: (values, API versions the cluster serves).
CASES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "defaults": ({}, ()),
    "defaults-with-prometheus-operator": ({"serviceMonitor": {"labels": {"release": "kps"}}}, MONITORING),
    "combined": ({"mode": "combined", "combined": {"replicas": 2}}, MONITORING),
    "sidecar": ({"mode": "sidecar", "sidecar": {"podMonitor": {"selector": {"app": "rag"}}}}, MONITORING),
    "sidecar-without-prometheus-operator": ({"mode": "sidecar"}, ()),
    "chart-secrets": (
        {
            "config": {
                "judge": {"backend": "anthropic"},
                "kafka": {
                    "security_protocol": "SASL_SSL",
                    "sasl_username": "rag",
                    "ssl_cafile": "/etc/kafka-tls/ca.crt",
                    "ssl_certfile": "/etc/kafka-tls/tls.crt",
                    "ssl_keyfile": "/etc/kafka-tls/tls.key",
                },
            },
            "secrets": dict(SECRET_VALUES),
            "kafkaTls": {"existingSecret": "kafka-user-tls"},
        },
        MONITORING,
    ),
    "existing-secret": (
        {
            "config": {
                "judge": {"backend": "openai"},
                "kafka": {"security_protocol": "SASL_PLAINTEXT", "sasl_username": "rag"},
            },
            "secrets": {"existingSecret": "ragmon-credentials"},
        },
        (),
    ),
    "network-policy": ({"networkPolicy": {"enabled": True}}, ()),
    "replay-cronjob": (
        {
            "replay": {"enabled": True, "target": "http://rag.default:8000/query", "judge": "anthropic"},
            "golden": {"data": GOLDEN, "baseline": '{"kind": "rag-monitor-golden-baseline"}'},
            "secrets": {"judgeApiKey": SECRET_VALUES["judgeApiKey"]},
        },
        (),
    ),
    "replay-pushgateway": (
        {
            "replay": {
                "enabled": True,
                "target": "http://rag.default:8000/query",
                "pushgateway": {
                    "url": "http://prometheus-pushgateway.monitoring:9091",
                    "basicAuth": {"existingSecret": "pushgateway-auth"},
                },
            },
            "golden": {"data": GOLDEN},
        },
        (),
    ),
    "replay-signed-existing-secret": (
        {
            "mode": "combined",
            "config": {"golden": {"target": "http://rag.default:8000/query"}},
            "golden": {"data": GOLDEN},
            "replay": {"enabled": True, "target": "http://rag.default:8000/query"},
            "secrets": {"existingSecret": "ragmon-credentials", "keys": {"replaySecret": "rag-replay"}},
        },
        (),
    ),
    "everything": (
        {
            "ingest": {"replicas": 3},
            "judge": {"replicas": 2},
            "config": {"golden": {"target": "http://rag.default:8000/query"}},
            "golden": {"data": GOLDEN},
            "replay": {"enabled": True, "target": "http://rag.default:8000/query"},
            "secrets": {"replaySecret": SECRET_VALUES["replaySecret"]},
            "networkPolicy": {"enabled": True, "ingress": {"from": [{"namespaceSelector": {}}]}},
            "serviceMonitor": {"labels": {"release": "kps"}},
            "prometheusRule": {"labels": {"release": "kps"}},
            "podAnnotations": {"example.com/team": "ml"},
            "extraEnv": [{"name": "RAGMON_SAMPLING__RATE", "value": "0.1"}],
        },
        MONITORING,
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    values, apis = CASES[request.param]
    return request.param, render(copy.deepcopy(values), api_versions=apis)


def test_every_object_is_valid_kubernetes(case: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = case
    assert objects
    for obj in objects:
        assert obj["metadata"]["namespace"] == "obs", obj["metadata"]["name"]
        assert len(obj["metadata"]["name"]) <= 63, obj["metadata"]["name"]
        if obj["kind"] in CRD_KINDS:
            check_monitoring_object(obj)
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {exc.message} at {list(exc.path)}")


def check_monitoring_object(obj: dict[str, Any]) -> None:
    """What prometheus-operator needs of these kinds (no schema for them in kubernetes-validate)."""
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    spec = obj["spec"]
    if obj["kind"] == "PrometheusRule":
        assert spec.keys() == {"groups"}
        for group in spec["groups"]:
            assert group.keys() <= {"name", "interval", "rules"} and group["rules"]
            for rule in group["rules"]:
                assert ("alert" in rule) != ("record" in rule) and isinstance(rule["expr"], str)
        return
    endpoints = spec["endpoints" if obj["kind"] == "ServiceMonitor" else "podMetricsEndpoints"]
    assert spec["selector"]["matchLabels"] and spec["namespaceSelector"]["matchNames"]
    for endpoint in endpoints:
        assert endpoint["port"] == "ragmon-metrics" and endpoint["path"] == "/metrics"
        assert {"action": "replace", "targetLabel": "job", "replacement": "rag-monitor"} in endpoint[
            "relabelings"
        ]


def test_pods_are_locked_down(case: tuple[str, list[dict[str, Any]]]) -> None:
    """Non-root, read-only root, no capabilities, seccomp, a writable /tmp, probes on the metrics port."""
    _, objects = case
    workloads = [o for o in objects if o["kind"] == "Deployment"]
    workloads += [{"spec": o["spec"]["jobTemplate"]["spec"]} for o in objects if o["kind"] == "CronJob"]
    for workload in workloads:
        pod = pod_spec(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"]:
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert {"name": "ragmon-tmp", "mountPath": "/tmp"} in container["volumeMounts"]
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    for dep in (o for o in objects if o["kind"] == "Deployment"):
        (container,) = pod_spec(dep)["containers"]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "ragmon-metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "ragmon-metrics"}
        assert container["ports"] == [{"name": "ragmon-metrics", "containerPort": 9612, "protocol": "TCP"}]
        cli_accepts(container["args"])
        assert pod_annotations(dep)["checksum/config"]


def test_secrets_never_reach_a_config_map(case: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = case
    for config_map in of_kind(objects, "ConfigMap").values():
        text = json.dumps(config_map)
        for secret in SECRET_VALUES.values():
            assert secret not in text, config_map["metadata"]["name"]


def test_selectors_match(case: tuple[str, list[dict[str, Any]]]) -> None:
    """Service, ServiceMonitor and PodDisruptionBudgets select what they are meant to."""
    _, objects = case
    deployments = of_kind(objects, "Deployment")
    for dep in deployments.values():
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for pdb in of_kind(objects, "PodDisruptionBudget").values():
        matched = [
            d
            for d in deployments.values()
            if pdb["spec"]["selector"]["matchLabels"].items()
            <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matched) == 1
    assert len(of_kind(objects, "PodDisruptionBudget")) == len(deployments)
    for service in of_kind(objects, "Service").values():
        selected = [
            d
            for d in deployments.values()
            if service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert selected and len(selected) == len(deployments)
        assert service["spec"]["ports"][0]["targetPort"] == "ragmon-metrics"
        for monitor in of_kind(objects, "ServiceMonitor").values():
            assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
            assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


def test_defaults_run_three_roles_with_their_consumer_groups() -> None:
    objects = render({"ingest": {"replicas": 3}, "judge": {"replicas": 2}, "drift": {"replicas": 1}})
    assert {d["metadata"]["name"] for d in of_kind(objects, "Deployment").values()} == {
        "rm-rag-monitor-ingest",
        "rm-rag-monitor-judge",
        "rm-rag-monitor-drift",
    }
    configs = {}
    for component, replicas in (("ingest", 3), ("judge", 2), ("drift", 1)):
        dep = deployment(objects, component)
        assert dep["spec"]["replicas"] == replicas
        config = pod_config(objects, pod_spec(dep))
        assert config["pipeline"]["role"] == component
        # The sidecar itself accepts the file (all replicas of a role read this one file).
        settings = load_settings_from(config)
        assert settings.pipeline.role == component
        assert settings.kafka.group_id == "rag-monitor"
        assert settings.pipeline.judge_group_id == "rag-monitor-judge"
        assert settings.pipeline.samples_topic == "rag-monitor-samples"
        configs[component] = config
    # The judge budget is split between the judge replicas; nothing else differs between roles.
    assert configs["judge"]["judge"]["budget"] == {"replicas": 2}
    for config in configs.values():
        config["pipeline"].pop("role")
        config["judge"].pop("budget", None)
    assert configs["ingest"] == configs["judge"] == configs["drift"]
    # No per-pod override of the groups: replicas of a role are members of one group.
    for dep in of_kind(objects, "Deployment").values():
        env = {e["name"] for e in pod_spec(dep)["containers"][0]["env"]}
        assert not {n for n in env if "GROUP_ID" in n}


def test_a_second_install_on_the_cluster_needs_only_its_own_group_id() -> None:
    """Staging beside production: every internal topic and group follows `config.kafka.group_id`,
    in the pods' config and in what NOTES.txt tells the operator."""
    values = {"config": {"kafka": {"group_id": "staging"}}}
    objects = render(values)
    for component in ("ingest", "judge", "drift"):
        settings = load_settings_from(pod_config(objects, pod_spec(deployment(objects, component))))
        assert (settings.pipeline.samples_topic, settings.results.topic) == (
            "staging-samples",
            "staging-judgements",
        )
        assert (settings.pipeline.judge_group_id, settings.pipeline.drift_group_id) == (
            "staging-judge",
            "staging-drift",
        )
    text = notes(values)
    assert "in consumer group staging\n" in text
    assert "in consumer group staging-judge\n" in text and "in consumer group staging-drift\n" in text
    assert "staging-samples for judge, staging-judgements for drift" in text
    # A name set explicitly (the upgrade path: keep the old global names) wins, there too.
    kept = {"config": {"pipeline": {"samples_topic": "rag_samples"}, "results": {"topic": "rag_judgements"}}}
    assert "rag_samples for judge, rag_judgements for drift" in notes(kept)
    assert "no results topic for drift" in notes({"config": {"results": {"topic": None}}})


def load_settings_from(config: dict[str, Any]) -> Settings:
    """What `rag-monitor run --config` makes of a rendered config file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return load_settings(path)


def test_combined_mode_runs_every_stage_in_one_deployment() -> None:
    objects = render({"mode": "combined", "combined": {"replicas": 2}})
    (dep,) = of_kind(objects, "Deployment").values()
    assert dep["metadata"]["name"] == "rm-rag-monitor" and dep["spec"]["replicas"] == 2
    config = pod_config(objects, pod_spec(dep))
    assert load_settings_from(config).pipeline.role == "all"
    assert config["judge"]["budget"]["replicas"] == 2


def test_sidecar_mode_renders_no_workload_but_the_shared_objects() -> None:
    values = {"mode": "sidecar", "sidecar": {"podMonitor": {"selector": {"app": "rag"}}}}
    objects = render(values, api_versions=MONITORING)
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"Deployment", "Service", "ServiceMonitor", "PodDisruptionBudget", "NetworkPolicy"}
    assert {"ConfigMap", "PodMonitor", "PrometheusRule"} <= kinds
    (monitor,) = of_kind(objects, "PodMonitor").values()
    assert monitor["spec"]["selector"]["matchLabels"] == {"app": "rag"}
    config = yaml.safe_load(of_kind(objects, "ConfigMap")["rm-rag-monitor-config"]["data"]["sidecar.yaml"])
    assert load_settings_from(config).pipeline.role == "all"
    # NOTES.txt prints the container to paste, with this release's names.
    text = notes(values, api_versions=MONITORING)
    assert "- name: rag-monitor" in text and "name: rm-rag-monitor-config" in text


def test_sidecar_pod_monitor_needs_a_selector() -> None:
    with pytest.raises(helm_python.HelmError, match=r"sidecar\.podMonitor\.selector"):
        render({"mode": "sidecar"}, api_versions=MONITORING)


@pytest.fixture
def parent_chart(tmp_path: Path) -> Iterator[Path]:
    """A RAG service's chart with rag-monitor as a dependency, adding the sidecar to its pods the way
    the chart README says."""
    root = tmp_path / "rag-service"
    (root / "templates").mkdir(parents=True)
    shutil.copytree(CHART, root / "charts" / "rag-monitor", ignore=shutil.ignore_patterns("hack"))
    (root / "Chart.yaml").write_text(
        "apiVersion: v2\nname: rag-service\nversion: 1.0.0\n"
        "dependencies:\n  - name: rag-monitor\n    version: 0.1.0\n"
    )
    (root / "values.yaml").write_text(
        "rag-monitor:\n  mode: sidecar\n  sidecar:\n    podMonitor:\n      selector: {app: rag}\n"
    )
    readme = (CHART / "README.md").read_text()
    snippet = readme.split("<!-- sidecar-snippet -->")[1].split("```yaml\n")[1].split("```")[0]
    (root / "templates" / "deployment.yaml").write_text(snippet)
    yield root


def test_sidecar_template_from_a_parent_chart(parent_chart: Path) -> None:
    values: dict[str, Any] = {
        "rag-monitor": {
            "secrets": {"judgeApiKey": SECRET_VALUES["judgeApiKey"]},
            "config": {"judge": {"backend": "anthropic"}},
        }
    }
    files = render_files(values, path=parent_chart)
    objects = [d for n, t in files.items() if not n.endswith("NOTES.txt") for d in yaml.safe_load_all(t) if d]
    dep = of_kind(objects, "Deployment")["rm-rag-service"]
    kubernetes_validate.validate(dep, KUBE_VERSION, strict=True)
    pod = pod_spec(dep)
    assert [c["name"] for c in pod["containers"]] == ["rag-service", "rag-monitor"]
    sidecar = pod["containers"][1]
    cli_accepts(sidecar["args"])
    config = pod_config(objects, pod)
    assert config["pipeline"]["role"] == "all"
    assert config["judge"]["options"]["api_key_file"] == "/var/run/secrets/rag-monitor/judge-api-key"
    (secret_volume,) = [v for v in pod["volumes"] if v["name"] == "ragmon-secrets"]
    assert secret_volume["secret"]["secretName"] in of_kind(objects, "Secret")
    assert pod_annotations(dep)["checksum/config"]


def test_monitoring_objects_need_the_api_and_their_flags() -> None:
    labels = {"release": "kube-prometheus-stack"}
    values = {"serviceMonitor": {"labels": labels}, "prometheusRule": {"labels": labels}}
    with_api = {o["kind"] for o in render(values, api_versions=MONITORING)}
    assert {"ServiceMonitor", "PrometheusRule"} <= with_api
    assert not {"ServiceMonitor", "PrometheusRule", "PodMonitor"} & {o["kind"] for o in render(values)}
    assert "does not serve monitoring.coreos.com/v1" in notes(values)
    off = values | {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}}
    assert not {"ServiceMonitor", "PrometheusRule"} & {
        o["kind"] for o in render(off, api_versions=MONITORING)
    }
    for obj in render(values, api_versions=MONITORING):
        if obj["kind"] in CRD_KINDS:
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_prometheus_rule_is_deploy_prometheus(tmp_path: Path) -> None:
    """The same rules as deploy/prometheus/, their {{ $labels }} templates untouched, and valid."""
    objects = render(api_versions=MONITORING)
    (rule,) = of_kind(objects, "PrometheusRule").values()
    deploy = REPO / "deploy" / "prometheus"
    expected = [
        *yaml.safe_load((deploy / "rules.yml").read_text())["groups"],
        *yaml.safe_load((deploy / "alerts.yml").read_text())["groups"],
    ]
    assert rule["spec"]["groups"] == expected
    assert "{{ $labels.query_type }}" in json.dumps(rule["spec"])
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    run = subprocess.run([tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    # Alerts alone would read recording rules nobody records: both go, or the flags say otherwise.
    only_alerts = render({"prometheusRule": {"recordingRules": False}}, api_versions=MONITORING)
    (rule,) = of_kind(only_alerts, "PrometheusRule").values()
    assert [g["name"] for g in rule["spec"]["groups"]] == [g["name"] for g in expected[1:]]
    # A renamed scrape job follows into the rules that select on it.
    renamed = render({"serviceMonitor": {"jobName": "ragmon"}}, api_versions=MONITORING)
    text = json.dumps(of_kind(renamed, "PrometheusRule"))
    assert 'job=\\"ragmon\\"' in text and 'job=\\"rag-monitor\\"' not in text
    # Your Grafana and your runbooks: every link points there, nothing else in the rules changes.
    links = {
        "grafanaUrl": "https://grafana.corp.test/g/",
        "runbookUrl": "https://wiki.corp.test/rag/runbooks",
    }
    moved = render({"prometheusRule": links}, api_versions=MONITORING)
    (rule,) = of_kind(moved, "PrometheusRule").values()
    annotations = [r["annotations"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert all(a["runbook_url"].startswith("https://wiki.corp.test/rag/runbooks#ragmon") for a in annotations)
    dashboards = [a["dashboard_url"] for a in annotations if "dashboard_url" in a]
    assert dashboards and all(u.startswith("https://grafana.corp.test/g/d/rag-monitor") for u in dashboards)
    assert "example.com" not in json.dumps(rule) and "github.com/rag-monitor" not in json.dumps(rule)
    unchanged = [
        {k: v for k, v in r.items() if k != "annotations"} for g in rule["spec"]["groups"] for r in g["rules"]
    ]
    assert unchanged == [
        {k: v for k, v in r.items() if k != "annotations"} for g in expected for r in g["rules"]
    ]
    assert "does not match pattern" in render_error({"prometheusRule": {"grafanaUrl": "grafana {{ x }}"}})


def test_one_dashboard_config_map_per_json_file() -> None:
    files = sorted((CHART / "dashboards").glob("*.json"))
    objects = render()
    dashboards = [
        o for o in of_kind(objects, "ConfigMap").values() if o["metadata"]["labels"].get("grafana_dashboard")
    ]
    assert len(dashboards) == len(files)  # zero files: zero ConfigMaps
    by_file = {key: o for o in dashboards for key in o["data"]}
    assert sorted(by_file) == [f.name for f in files]
    for file in files:
        config_map = by_file[file.name]
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"]["grafana_folder"] == "RAG monitor"
        assert json.loads(config_map["data"][file.name]) == json.loads(file.read_text())
    assert not [
        o
        for o in render({"dashboards": {"enabled": False}})
        if "grafana_dashboard" in o["metadata"]["labels"]
    ]


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


def test_network_policy() -> None:
    assert not of_kind(render(), "NetworkPolicy")
    (policy,) = of_kind(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy").values()
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "rag-monitor",
        "app.kubernetes.io/instance": "rm",
    }
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "ragmon-metrics", "protocol": "TCP"}]}]
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == {53, 9092, 9093, 443}
    # Sidecar mode: the pods are the RAG service's, not the chart's to fence.
    assert not of_kind(render({"mode": "sidecar", "networkPolicy": {"enabled": True}}), "NetworkPolicy")


def test_image_tag_defaults_to_app_version() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    version = next(line.split('"')[1] for line in pyproject.splitlines() if line.startswith("version ="))
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["appVersion"] == version
    image = pod_spec(deployment(render(), "ingest"))["containers"][0]["image"]
    assert image == f"ghcr.io/rag-monitor/rag-monitor:{version}"
    digest = "sha256:" + "a" * 64
    image = pod_spec(deployment(render({"image": {"digest": digest}}), "ingest"))["containers"][0]["image"]
    assert image == f"ghcr.io/rag-monitor/rag-monitor@{digest}"


def _sync_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_sync", CHART / "hack" / "sync.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_chart_copies_match_their_sources() -> None:
    """rules/*.yml are deploy/prometheus/'s, and values.schema.json's config part is the sidecar's
    own models (monitor/config.py). Fix: `.venv/bin/python helm/rag-monitor/hack/sync.py`."""
    for path, content in _sync_module().expected_files().items():
        assert path.read_text(encoding="utf-8") == content, f"{path} is stale: run hack/sync.py"


def test_helm_lint_is_clean() -> None:
    report = helm_python.lint(CHART, strict=True, kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report
