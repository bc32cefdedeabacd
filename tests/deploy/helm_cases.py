"""What the Helm chart tests share: helm/rag-monitor rendered offline by Helm's own Go library
(helm-python-sdk), the objects picked out of a render, and `CASES`, every mode and feature
combination.

helm-python-sdk's `Chart.render` has no `api_versions`/`kube_version` parameters, but the native
`helm_render` it wraps takes them (`helm template --api-versions/--kube-version`); `render` below
calls it directly."""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import typer
import yaml
from helm_python import _native
from support import REPO

from monitor.app.config import Settings, load_settings
from monitor.cli import app

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


def load_settings_from(config: dict[str, Any]) -> Settings:
    """What `rag-monitor run --config` makes of a rendered config file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return load_settings(path)
