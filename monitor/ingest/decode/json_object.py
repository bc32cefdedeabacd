"""The JSON object a message holds, or why it holds none (both JSON encodings start here)."""

from __future__ import annotations

import json
import re
from typing import Any

from monitor.contracts.model import Reject
from monitor.ingest.decode.decoded import Decoded

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json(value: bytes) -> dict[str, Any] | Decoded:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        # JSON with a bad byte in it is invalid_utf8; binary garbage that starts with "{" is not JSON.
        try:
            json.loads(value.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return Decoded(error=Reject.DECODE_ERROR, detail=f"not JSON (not UTF-8 at byte {exc.start})")
        return Decoded(error=Reject.INVALID_UTF8, detail=f"JSON is not UTF-8 (byte {exc.start})")
    if text[:1] == "\ufeff":
        text = text[1:]
    if not text.strip():
        return Decoded(error=Reject.EMPTY, detail="blank message")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return Decoded(error=Reject.DECODE_ERROR, detail=f"invalid JSON: {exc.msg} at char {exc.pos}")
    except (ValueError, RecursionError) as exc:
        return Decoded(error=Reject.DECODE_ERROR, detail=f"invalid JSON ({type(exc).__name__})")
    if not isinstance(obj, dict):
        return Decoded(error=Reject.DECODE_ERROR, detail=f"JSON {type(obj).__name__}, not an object")
    # "\ud800"-style escapes decode to lone surrogates, which no UTF-8 writer downstream accepts.
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return Decoded(error=Reject.INVALID_UTF8, detail="JSON escapes encode a lone surrogate")
    return obj
