"""Configuration: file, environment and flags; errors that name the bad field; `config show`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result
from typer.testing import CliRunner

from monitor.app.config import SECRET_MASK, ConfigError, Settings, load_settings
from monitor.cli import app
from monitor.contracts.slices import BoundedLabel


def test_file_env_and_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("kafka:\n  topic: from_file\n  group_id: g_file\nsampling:\n  rate: 0.2\n")
    monkeypatch.setenv("RAGMON_KAFKA__GROUP_ID", "g_env")
    monkeypatch.setenv("RAGMON_KAFKA__BOOTSTRAP_SERVERS", "env:9092")
    s = load_settings(
        cfg, {"kafka": {"bootstrap_servers": "flag:1", "topic": None}, "sampling": {"rate": None}}
    )
    assert s.kafka.topic == "from_file"
    assert s.kafka.group_id == "g_env"  # env beats the file
    assert s.kafka.bootstrap_servers == "flag:1"  # flags beat env
    assert s.sampling.rate == 0.2
    assert s.metrics.port == 9612 and s.kafka.topic != "" and s.results.topic == "g_env-judgements"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("sampling:\n  rate: 2\n", "sampling.rate"),
        ("kafka:\n  bogus: 1\n", "kafka.bogus"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("kafka: [\n", "bad.yaml, line 2, column 1: invalid YAML: expected the node content"),
    ],
)
def test_bad_config_names_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")) as raised:
        load_settings(cfg)
    assert "<unicode string>" not in str(raised.value)


def test_query_type_allow_list_is_bounded() -> None:
    qt = BoundedLabel(["lookup", "other", "unknown"])
    assert qt.bound("Lookup") == ("lookup", False)
    assert qt.bound(None) == ("unknown", False)
    assert {qt.bound(f"req-{i}")[0] for i in range(1000)} == {"other"}


def test_service_label_takes_first_n_then_other() -> None:
    svc = BoundedLabel(None, capacity=3, missing="unknown_service", normalize=False)
    names = [svc.bound(f"Svc-{i}")[0] for i in range(10)]
    assert names[:3] == ["Svc-0", "Svc-1", "Svc-2"] and set(names[3:]) == {"other"}
    assert svc.bound("Svc-1")[0] == "Svc-1"


# -- judge.options belong to the backend ------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (
            {"judge": {"options": {"model": "claude-haiku-4-5"}}},
            "judge.options: 'model' is not an option of the lexical judge (options: answerable_coverage, ",
        ),
        (
            {"judge": {"backend": "anthropic", "options": {"modle": "claude-haiku-4-5"}}},
            "judge.options: 'modle' is not an option of the anthropic judge (options: api_key, ",
        ),
        (
            {"judge": {"backend": "openai", "options": {"max_concurrency": 0}}},
            "judge.options: max_concurrency: Input should be greater than or equal to 1",
        ),
        ({"judge": {"options": {"support_threshold": "high"}}}, "judge.options: support_threshold: "),
        (
            {"judge": {"backend": "none", "options": {"model": "m"}}},
            "judge.options: no option applies: the judge is off",
        ),
    ],
)
def test_judge_options_the_backend_does_not_have_stop_start_up(
    overrides: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, overrides)
    assert needle in str(info.value)


def test_judge_options_are_checked_without_an_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    options = {"model": "claude-sonnet-4-5", "api_key_file": "/run/secrets/none", "max_concurrency": 2}
    s = load_settings(None, {"judge": {"backend": "anthropic", "options": options}})
    assert s.judge.options == options
    lexical = {"support_threshold": 0.5, "query_types": ["lookup"]}
    assert load_settings(None, {"judge": {"options": lexical}}).judge.options == lexical


def test_options_are_checked_against_the_backend_in_effect(tmp_path: Path) -> None:
    """The file's LLM options with `--judge anthropic` are fine; the same file alone is not."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("judge:\n  options:\n    model: claude-haiku-4-5\n")
    assert load_settings(cfg, {"judge": {"backend": "anthropic"}}).judge.backend == "anthropic"
    with pytest.raises(ConfigError, match="not an option of the lexical judge"):
        load_settings(cfg)


# -- kafka.auto_offset_reset -------------------------------------------------------------------------


def test_a_new_group_starts_from_now_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().kafka.auto_offset_reset == "latest"
    monkeypatch.setenv("RAGMON_KAFKA__AUTO_OFFSET_RESET", "earliest")
    assert load_settings().kafka.auto_offset_reset == "earliest"
    monkeypatch.setenv("RAGMON_KAFKA__AUTO_OFFSET_RESET", "beginning")
    with pytest.raises(
        ConfigError, match=r"kafka\.auto_offset_reset: Input should be 'earliest' or 'latest'"
    ):
        load_settings()


# -- internal names derived from the deployment's group id --------------------------------------------


def _names(s: Settings) -> tuple[str, str, str, str | None]:
    return s.pipeline.samples_topic, s.pipeline.judge_group_id, s.pipeline.drift_group_id, s.results.topic


def test_internal_names_derive_from_the_group_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two deployments on one cluster share no topic and no group unless told to."""
    assert _names(load_settings()) == (
        "rag-monitor-samples",
        "rag-monitor-judge",
        "rag-monitor-drift",
        "rag-monitor-judgements",
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text("kafka:\n  group_id: staging\n")
    assert _names(load_settings(cfg)) == (
        "staging-samples",
        "staging-judge",
        "staging-drift",
        "staging-judgements",
    )
    # From the group in effect: an environment override of the group renames them all.
    monkeypatch.setenv("RAGMON_KAFKA__GROUP_ID", "prod")
    assert _names(load_settings(cfg)) == ("prod-samples", "prod-judge", "prod-drift", "prod-judgements")
    assert _names(load_settings(cfg, {"kafka": {"group_id": "flag"}}))[0] == "flag-samples"


def test_a_set_internal_name_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The upgrade path: the old global names, set explicitly, are kept; the others still derive."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "kafka:\n  group_id: prod\npipeline:\n  samples_topic: rag_samples\n"
        "results:\n  topic: rag_judgements\n"
    )
    assert _names(load_settings(cfg)) == ("rag_samples", "prod-judge", "prod-drift", "rag_judgements")
    monkeypatch.setenv("RAGMON_PIPELINE__JUDGE_GROUP_ID", "rag-monitor-judge")
    monkeypatch.setenv("RAGMON_PIPELINE__DRIFT_GROUP_ID", "rag-monitor-drift")
    assert _names(load_settings(cfg)) == (
        "rag_samples",
        "rag-monitor-judge",
        "rag-monitor-drift",
        "rag_judgements",
    )
    assert load_settings(cfg, {"results": {"topic": "flag_topic"}}).results.topic == "flag_topic"
    with pytest.raises(ConfigError, match=r"pipeline\.samples_topic: String should have at least 1"):
        load_settings(None, {"pipeline": {"samples_topic": ""}})


def test_the_results_topic_can_still_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("kafka:\n  group_id: prod\nresults:\n  topic: null\n")
    assert load_settings(cfg).results.topic is None
    monkeypatch.setenv("RAGMON_RESULTS__TOPIC", "")  # an environment variable cannot be null
    assert load_settings().results.topic is None


def test_config_show_prints_the_derived_names() -> None:
    result = CliRunner().invoke(app, ["config", "show"], env={"RAGMON_KAFKA__GROUP_ID": "staging"})
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.stdout)
    assert shown["pipeline"]["samples_topic"] == "staging-samples"
    assert shown["pipeline"]["judge_group_id"] == "staging-judge"
    assert shown["pipeline"]["drift_group_id"] == "staging-drift"
    assert shown["results"]["topic"] == "staging-judgements"


# -- `rag-monitor config show` -----------------------------------------------------------------------


def test_config_show_prints_the_effective_config_with_secrets_redacted(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "kafka": {"topic": "from_file", "security_protocol": "SASL_SSL", "sasl_username": "monitor"},
                "judge": {
                    "backend": "openai",
                    "options": {"model": "local", "api_key": "sk-options-secret", "max_tokens": 512},
                },
                "events": {
                    "endpoint": "https://user:url-secret@collector:4318/v1/logs",
                    "headers": {"Authorization": "Bearer header-secret"},
                },
            }
        )
    )
    env = {"RAGMON_KAFKA__SASL_PASSWORD": "env-secret", "RAGMON_KAFKA__TOPIC": "from_env"}
    result = CliRunner().invoke(app, ["config", "show", "--config", str(cfg)], env=env)
    assert result.exit_code == 0, result.output
    assert "-secret" not in result.stdout  # every value above ends so (field names may say "secret")
    shown = yaml.safe_load(result.stdout)
    assert shown["kafka"]["topic"] == "from_env"  # the environment beats the file
    assert shown["kafka"]["sasl_password"] == SECRET_MASK  # a SecretStr field
    assert shown["kafka"]["sasl_username"] == "monitor"
    options = shown["judge"]["options"]
    assert options == {"model": "local", "api_key": SECRET_MASK, "max_tokens": 512}
    assert shown["events"]["endpoint"] == "https://collector:4318/v1/logs"
    assert "'**********'" in result.stdout  # as pydantic prints a secret
    assert shown["kafka"]["auto_offset_reset"] == "latest" and shown["metrics"]["port"] == 9612


@pytest.mark.parametrize("key", ["api_key", "X-Api-Key", "sasl_oauth_token", "PASSWORD", "credentials"])
def test_free_form_values_under_secret_names_are_redacted(key: str) -> None:
    s = load_settings()  # options set afterwards: no backend has all these names
    s.judge.options = {key: {"nested": "value"}, "retries": 3, "max_tokens": 64}
    assert s.redacted()["judge"]["options"] == {key: SECRET_MASK, "retries": 3, "max_tokens": 64}


# -- `rag-monitor run` with a bad value: `error: ...` lines, exit 2, no traceback -------------------


def _run(tmp_path: Path, config: str | None, *flags: str, **env: str | None) -> Result:
    args = ["run", "--bootstrap-servers", "127.0.0.1:1", *flags]
    if config is not None:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(config)
        args += ["--config", str(cfg)]
    return CliRunner().invoke(app, args, env={"ANTHROPIC_API_KEY": None, **env})


@pytest.mark.parametrize(
    ("config", "flags", "env", "needle"),
    [
        ("kafka: [\n", (), {}, "c.yaml, line 2, column 1: invalid YAML"),
        ("kafka:\n  bogus: 1\n", (), {}, "kafka.bogus: Extra inputs are not permitted"),
        ("sampling:\n  rate: lots\n", (), {}, "sampling.rate: Input should be a valid number"),
        (None, ("--sample-rate", "2"), {}, "sampling.rate: Input should be less than or equal to 1"),
        (None, (), {"RAGMON_KAFKA__MAX_POLL_RECORDS": "many"}, "kafka.max_poll_records: Input should be"),
        (
            None,
            (),
            {"RAGMON_JUDGE__OPTIONS": "{model: x"},
            'environment: error parsing value for field "judge"',
        ),
        (
            "judge:\n  options:\n    model: m\n",
            (),
            {},
            "judge.options: 'model' is not an option of the lexical",
        ),
        (None, ("--judge", "anthropic"), {}, "error: no Anthropic API key"),
        (
            "judge:\n  backend: anthropic\n  options:\n    api_key_file: /nonexistent/key\n",
            (),
            {},
            "error: [Errno 2] No such file or directory: '/nonexistent/key'",
        ),
    ],
)
def test_run_with_a_bad_value_says_error_and_exits_2(
    tmp_path: Path, config: str | None, flags: tuple[str, ...], env: dict[str, str], needle: str
) -> None:
    result = _run(tmp_path, config, *flags, **env)
    assert result.exit_code == 2, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)  # typer.Exit: nothing escaped
    assert result.stderr.startswith("error: ") and needle in result.stderr
    assert "Traceback" not in result.output


def test_missing_config_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["config", "show", "--config", str(tmp_path / "absent.yaml")])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: cannot read config file {tmp_path / 'absent.yaml'}: ")
    assert result.stderr.count("\n") == 1


def test_the_process_prints_no_traceback(tmp_path: Path) -> None:
    """The real entry point, as a process: tracebacks and asyncio's warnings at exit show only there."""
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY" and not k.startswith("RAGMON_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor.cli",
            "run",
            "--judge",
            "anthropic",
            "--bootstrap-servers",
            "127.0.0.1:1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    # One line: no traceback, and no warning about what start-up left half-built.
    assert proc.stderr.startswith("error: no Anthropic API key") and proc.stderr.count("\n") == 1, proc.stderr


def test_an_llm_judge_spends_at_most_the_default_cap_unless_told(tmp_path: Path) -> None:
    """`config show` states the cap an LLM judge gets when no USD limit is configured; a configured
    limit, or an explicit null, is kept; the offline judge costs nothing and gets none."""

    def shown(judge: dict[str, Any]) -> Any:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(yaml.safe_dump({"judge": judge}))
        result = CliRunner().invoke(app, ["config", "show", "--config", str(cfg)])
        assert result.exit_code == 0, result.output
        return yaml.safe_load(result.stdout)["judge"]["budget"]["usd_per_day"]

    assert shown({"backend": "anthropic"}) == 10.0
    assert shown({"backend": "openai", "budget": {"calls_per_minute": 100}}) == 10.0
    assert shown({"backend": "anthropic", "budget": {"usd_per_day": 2.5}}) == 2.5
    assert shown({"backend": "anthropic", "budget": {"usd_per_day": None}}) is None
    assert shown({"backend": "lexical"}) is None


def test_config_show_says_how_many_requests_a_drift_slice_takes_to_arm(tmp_path: Path) -> None:
    """Below the YAML (as comments: it still parses to the same configuration), the arithmetic of
    a slice's arming: the defaults' 1,500 judged records at 5 % are 30,000 requests of a query
    type, at 2 a second ~4.2 h; a per-query-type rate and the per-window floor likewise."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"sampling": {"rates": {"comparison": 0.2, "other": 0}}}))
    args = ["config", "show", "--config", str(cfg)]
    result = CliRunner().invoke(app, [*args, "--requests-per-second", "2"])
    assert result.exit_code == 0, result.output
    comments = [ln for ln in result.stdout.splitlines() if ln.startswith("#")]
    said = " ".join(ln.lstrip("# ") for ln in comments)
    assert said.startswith("drift: each slice (query type, metric) arms after 1,500 judged records")
    assert "at sampling.rate 0.05 that is ~30,000 requests of a query type; at 2 req/s of it ~4.2 h" in said
    assert (
        "at sampling.rates comparison: 0.2 that is ~7,500 requests of a query type; at 2 req/s of it ~62 min"
        in said
    )
    assert "sampling.rates other: 0: nothing is judged, so those slices arm only when pinned" in said
    assert (
        "at least 20 records of a query type are judged per 3600 s, so one with that many requests "
        "arms within ~3.1 d" in said
    )
    assert "pin a baseline (rag-monitor baseline pin)" in said
    assert yaml.safe_load(result.stdout) == yaml.safe_load(CliRunner().invoke(app, args).stdout)
    assert yaml.safe_load(result.stdout)["alerts"]["drift"]["reference_records"] == 1500

    # Without a rate, how to get the time; with a pinned baseline, what it arms.
    cfg.write_text(
        yaml.safe_dump({"alerts": {"drift": {"baseline_file": "b.json", "reference_records": 200}}})
    )
    said = " ".join(
        ln.lstrip("# ") for ln in CliRunner().invoke(app, args).stdout.splitlines() if ln.startswith("#")
    )
    assert "arms after 200 judged records" in said and "~4,000 requests" in said and "req/s of it" not in said
    assert "--requests-per-second Q" in said
    assert "alerts.drift.baseline_file is set: the slices it pins are armed from start-up" in said


def test_config_show_masks_credentials_in_urls(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "alerts": {
                    "webhook_url": "https://hooks.slack.com/services/T0AAA/B0BBB/hookpathsecret",
                    "alertmanager_url": "https://amuser:ampasswordsecret@alertmanager:9093",
                    "dashboard_url": "https://grafana.example/d/x?auth_token=querysecret",
                },
                "golden": {
                    "file": str(tmp_path / "g.jsonl"),
                    "target": "https://rag:targetpasswordsecret@rag.example:8443/query",
                },
                "judge": {"backend": "openai", "options": {"base_url": "http://u:optsecret@llm:8000/v1"}},
            }
        )
    )
    result = CliRunner().invoke(app, ["config", "show", "--config", str(cfg)])
    assert result.exit_code == 0, result.output
    for part in ("hookpathsecret", "T0AAA", "ampasswordsecret", "amuser", "querysecret", "targetpassword"):
        assert part not in result.stdout, part
    assert "optsecret" not in result.stdout
    shown = yaml.safe_load(result.stdout)
    assert shown["alerts"]["webhook_url"] == "https://hooks.slack.com/***"  # the path is the secret
    assert shown["alerts"]["alertmanager_url"] == "https://***@alertmanager:9093"
    assert shown["alerts"]["dashboard_url"] == "https://grafana.example/d/x?***"
    assert shown["golden"]["target"] == "https://***@rag.example:8443/query"  # where it goes stays visible


GRAFANA = "https://grafana.example.com/explore?orgId=1&left=%7B%22query%22:%22{trace_id}%22%7D"


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("https://tempo.example.com/trace/", r"must contain the placeholder \{trace_id\}"),
        ("ftp://jaeger.example.com/trace/{trace_id}", r"http:// or https://"),
        ("javascript:alert('{trace_id}')", r"http:// or https://"),
        ("https:///trace/{trace_id}", r"http:// or https://"),
        ("https://me:pw@jaeger.example.com/trace/{trace_id}", r"must not carry credentials"),
        ("https://grafana.example.com/explore?auth_token=x&q={trace_id}", r"'auth_token' looks like"),
        ("https://jaeger.example.com/trace/{trace_id}\n", r"spaces or control characters"),
    ],
)
def test_a_bad_trace_url_template_stops_the_start(template: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=rf"alerts\.trace_url_template: .*{needle}"):
        load_settings(None, {"alerts": {"trace_url_template": template}})


@pytest.mark.parametrize("template", [GRAFANA, "http://jaeger:16686/trace/{trace_id}", ""])
def test_a_trace_url_template_is_taken_as_given(template: str) -> None:
    """Grafana's Explore URLs hold JSON braces of their own: only {trace_id} is a placeholder."""
    settings = load_settings(None, {"alerts": {"trace_url_template": template}})
    assert settings.alerts.trace_url_template == (template or None)
