"""Configuration: file, environment and flags, and errors that name the bad field."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import ConfigError, load_settings
from monitor.slices import BoundedLabel


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
    assert s.metrics.port == 9612 and s.kafka.topic != "" and s.results.topic is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("sampling:\n  rate: 2\n", "sampling.rate"),
        ("kafka:\n  bogus: 1\n", "kafka.bogus"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("kafka: [\n", "cannot read config file"),
    ],
)
def test_bad_config_names_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_settings(cfg)


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
