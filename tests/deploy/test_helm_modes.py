"""What each mode of the Helm chart runs: by default one Deployment per pipeline role with the shared
consumer groups (a second install on the cluster needs only its own group id); `combined`, every
stage in one Deployment; `sidecar`, no workload but the shared objects, and a template a RAG
service's own chart adds to its pods. The sidecar accepts the rendered config and flags."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from helm_cases import (
    CHART,
    KUBE_VERSION,
    MONITORING,
    SECRET_VALUES,
    cli_accepts,
    deployment,
    load_settings_from,
    notes,
    of_kind,
    pod_annotations,
    pod_config,
    pod_spec,
    render,
    render_files,
)


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
