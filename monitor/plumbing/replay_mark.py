"""The golden-replay mark: ``X-RAG-Replay: t=<unix seconds>,sig=<hex HMAC-SHA256>``.

An instrumented service keeps requests carrying a valid mark out of production metrics (its spans
get ``rag.replay=true``). A bare ``X-RAG-Replay: 1`` would let any client hide its traffic, so the
mark is an HMAC keyed with a secret that only the replayer and the service hold. It covers the
timestamp, the method and the SHA-256 of the body: a proxy that rewrites the path (an ingress
prefix) does not break it, and a captured mark only re-marks that same body, for `MAX_AGE_SECONDS`.

Stdlib only: both the service (`monitor.instrument.web`, the light install) and the replayer
(`monitor.golden.targets`) import it. The secret comes from ``RAGMON_REPLAY_SECRET`` or the file
named by ``RAGMON_REPLAY_SECRET_FILE`` unless given; it is never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "HEADER",
    "MAX_AGE_SECONDS",
    "MIN_SECRET_BYTES",
    "SECRET_ENV",
    "SECRET_FILE_ENV",
    "body_digest",
    "check",
    "load_secret",
    "secret_from_env",
    "sign",
]

HEADER = "X-RAG-Replay"
SECRET_ENV = "RAGMON_REPLAY_SECRET"
SECRET_FILE_ENV = "RAGMON_REPLAY_SECRET_FILE"
MAX_AGE_SECONDS = 300.0  # clock skew between replayer and service, plus the request's own time
MIN_SECRET_BYTES = 16
_MARK = re.compile(r"t=(\d{1,12}),sig=([0-9a-f]{64})")


def body_digest(body: bytes) -> bytes:
    return hashlib.sha256(body).digest()


def _mac(secret: bytes, timestamp: int, method: str, digest: bytes) -> str:
    message = b"v1\n%d\n%s\n%s" % (
        timestamp,
        method.upper().encode("ascii", "replace"),
        digest.hex().encode(),
    )
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def sign(secret: bytes, method: str, body: bytes, now: float | None = None) -> str:
    """The header value for one request (sign each attempt: the timestamp must be fresh)."""
    ts = int(time.time() if now is None else now)
    return f"t={ts},sig={_mac(secret, ts, method, body_digest(body))}"


def check(
    secret: bytes,
    mark: str | bytes,
    method: str,
    digest: bytes,
    *,
    max_age: float = MAX_AGE_SECONDS,
    now: float | None = None,
) -> str | None:
    """None when `mark` is valid for this request, else why not (``malformed``, ``stale``,
    ``bad_signature``): a short reason fit for a log line or a counter label."""
    if isinstance(mark, bytes):
        mark = mark.decode("latin-1")
    m = _MARK.fullmatch(mark.strip())
    if m is None:
        return "malformed"
    ts = int(m.group(1))
    if abs((time.time() if now is None else now) - ts) > max_age:
        return "stale"
    if not hmac.compare_digest(_mac(secret, ts, method, digest), m.group(2)):
        return "bad_signature"
    return None


def load_secret(file: Path | str | None, value: str | bytes | None, what: str) -> bytes | None:
    """The secret from a file (surrounding whitespace stripped) or a value; None when neither.
    ValueError (naming `what`, never the secret) when the file cannot be read or it is too short."""
    if file is not None and str(file):
        try:
            secret = Path(file).read_bytes().strip()
        except OSError as exc:
            raise ValueError(f"cannot read {what} file {file}: {exc.strerror or exc}") from None
    elif value:
        secret = (value.encode() if isinstance(value, str) else value).strip()
    else:
        return None
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"the {what} is shorter than {MIN_SECRET_BYTES} bytes")
    return secret


def secret_from_env(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The secret named by ``RAGMON_REPLAY_SECRET_FILE`` (preferred: a mounted Secret) or held in
    ``RAGMON_REPLAY_SECRET``; None when neither is set."""
    env = os.environ if environ is None else environ
    return load_secret(env.get(SECRET_FILE_ENV) or None, env.get(SECRET_ENV), "replay secret")
