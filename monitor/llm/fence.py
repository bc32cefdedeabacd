"""Untrusted text inside a prompt stays data: escaped so it can neither close its tag nor open one.

Every caller that puts text it did not write (a record, a corpus chunk) into a prompt fences it in
XML-like tags whose content goes through `escape_data`; the instructions then tell the model, once,
that tagged content is data and never instructions, whatever it says.
"""

from __future__ import annotations

__all__ = ["escape_data"]


def escape_data(text: str, *, quote: bool = False) -> str:
    """XML-escape untrusted text so it cannot close or open a tag (and, with `quote`, an attribute)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if quote:
        text = text.replace('"', "&quot;")
    return text
