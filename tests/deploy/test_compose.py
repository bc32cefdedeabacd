"""The compose stack of deploy/: deploy/docker-compose.yml and the files it mounts.

No container runs here (no Docker engine, no image pulls), so the stack is checked file by file and
across files:

- Prometheus' config passes `promtool check config` with the rule files it names, and Alertmanager's
  `amtool check-config`, at the paths the containers read them from;
- the compose file is valid under the Compose Specification's JSON schema (vendored in tests/data,
  see compose-spec.README.md there), and every `depends_on` condition can be met;
- the sidecar's config loads with `load_settings`, the one the container is started with;
- the services find each other: the spans topic, the Kafka bootstrap address, the scrape target,
  the Alertmanager target, the Collector endpoint of the example service and Grafana's datasource
  name the compose services and the ports they listen on;
- every file the compose file mounts or builds from exists, and deploy/README.md points at ports
  the stack publishes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from support import REPO

from monitor.app.config import Settings, load_settings

DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
COLLECTOR = DEPLOY / "otel-collector.yaml"
SIDECAR_CONFIG = DEPLOY / "rag-monitor.yaml"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
ALERTMANAGER = DEPLOY / "alertmanager" / "alertmanager.yml"
GRAFANA = DEPLOY / "grafana" / "provisioning"
README = DEPLOY / "README.md"
COMPOSE_SCHEMA = REPO / "tests" / "data" / "compose-spec.json"

# Where the official images listen unless told otherwise (--web.listen-address).
PROMETHEUS_PORT = 9090
ALERTMANAGER_PORT = 9093


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: `make debs` installs it (Debian prometheus, prometheus-alertmanager)")
    return path


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = load(COMPOSE)
    return doc


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def published(service: dict[str, Any]) -> set[tuple[str, int, int]]:
    """The service's published ports as (host address, host port, container port); short syntax."""
    out = set()
    for spec in service.get("ports", []):
        *address, host, container = str(spec).split(":")
        out.add((":".join(address), int(host), int(container)))
    return out


def service_by_image(prefix: str) -> str:
    """The one service running this image repository (`prom/prometheus`: any tag)."""
    names = [n for n, s in services().items() if str(s.get("image", "")).split(":")[0] == prefix]
    assert len(names) == 1, f"one service of image {prefix}, found {names}"
    return names[0]


def service_mounting(host_path: Path) -> str:
    names = [n for n in services() if host_path in {src for src, _ in bind_mounts(n)}]
    assert len(names) == 1, f"one service mounts {host_path}, found {names}"
    return names[0]


def service_built_from(dockerfile: str) -> str:
    names = [n for n, s in services().items() if s.get("build", {}).get("dockerfile") == dockerfile]
    assert len(names) == 1, f"one service built from {dockerfile}, found {names}"
    return names[0]


def bind_mounts(service: str) -> list[tuple[Path, PurePosixPath]]:
    """(host path, container path) of the service's bind mounts; named volumes left out."""
    out = []
    for volume in services()[service].get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") != "bind":
                continue
            source, target = volume["source"], volume["target"]
        else:
            source, target = volume.split(":")[:2]
            if not source.startswith((".", "/")):
                continue  # a named volume
        out.append(((COMPOSE.parent / source).resolve(), PurePosixPath(target)))
    return out


def container_path(service: str, host_path: Path) -> PurePosixPath:
    """Where the service sees a repository file: through a mount of the file or of a directory
    above it."""
    host_path = host_path.resolve()
    for source, target in bind_mounts(service):
        if host_path == source:
            return target
        if source in host_path.parents:
            return target / host_path.relative_to(source).as_posix()
    raise AssertionError(f"{service} does not mount {host_path}")


def flag(args: list[str], name: str) -> str:
    """The value of `--name VALUE` or `--name=VALUE` in an argument list."""
    for i, arg in enumerate(args):
        if arg == name:
            return args[i + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} not in {args}")


def host_port(address: str) -> tuple[str, int]:
    """(host, port) of `host:port` or of a URL."""
    parts = urlsplit(address if "//" in address else f"//{address}")
    assert parts.hostname is not None and parts.port is not None, address
    return parts.hostname, parts.port


def listen_port(endpoint: str) -> int:
    """The port of a listen address such as `0.0.0.0:4318` or `:9092`."""
    return int(endpoint.rsplit(":", 1)[1])


def sidecar_settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """deploy/rag-monitor.yaml as the container reads it: no RAGMON_ variable of this shell."""
    for name in os.environ:
        if name.startswith("RAGMON_"):
            monkeypatch.delenv(name)
    return load_settings(SIDECAR_CONFIG)


def kafka_service() -> str:
    """The Kafka broker: the service that advertises listeners (kafka-init runs the same image)."""
    names = [n for n, s in services().items() if "KAFKA_ADVERTISED_LISTENERS" in s.get("environment", {})]
    assert len(names) == 1, names
    return names[0]


def kafka_listeners() -> dict[str, tuple[str, int]]:
    """The Kafka service's advertised listeners: name -> (host, port)."""
    env = services()[kafka_service()]["environment"]
    out = {}
    for listener in env["KAFKA_ADVERTISED_LISTENERS"].split(","):
        name, address = listener.split("://")
        out[name] = host_port(address)
    return out


def collector_kafka_exporter() -> dict[str, Any]:
    exporter: dict[str, Any] = load(COLLECTOR)["exporters"]["kafka"]
    return exporter


# -- the tools' own checks ---------------------------------------------------------------------------


def test_prometheus_config_passes_promtool_with_its_rule_files() -> None:
    """Both rule files resolve next to prometheus.yml, as they do in the container."""
    done = subprocess.run(
        [tool("promtool"), "check", "config", str(PROMETHEUS)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 rule files found" in done.stdout
    for rules in ("rules.yml", "alerts.yml"):
        assert re.search(rf"Checking \S*{rules}\n\s+SUCCESS", done.stdout), done.stdout

    prometheus = service_by_image("prom/prometheus")
    config_file = PurePosixPath(flag(services()[prometheus]["command"], "--config.file"))
    assert config_file == container_path(prometheus, PROMETHEUS)
    for rules in load(PROMETHEUS)["rule_files"]:  # relative: they resolve from the config's directory
        assert container_path(prometheus, PROMETHEUS.parent / rules) == config_file.parent / rules


def test_alertmanager_config_passes_amtool() -> None:
    done = subprocess.run(
        [tool("amtool"), "check-config", str(ALERTMANAGER)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    alertmanager = service_by_image("prom/alertmanager")
    config_file = PurePosixPath(flag(services()[alertmanager]["command"], "--config.file"))
    assert config_file == container_path(alertmanager, ALERTMANAGER)


def test_compose_file_follows_the_compose_specification() -> None:
    schema = json.loads(COMPOSE_SCHEMA.read_text(encoding="utf-8"))
    # It names draft-07 without the trailing `#` that jsonschema looks drafts up by: say it here.
    assert "draft-07" in schema["$schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    doc = compose()
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]
    assert errors == []

    # The schema is strict enough to catch a typo: it is not a schema that accepts anything.
    broken = json.loads(json.dumps(doc))
    broken["services"][kafka_service()]["healthcheck"]["intervall"] = "10s"
    assert not validator.is_valid(broken)


def test_every_dependency_condition_can_be_met() -> None:
    """`service_healthy` waits forever on a service without a healthcheck, and
    `service_completed_successfully` on one that never exits."""
    all_services = services()
    for name, service in all_services.items():
        for dependency, spec in service.get("depends_on", {}).items():
            assert dependency in all_services, f"{name} depends on unknown {dependency}"
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in all_services[dependency], f"{name} waits for {dependency}"
            if condition == "service_completed_successfully":
                assert all_services[dependency].get("restart", "no") == "no", dependency


# -- the sidecar -------------------------------------------------------------------------------------


def test_sidecar_starts_with_the_mounted_config(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = sidecar_settings(monkeypatch)
    assert settings.judge.backend == "lexical"  # runs with no API key

    sidecar = service_mounting(SIDECAR_CONFIG)
    service = services()[sidecar]
    args = [*service.get("entrypoint", []), *service["command"]]
    assert args[:2] == ["rag-monitor", "run"]
    assert PurePosixPath(flag(args, "--config")) == container_path(sidecar, SIDECAR_CONFIG)
    # Its healthcheck asks the readiness probe on the metrics port.
    probe = " ".join(service["healthcheck"]["test"])
    assert f"127.0.0.1:{settings.metrics.port}/readyz" in probe


# -- the services find each other -------------------------------------------------------------------


def test_collector_writes_the_topic_the_sidecar_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = collector_kafka_exporter()
    settings = sidecar_settings(monkeypatch)
    assert exporter["traces"]["topic"] == settings.kafka.topic
    assert exporter["traces"]["encoding"] == "otlp_proto"
    assert exporter["partition_traces_by_id"] is True
    pipeline = load(COLLECTOR)["service"]["pipelines"]["traces"]
    assert "otlp" in pipeline["receivers"] and "kafka" in pipeline["exporters"]

    # The topic exists before either starts, with partitions for several sidecar replicas.
    init = services()["kafka-init"]
    created = re.findall(r"--topic (\S+) --partitions (\d+)", " ".join(init["command"]))
    assert (settings.kafka.topic, "3") in created
    assert settings.results.topic in {topic for topic, _ in created}
    collector, sidecar = (
        service_by_image("otel/opentelemetry-collector-contrib"),
        service_mounting(SIDECAR_CONFIG),
    )
    for name in (collector, sidecar):
        assert services()[name]["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"


def test_kafka_clients_bootstrap_from_the_kafka_service(monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = kafka_service()
    in_network = [(n, a) for n, a in kafka_listeners().items() if a[0] == kafka]
    assert len(in_network) == 1, kafka_listeners()
    listener, address = in_network[0]
    env = services()[kafka]["environment"]
    assert f"{listener}://:{address[1]}" in env["KAFKA_LISTENERS"].split(",")
    assert f"{listener}:PLAINTEXT" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")

    settings = sidecar_settings(monkeypatch)
    assert settings.kafka.security_protocol == "PLAINTEXT"
    assert host_port(settings.kafka.bootstrap_servers) == address
    assert [host_port(b) for b in collector_kafka_exporter()["brokers"]] == [address]
    init = " ".join(services()["kafka-init"]["command"])
    assert set(re.findall(r"--bootstrap-server (\S+)", init)) == {f"{address[0]}:{address[1]}"}


def test_prometheus_scrapes_the_sidecar(monkeypatch: pytest.MonkeyPatch) -> None:
    sidecar = f"{service_mounting(SIDECAR_CONFIG)}:{sidecar_settings(monkeypatch).metrics.port}"
    jobs = {
        job["job_name"]: [t for config in job["static_configs"] for t in config["targets"]]
        for job in load(PROMETHEUS)["scrape_configs"]
        if job.get("metrics_path", "/metrics") == "/metrics"
    }
    assert [targets for targets in jobs.values() if sidecar in targets] == [[sidecar]], jobs
    # The alert rules select the sidecar's series by job name (RagmonSidecarAbsent...): that job.
    sidecar_job = next(name for name, targets in jobs.items() if sidecar in targets)
    assert set(re.findall(r'job="([^"]+)"', ALERTS.read_text(encoding="utf-8"))) == {sidecar_job}


def test_alerts_go_to_the_alertmanager_service(monkeypatch: pytest.MonkeyPatch) -> None:
    alertmanager = f"{service_by_image('prom/alertmanager')}:{ALERTMANAGER_PORT}"
    managers = load(PROMETHEUS)["alerting"]["alertmanagers"]
    assert [t for m in managers for c in m["static_configs"] for t in c["targets"]] == [alertmanager]
    # The sidecar sends its own drift alarms there too.
    url = sidecar_settings(monkeypatch).alerts.alertmanager_url
    assert url is not None
    assert "{}:{}".format(*host_port(url)) == alertmanager


def test_example_service_exports_spans_to_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's own CLI, given the compose command, exports OTLP/HTTP to the Collector service
    on its HTTP receiver port and serves on all interfaces on the published port."""
    import examples.rag_service.__main__ as example

    dockerfile = (DEPLOY / "example.Dockerfile").read_text(encoding="utf-8")
    assert 'ENTRYPOINT ["python", "-m", "examples.rag_service"]' in dockerfile
    name = service_built_from("deploy/example.Dockerfile")
    service = services()[name]

    exporters: list[dict[str, Any]] = []
    served: list[dict[str, Any]] = []

    def configure(service_name: str, **kwargs: Any) -> SimpleNamespace:
        exporters.append({"service_name": service_name, **kwargs})
        stats = SimpleNamespace(snapshot=dict)
        return SimpleNamespace(force_flush=lambda _ms: True, shutdown=lambda: None, stats=stats)

    monkeypatch.setattr(example, "configure", configure)
    monkeypatch.setattr(example, "create_app", lambda config, **kwargs: "app")
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: served.append(kw))
    monkeypatch.setattr("signal.signal", lambda *args: None)  # main() sets a SIGTERM handler
    assert example.main([str(a) for a in service["command"]]) == 0

    [exported] = exporters
    assert exported["exporter"] == "otlp" and exported["enabled"] is True
    endpoint = urlsplit(exported["otlp_endpoint"])
    collector = service_by_image("otel/opentelemetry-collector-contrib")
    http_receiver = load(COLLECTOR)["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    assert (endpoint.hostname, endpoint.port, endpoint.path) == (
        collector,
        listen_port(http_receiver),
        "/v1/traces",
    )
    port = listen_port(http_receiver)
    assert ("127.0.0.1", port, port) in published(services()[collector])

    [uvicorn_args] = served
    assert uvicorn_args["host"] == "0.0.0.0"
    assert ("127.0.0.1", uvicorn_args["port"], uvicorn_args["port"]) in published(service)


def test_grafana_reads_the_prometheus_service_and_the_dashboards() -> None:
    grafana = service_by_image("grafana/grafana")
    [datasource] = load(GRAFANA / "datasources" / "prometheus.yml")["datasources"]
    assert datasource["type"] == "prometheus" and datasource["isDefault"] is True
    assert host_port(datasource["url"]) == (service_by_image("prom/prometheus"), PROMETHEUS_PORT)

    assert container_path(grafana, GRAFANA) == PurePosixPath("/etc/grafana/provisioning")
    [provider] = load(GRAFANA / "dashboards" / "rag-monitor.yml")["providers"]
    assert provider["type"] == "file"
    assert PurePosixPath(provider["options"]["path"]) == container_path(grafana, REPO / "dashboards")


def test_every_mounted_and_built_file_exists() -> None:
    for name, service in services().items():
        for source, _ in bind_mounts(name):
            assert source.exists(), f"{name} mounts {source}, which is not in the repository"
        build = service.get("build")
        if build:
            context = (COMPOSE.parent / build["context"]).resolve()
            assert (context / build.get("dockerfile", "Dockerfile")).is_file(), f"{name} builds from it"


def dockerignore_patterns(context: Path, dockerfile: Path) -> list[str]:
    """The ignore file BuildKit applies: `<dockerfile>.dockerignore` beside the Dockerfile, else
    the context's `.dockerignore`."""
    for candidate in (dockerfile.with_name(f"{dockerfile.name}.dockerignore"), context / ".dockerignore"):
        if candidate.is_file():
            lines = candidate.read_text(encoding="utf-8").splitlines()
            return [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return []


def _pattern(glob: str) -> re.Pattern[str]:
    out = ""
    for part in re.split(r"(\*\*/|\*\*|\*|\?)", glob.strip("/")):
        out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
    return re.compile(out)


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent directories wins;
    `!` re-includes."""
    prefixes = ["/".join(path.split("/")[: i + 1]) for i in range(path.count("/") + 1)]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = _pattern(pattern.removeprefix("!"))
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not negated
    return excluded


def test_builds_see_every_file_they_copy() -> None:
    """A COPY of a path the ignore file leaves out fails the build (`"/examples": not found`)."""
    for name, service in services().items():
        build = service.get("build")
        if not build:
            continue
        context = (COMPOSE.parent / build["context"]).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        patterns = dockerignore_patterns(context, dockerfile)
        for line in dockerfile.read_text(encoding="utf-8").splitlines():
            words = line.split()
            if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
                continue
            for source in [w for w in words[1:-1] if not w.startswith("--")]:
                files = [context / source] if (context / source).is_file() else []
                files += [f for f in sorted((context / source).rglob("*.py"))[:1]]
                assert files, f"{name}: {dockerfile.name} copies {source}, which is not in the repository"
                for f in files:
                    relative = f.relative_to(context).as_posix()
                    assert not ignored(relative, patterns), f"{name}: {relative} is not in the build context"


def test_readme_points_at_published_ports() -> None:
    ports = {host for service in services().values() for _, host, _ in published(service)}
    text = README.read_text(encoding="utf-8")
    used = {int(p) for p in re.findall(r"(?:localhost|127\.0\.0\.1):(\d+)", text)}
    assert used, "deploy/README.md names the URLs to open"
    assert used <= ports, f"not published by the stack: {sorted(used - ports)}"
    assert "docker compose -f deploy/docker-compose.yml up" in text


def test_published_ports_are_bound_to_loopback() -> None:
    """Nothing in the stack authenticates: a port published on every interface would hand Kafka,
    the Collector and the example service's /admin to the network."""
    ports = {name: published(service) for name, service in services().items()}
    assert any(ports.values())
    for name, specs in ports.items():
        for address, host, container in specs:
            assert address == "127.0.0.1", (
                f"{name} publishes {host}:{container} on {address or 'every interface'}"
            )
    text = COMPOSE.read_text(encoding="utf-8")
    assert not re.search(r'^\s*-\s*"?\d+:\d+"?\s*$', text, re.MULTILINE)  # no bare PORT:PORT line


def test_grafana_is_no_anonymous_admin() -> None:
    env = services()[service_by_image("grafana/grafana")].get("environment", {})
    assert isinstance(env, dict)
    if str(env.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "true":
        assert env.get("GF_AUTH_ANONYMOUS_ORG_ROLE") == "Viewer"  # anonymous visitors only view
    # The admin password is never Grafana's default admin/admin nor written in the file: compose
    # takes it from the environment and refuses to start without it.
    password = str(env.get("GF_SECURITY_ADMIN_PASSWORD", ""))
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", password), password
    assert str(env.get("GF_USERS_ALLOW_SIGN_UP", "")).lower() == "false"
