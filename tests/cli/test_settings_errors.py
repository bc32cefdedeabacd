"""Every command that reads the settings fails the same way on a bad file: one `error:` line that
names the file, then a line per bad key, exit 2, nothing started (`monitor.cli.settings.load_or_exit`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from monitor.cli import app


@pytest.fixture
def bad_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text("kafka:\n  topic: spans\njudge:\n  workers: -3\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["run"],
        ["config", "show"],
        ["calibrate", "--labels", "labels.jsonl"],
        ["review", "--labels", "labels.jsonl", "--topic", "rag_review"],
    ],
    ids=["run", "config-show", "calibrate", "review"],
)
def test_a_bad_config_is_one_line_and_exit_2(args: list[str], bad_config: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [*args, "--config", str(bad_config)], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert str(bad_config) in errors[0], errors[0]
    assert "  judge.workers: Input should be greater than 0" in result.output.splitlines()
    assert "Traceback" not in result.output


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yaml"
    result = CliRunner().invoke(app, ["config", "show", "--config", str(missing)])
    assert result.exit_code == 2
    assert str(missing) in result.output and result.output.startswith("error:")
