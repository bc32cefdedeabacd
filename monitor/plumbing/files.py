"""Files the sidecar and its commands write for others to read (reports, baselines, golden rows)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write `text` (UTF-8; bytes as they are) to `path` via a temporary file in its directory and
    a rename, so a reader (a running sidecar, a scheduled replay) never sees half a file; the
    directory is created if missing. The file keeps its permissions; a new one gets what `open`
    would give it (0666 less the umask), not a temporary file's 0600: others read these files.
    The data is on disk before the rename and the rename before the return (fsync of the file,
    then of the directory), so a crash leaves the old file or the new one, never an empty one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    try:
        mode: int | None = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = None
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # a directory that cannot be opened to sync (some network file systems): best effort
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock (`flock`) for `path` while the body reads, checks and
    rewrites it: on `<path>.lock` beside it (the file itself is replaced by `write_atomic`, so
    a lock on it would be on the old inode). Writers that all take it never lose each other's
    rows; a reader needs none (a rename is atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
