"""Files written for others to read (golden sets, baselines, reports) are replaced whole, and keep
the permissions a reader relies on: not a temporary file's owner-only 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from monitor.plumbing.files import write_atomic


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("before", [0o644, 0o640, 0o600])
def test_a_rewritten_file_keeps_its_permissions(tmp_path: Path, before: int) -> None:
    golden = tmp_path / "golden.jsonl"
    golden.write_text("{}\n")
    golden.chmod(before)
    write_atomic(golden, '{"id": "a"}\n')
    assert golden.read_text() == '{"id": "a"}\n'
    assert mode(golden) == before
    assert [p.name for p in tmp_path.iterdir()] == ["golden.jsonl"]  # no temporary file left


def test_a_new_file_gets_what_open_would_give_it(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "reports" / "baseline.json", b"{}\n")
        (tmp_path / "plain").write_text("")
    finally:
        os.umask(old)
    assert mode(tmp_path / "reports" / "baseline.json") == mode(tmp_path / "plain") == 0o644
