"""Files the sidecar and its commands write for others to read (reports, baselines, golden rows)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write `text` (UTF-8; bytes as they are) to `path` via a temporary file in its directory and
    a rename, so a reader (a running sidecar, a scheduled replay) never sees half a file; the
    directory is created if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    data = text.encode() if isinstance(text, str) else text
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
