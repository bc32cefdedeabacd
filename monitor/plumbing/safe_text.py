"""Text from traffic made safe for where a person reads it: one rule per sink.

Anyone who can send a query to the RAG service writes the query, the answer, the chunks, the
claims, ids, release and service names this process shows. Each is data, never an instruction to
the device that shows it:

- a terminal (`terminal_text`, `terminal_line`): control characters (C0, DEL, C1: ESC starts every
  CSI/OSC/DCS sequence, so none survives), bidi overrides and isolates, invisible format characters
  (zero-width space, word joiner, tag characters), line and paragraph separators and lone
  surrogates are shown escaped (`\\x1b`, `\\u202e`), so the reviewer sees that they were there;
  zero-width (non-)joiners stay (emoji and scripts need them);
- a chat message or alert annotation (`chat_text`): one line, controls as spaces, then Slack's and
  HTML's `& < >` as entities (no `<!channel>`, `<url|label>` or `<img>`), Markdown's `[ ]` escaped
  (no disguised link) and `@channel`-style mentions shown with a full-width ＠ (no ping);
- a log line (`log_text`): one line, everything the terminal rule escapes escaped, newlines too;
- another telemetry backend (`trace_text`: a span attribute, a Phoenix annotation, shown by a web
  UI that may render Markdown or HTML): one plain line, tags and Markdown links gone, clipped.

The terminal rule works character by character, so a text may be escaped in pieces (the review
UI marks quotes inside a chunk) with the same result as whole.
"""

from __future__ import annotations

import re
import unicodedata

# Characters past printable ASCII: looked at one by one (ASCII text never is).
_CANDIDATE = re.compile(r"[^\x20-\x7e]")
_JOINERS = frozenset("\u200c\u200d")  # ZWNJ, ZWJ: shaping of scripts and emoji, harmless
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_HIDDEN = frozenset({"Cc", "Cs", "Zl", "Zp"})
_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|[@-_])")  # a whole CSI or two-byte escape
_MENTION = re.compile(r"@(?=(?:channel|here|everyone|all)\b)", re.IGNORECASE)
_CHAT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "\\[", "]": "\\]"})


def unsafe(c: str) -> bool:
    """Whether one character changes a terminal or hides text when shown raw."""
    if " " <= c <= "~":
        return False
    category = unicodedata.category(c)
    return category in _HIDDEN or (category == "Cf" and c not in _JOINERS)


def _escaped(c: str) -> str:
    named = _NAMED.get(c)
    if named is not None:
        return named
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def _escape(text: str, keep: str) -> str:
    if text.isascii() and text.isprintable():
        return text

    def one(m: re.Match[str]) -> str:
        c = m.group()
        return c if c in keep or not unsafe(c) else _escaped(c)

    return _CANDIDATE.sub(one, text)


def terminal_text(text: str | None) -> str:
    """`text` for a terminal, newlines and tabs kept (a block: a query, a chunk)."""
    return _escape(text or "", "\n\t")


def terminal_line(text: str | None) -> str:
    """`text` for one line of a terminal (an id, a release name, a table cell): newlines escaped."""
    return _escape(text or "", "")


# `text` for a log line: one line, every control escaped (a log viewer is a terminal too).
log_text = terminal_line


def one_line(text: str | None, limit: int | None = None) -> str:
    """`text` as one plain line: escape sequences gone, control and format characters (newlines,
    bidi overrides) spaces, runs of space one, at most `limit` characters."""
    text = _ANSI.sub("", text or "")
    text = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in text)
    text = " ".join(text.split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def chat_text(text: str | None, limit: int | None = None) -> str:
    """`text` for a chat message or an alert annotation (Slack, Markdown, HTML receivers): one line
    (`one_line`, `limit` characters of it), its markup shown as the characters it is."""
    return _MENTION.sub("\uff20", one_line(text, limit).translate(_CHAT))


_TAG = re.compile(r"<[^<>]*>")
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


def trace_text(text: str | None, limit: int) -> str:
    """`text` for another telemetry backend (a span attribute, a Phoenix annotation), which its UI
    may render as Markdown or HTML: one line (`one_line`), HTML tags removed and Markdown links and
    images reduced to their label, at most `limit` characters."""
    return one_line(_MD_LINK.sub(r"\1", _TAG.sub("", one_line(text))), limit)
