"""Secrets out of text that leaves an LLM call (errors, logs, results lines)."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["Redactor"]

_BEARER = re.compile(r"(?i)(bearer\s+|x-api-key[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]+")
_KEYLIKE = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")


class Redactor:
    """Removes secrets from text that leaves the judge (errors, logs). Besides the configured key it
    blanks anything shaped like a bearer token or an ``sk-`` key: a proxy may echo a header back."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        self._secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "[REDACTED]")
        text = _BEARER.sub(lambda m: m.group(1) + "[REDACTED]", text)
        return _KEYLIKE.sub("[REDACTED]", text)
