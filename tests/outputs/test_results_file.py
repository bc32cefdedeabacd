"""The results file stays whole and bounded: a full disk is counted and retried without a torn or
duplicated line, it rotates by size keeping `file_keep` files, follows logrotate, and cuts a torn
tail when opened."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import eventually, result_ids, running, sample, settings_for

from monitor.contracts.metrics import Metrics
from monitor.demo.broker import EmbeddedBroker
from monitor.demo.workload import generate, produce
from monitor.outputs.result_sinks import FileSink, reopen_on_sighup

ERRORS = "ragmon_results_write_errors_total"


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a disk this test can fill."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    """Take every free byte of `path`'s filesystem."""
    with path.open("wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)


def lines(n: int, size: int, tag: str = "r") -> list[tuple[str, bytes]]:
    """n results lines of about `size` bytes each, numbered."""
    return [("lookup", json.dumps({"id": f"{tag}{i}", "pad": "x" * size}).encode() + b"\n") for i in range(n)]


def listing(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.iterdir()}


def ids(path: Path) -> list[str]:
    text = path.read_bytes()
    assert not text or text.endswith(b"\n"), "a torn last line"
    return [json.loads(line)["id"] for line in text.splitlines()]


async def test_disk_full_is_counted_and_the_retry_writes_each_line_once(tmpfs: Path) -> None:
    metrics = Metrics()
    path = tmpfs / "results.jsonl"
    sink = FileSink(path, errors=metrics.results_write_errors)
    await sink.write(lines(1, 50, "a"))  # the file's first page is partly used
    fill(tmpfs / "ballast")
    batch = lines(3, 2000, "b")  # part of it fits in that page: a short write, then ENOSPC
    with pytest.raises(OSError, match="No space left"):
        await sink.write(batch)
    with pytest.raises(OSError, match="No space left"):
        await sink.write(batch)  # the stage's retry, still full
    assert metrics.registry.get_sample_value(ERRORS, {"reason": "no_space"}) == 2
    assert ids(path) == ["a0"], "the failed batch left bytes behind"
    (tmpfs / "ballast").unlink()
    await sink.write(batch)
    await sink.write(lines(1, 10, "c"))
    assert ids(path) == ["a0", "b0", "b1", "b2", "c0"]
    await sink.close()


async def test_sidecar_on_a_full_disk_counts_and_then_writes_every_result_once(
    broker: EmbeddedBroker, topic: str, tmpfs: Path
) -> None:
    bs = broker.bootstrap_servers
    results = tmpfs / "results.jsonl"
    settings = settings_for(bs, topic, results)
    # ~4 KiB a results line: nine fit the 64 KiB disk once the ballast is gone.
    first, second = generate(3, seed=3), generate(6, seed=4)
    async with running(settings) as sidecar:
        await produce(bs, topic, first.pairs())
        want_first = {t.trace_id for t in first.traces}
        await eventually(lambda: result_ids(results) >= want_first, what="results before the disk fills")
        fill(tmpfs / "ballast")
        await produce(bs, topic, second.pairs())
        await eventually(
            lambda: sample(sidecar, ERRORS, reason="no_space") > 0, within=60, what="the full disk counted"
        )
        (tmpfs / "ballast").unlink()
        want = want_first | {t.trace_id for t in second.traces}
        await eventually(
            lambda: result_ids(results) >= want, within=60, what="every result after space freed"
        )
    text = results.read_bytes()
    assert text.endswith(b"\n")
    written = [json.loads(line)["trace_id"] for line in text.splitlines()]
    assert sorted(written) == sorted(want), "a result lost or written twice"


async def test_rotates_by_size_and_keeps_file_keep_files(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    sink = FileSink(path, max_bytes=1000, keep=2)
    for i in range(10):
        await sink.write(lines(1, 300, f"n{i}-"))  # ~320 bytes a line: three to a file
    await sink.close()
    sizes = listing(tmp_path)
    assert sorted(sizes) == ["results.jsonl", "results.jsonl.1", "results.jsonl.2"]
    assert max(sizes.values()) <= 1000
    assert ids(path) == ["n9-0"]
    assert ids(tmp_path / "results.jsonl.1") == ["n6-0", "n7-0", "n8-0"]
    assert ids(tmp_path / "results.jsonl.2") == ["n3-0", "n4-0", "n5-0"]


async def test_a_file_rotated_away_by_another_tool_is_followed(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    sink = FileSink(path)
    await sink.write(lines(1, 10, "old"))
    path.rename(tmp_path / "results.jsonl-20261201")  # logrotate's rename (no signal)
    await sink.write(lines(1, 10, "new"))
    assert ids(path) == ["new0"]
    assert ids(tmp_path / "results.jsonl-20261201") == ["old0"]
    path.unlink()  # deleted away
    await sink.write(lines(1, 10, "after"))
    assert ids(path) == ["after0"]
    os.truncate(path, 0)  # logrotate's copytruncate
    await sink.write(lines(1, 10, "t"))
    assert ids(path) == ["t0"]
    await sink.close()


async def test_a_torn_tail_is_cut_when_the_file_is_opened(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"id":"whole"}\n{"id":"to')  # a crash mid-line
    metrics = Metrics()
    sink = FileSink(path, errors=metrics.results_write_errors)
    await sink.write(lines(1, 10, "next"))
    await sink.close()
    assert ids(path) == ["whole", "next0"]
    assert metrics.registry.get_sample_value(ERRORS, {"reason": "torn_tail"}) == 1


async def test_sighup_reopens_the_file(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    sink = FileSink(path)
    loop = asyncio.get_running_loop()
    reopen_on_sighup()
    try:
        await sink.write(lines(1, 10, "a"))
        with path.open("ab") as other:  # another writer leaves half a line
            other.write(b'{"id":"to')
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.sleep(0.1)  # the handler runs on the loop
        await sink.write(lines(1, 10, "b"))  # reopened: the half line cut first
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        await sink.close()
    assert ids(path) == ["a0", "b0"]
