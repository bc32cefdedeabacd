"""Files the sidecar and its commands write for others to read (reports, baselines, golden rows)."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write `text` (UTF-8; bytes as they are) to `path` via a temporary file in its directory and
    a rename, so a reader (a running sidecar, a scheduled replay) never sees half a file; the
    directory is created if missing. The file keeps its permissions; a new one gets what `open`
    would give it (0666 less the umask), not a temporary file's 0600: others read these files."""
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
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
