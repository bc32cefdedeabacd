"""Which attribute keys a span's release is read from (`slices.release_keys`): process-wide, as the
compiled decoder's key tables are; the ingest stage sets them once at start."""

from __future__ import annotations

from typing import Any

DEFAULT_RELEASE_KEYS = ("service.version",)
MAX_RELEASE_KEYS = 8
_release_keys: tuple[str, ...] = DEFAULT_RELEASE_KEYS


def store_release_keys(keys: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Check and keep `keys`; the caller hands them on to the compiled decoder."""
    global _release_keys
    keys = tuple(keys)
    if len(keys) > MAX_RELEASE_KEYS or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"release keys: up to {MAX_RELEASE_KEYS} non-empty strings")
    _release_keys = keys
    return keys


def release_keys() -> tuple[str, ...]:
    return _release_keys


def resource_releases(attrs: dict[str, Any]) -> tuple[str, ...]:
    """Per release key, the resource's value ("" when absent or not a non-empty string)."""
    out = []
    for k in _release_keys:
        v = attrs.get(k)
        out.append(v if isinstance(v, str) else "")
    return tuple(out)


def span_release(attrs: dict[str, Any], resource: tuple[str, ...]) -> str:
    """The span's release: per key in order, its own attribute, else its resource's."""
    for i, k in enumerate(_release_keys):
        v = attrs.get(k)
        if isinstance(v, str) and v:
            return v
        if resource[i]:
            return resource[i]
    return ""
