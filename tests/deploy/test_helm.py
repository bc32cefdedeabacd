"""The Helm chart helm/rag-monitor, rendered offline (helm_cases.py), as a whole:

- every object of every mode and feature combination validates against the Kubernetes schemas
  (kubernetes-validate, strict: no unknown field) of the newest Kubernetes version it ships; the
  prometheus-operator objects, which it has no schema for, are checked structurally;
- in every combination the pods are locked down, secrets never reach a ConfigMap and the
  selectors match;
- the NetworkPolicy, the image tag, `helm lint`, and the chart's copies (rules, the generated part
  of the schema) match their sources.

What each mode runs: test_helm_modes.py; the monitoring objects: test_helm_monitoring.py; secrets
and values.schema.json: test_helm_values.py; the golden replay: test_helm_replay.py."""

from __future__ import annotations

import copy
import importlib.util
import json
from types import ModuleType
from typing import Any

import helm_python
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from helm_cases import (
    CASES,
    CHART,
    CRD_KINDS,
    KUBE_VERSION,
    SECRET_VALUES,
    cli_accepts,
    deployment,
    of_kind,
    pod_annotations,
    pod_spec,
    render,
)
from support import REPO


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
    own models (monitor/app/config.py). Fix: `.venv/bin/python helm/rag-monitor/hack/sync.py`."""
    for path, content in _sync_module().expected_files().items():
        assert path.read_text(encoding="utf-8") == content, f"{path} is stale: run hack/sync.py"


def test_helm_lint_is_clean() -> None:
    report = helm_python.lint(CHART, strict=True, kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report
