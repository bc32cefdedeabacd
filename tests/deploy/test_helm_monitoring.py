"""The Helm chart's monitoring objects: the ServiceMonitor and PrometheusRule appear only when the
cluster serves monitoring.coreos.com/v1 and their flags are on; the PrometheusRule is
deploy/prometheus/ (and passes `promtool check rules`), its links follow the values; one Grafana
dashboard ConfigMap per JSON file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from helm_cases import CHART, CRD_KINDS, MONITORING, notes, of_kind, render, render_error, tool
from support import REPO


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
    recording = yaml.safe_load((deploy / "rules.yml").read_text())["groups"]
    expected = [*recording, *yaml.safe_load((deploy / "alerts.yml").read_text())["groups"]]
    assert rule["spec"]["groups"] == expected
    assert "{{ $labels.query_type }}" in json.dumps(rule["spec"])
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    run = subprocess.run([tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    # Alerts alone would read recording rules nobody records: both go, or the flags say otherwise.
    only_alerts = render({"prometheusRule": {"recordingRules": False}}, api_versions=MONITORING)
    (rule,) = of_kind(only_alerts, "PrometheusRule").values()
    assert [g["name"] for g in rule["spec"]["groups"]] == [g["name"] for g in expected[len(recording) :]]
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
