"""The compiled extensions under AddressSanitizer and UndefinedBehaviorSanitizer: a short run of
bench/fuzz.py's differential fuzzing (decoder, the stage's feed loop, assembler, accounting), and
the Kafka record reader's comparisons with aiokafka (tests/kafka/test_records.py), on
the sanitised build, which `make sanitize` puts in build/sanitize (rebuilt only when a source is
newer). The run fails on a sanitiser report (the process aborts) or any difference between the
compiled and pure-Python results; the last two tests show that both would be caught.

`RAGMON_REQUIRE_COMPILED=1` (set by `make test`) turns a missing libasan into a failure rather
than a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0")
ALL_SANITISED = "sanitised: monitor.ingest._wire, monitor.ingest._assembly, monitor.ingest._accounting"


def _libasan() -> str | None:
    """gcc's libasan.so (gcc prints the bare name when it has none)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    path = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


@pytest.fixture(scope="module")
def sanitized_env() -> dict[str, str]:
    libasan = _libasan()
    if libasan is None or shutil.which("make") is None:
        if REQUIRED:
            pytest.fail("gcc has no libasan.so (Debian: libgcc-<version>-dev), or no make")
        pytest.skip("no libasan for gcc here")
    build = subprocess.run(
        ["make", "-s", "sanitize", f"SAN_PY={sys.executable}"], cwd=ROOT, capture_output=True, text=True
    )
    assert build.returncode == 0, build.stdout + build.stderr
    env = {k: v for k, v in os.environ.items() if k != "RAGMON_PURE_PYTHON"}
    return env | {
        "LD_PRELOAD": libasan,
        "PYTHONMALLOC": "malloc",  # every object its own allocation, so ASan sees past its end
        "PYTHONPATH": str(ROOT / "build" / "sanitize"),
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",  # CPython leaks by design
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }


def fuzz(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fuzz.py"), "--require-sanitized", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_short_sanitised_fuzz_run_finds_nothing(sanitized_env: dict[str, str]) -> None:
    """Every seed (each of `_wire.c`'s limits and past it, messages of 7 to 9 MB) and mutations
    of them, on the sanitised extensions: no report, no difference."""
    run = fuzz(
        sanitized_env, "--count", "1500", "--seconds", "75", "--account-every", "700", "--big-every", "500"
    )
    out = run.stdout + run.stderr
    assert ALL_SANITISED in run.stdout, out[-3000:]
    assert "Sanitizer" not in run.stderr and "runtime error" not in run.stderr, run.stderr[-6000:]
    assert run.returncode == 0, out[-6000:]
    assert "findings: 0 {}" in run.stdout
    tried = int(run.stdout.split("inputs tried: ")[1].split()[0])
    assert tried >= 300  # the seeds and some mutations of them, however slow the machine


def test_the_record_reader_reads_and_fails_as_aiokafka_under_the_sanitisers(
    sanitized_env: dict[str, str],
) -> None:
    """Every kind of batch, 3,000 damaged record sets, `getall`'s runs and compressed batches,
    through the sanitised `_records.c`: no report, the same records and exceptions as aiokafka's."""
    checks = (
        "test_every_kind_of_batch_reads_as_aiokafka_reads_it",
        "test_damaged_record_sets_fail_as_aiokafka_fails_them",
        "test_getall_takes_what_aiokafka_takes_in_runs_of_max_records",
        "test_compressed_batches_are_read_here_not_handed_to_aiokafka",
    )
    code = (
        "import sys; sys.path.insert(0, 'tests/kafka')\n"
        "import test_records as t, monitor.kafka._records as r\n"
        "assert 'build/sanitize' in r.__file__, r.__file__\n"
        + "".join(f"t.{name}()\n" for name in checks)
        + "print('reader checks passed')"
    )
    run = subprocess.run(  # -P: the package from PYTHONPATH (the sanitised build), not the checkout
        [sys.executable, "-P", "-c", code],
        cwd=ROOT,
        env=sanitized_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Sanitizer" not in run.stderr and "runtime error" not in run.stderr, run.stderr[-6000:]
    assert run.returncode == 0 and "reader checks passed" in run.stdout, (run.stdout + run.stderr)[-6000:]


def test_the_sanitiser_stops_a_run_at_a_heap_overflow(sanitized_env: dict[str, str]) -> None:
    run = fuzz(sanitized_env, "--self-test", "asan", "--count", "0")
    assert run.returncode != 0
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in run.stderr


def test_a_difference_between_the_paths_fails_the_run(sanitized_env: dict[str, str]) -> None:
    run = fuzz(sanitized_env, "--self-test", "mismatch", "--count", "20")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "findings: 0 " not in run.stdout and "FINDING decode" in run.stderr
