"""The record as text for the screen: the question, the answer as the judge's claims, and the
chunks with the judge's evidence quotes marked. Plain `rich` text, so that a test reads exactly what
a reviewer would, and so that it reads in a monochrome terminal too: a quote is shown in colour
*and* followed by the number of the claim that cites it (‹2›). Every text from traffic goes through
`monitor.plumbing.safe_text` (escape sequences, bidi overrides shown escaped) and into `Text` as it is,
never parsed as markup."""

from __future__ import annotations

from rich.text import Text

from monitor.contracts.results import ChunkLine, ReviewLine
from monitor.plumbing.errors import plural
from monitor.plumbing.safe_text import terminal_line, terminal_text
from monitor.review.labels import ClaimLabel, Labelling
from monitor.review.session import CHUNK_KEYS, chunks_of, page_range

QUOTE_STYLE = "black on yellow"
SELECTED_QUOTE_STYLE = "bold black on bright_green"
_LABEL_TEXT = {
    ClaimLabel.SUPPORTED: ("supported", "green"),
    ClaimLabel.CONTRADICTED: ("contradicted", "red"),
    ClaimLabel.NOT_IN_CONTEXT: ("not in context", "magenta"),
}


def _quotes(line: ReviewLine) -> dict[str, list[tuple[int, str]]]:
    """Per chunk id, the (claim index, quote) pairs the judge cited from it."""
    out: dict[str, list[tuple[int, str]]] = {}
    for i, claim in enumerate(line.claims or ()):
        for ev in claim.evidence or ():
            if ev.chunk_id and ev.quote:
                out.setdefault(ev.chunk_id, []).append((i, ev.quote))
    return out


def _spans(content: str, quotes: list[tuple[int, str]]) -> list[tuple[int, int, int]]:
    """(start, end, claim) of each quote found in the chunk (case-insensitive, first occurrence),
    overlapping ones left to the first."""
    found: list[tuple[int, int, int]] = []
    low = content.casefold()
    for claim, quote in quotes:
        q = quote.strip().casefold()
        at = low.find(q) if q else -1
        if at >= 0:
            found.append((at, at + len(q), claim))
    found.sort()
    kept: list[tuple[int, int, int]] = []
    for s in found:
        if not kept or s[0] >= kept[-1][1]:
            kept.append(s)
    return kept


def chunk_text(chunk: ChunkLine, quotes: list[tuple[int, str]], selected: int) -> Text:
    """A chunk's content with the quotes marked: the selected claim's brighter."""
    content = chunk.content or ""
    if not content:
        return Text("(no text captured)", style="dim italic")
    text = Text()
    pos = 0
    for start, end, claim in _spans(content, quotes):
        text.append(terminal_text(content[pos:start]))
        style = SELECTED_QUOTE_STYLE if claim == selected else QUOTE_STYLE
        text.append(terminal_text(content[start:end]), style=style)
        text.append(f"‹{claim + 1}›", style="bold")
        pos = end
    text.append(terminal_text(content[pos:]))
    return text


def chunk_heading(rank: int, count: int, page: int) -> str:
    """The key and number a chunk is shown with: its number key on the page the keys are on, else
    '-'; past ten chunks its rank too (`3 #13`: key 3 toggles chunk 13), so the key and the rank
    read apart in monochrome."""
    first = page * CHUNK_KEYS + 1
    key = str((rank - first + 1) % 10) if first <= rank < first + CHUNK_KEYS else "-"
    return key if count <= CHUNK_KEYS else f"{key} #{rank}"


def record_text(line: ReviewLine, labelling: Labelling, selected: int, page: int = 0) -> Text:
    """The body of the screen for one record, the number keys on chunks `page`*10+1 to +10."""
    out = Text()
    out.append("Question ", style="bold underline")
    out.append(f"[{terminal_line(line.query_type) or 'unknown'}]", style="dim")
    for word, value in (("session", line.session_id), ("user", line.user_id)):
        if value:
            out.append(f" {word} {terminal_line(value)}", style="dim")
    out.append("\n")
    out.append(f"{terminal_text(line.query) or '(no query captured)'}\n\n")

    claims = line.claims or []
    out.append("Answer", style="bold underline")
    out.append(f"  — {plural(len(claims), 'claim')} by the judge\n", style="dim")
    if not claims:
        out.append(f"{terminal_text(line.answer) or '(no answer captured)'}\n")
    for i, claim in enumerate(claims):
        cursor = "▶" if i == selected else " "
        label = labelling.claims[i] if i < len(labelling.claims) else None
        out.append(f"{cursor}{i + 1}. ", style="bold" if i == selected else "")
        out.append(terminal_text(claim.text) or "(empty claim)", style="bold" if i == selected else "")
        out.append("\n    judge: ", style="dim")
        out.append(terminal_line(str(claim.verdict or "none")), style="dim")
        out.append("  you: ", style="dim")
        if label is None:
            out.append("?", style="bold yellow")
        else:
            word, colour = _LABEL_TEXT[label]
            out.append(word, style=f"bold {colour}")
        out.append("\n")
    out.append("\n")

    chunks = chunks_of(line)
    n = len(chunks)
    out.append("Chunks", style="bold underline")
    if n <= CHUNK_KEYS:
        out.append("  (1-9, 0: toggle relevant; ‹n›: quoted for claim n)\n", style="dim")
    else:
        first, last = page_range(page, n)
        out.append(
            f"  (1-0 toggle #{first}-#{last} of {n}, ] [ other tens; ‹n›: quoted for claim n)\n", style="dim"
        )
    if not chunks:
        out.append("(none retrieved)\n")
    quotes = _quotes(line)
    for i, chunk in enumerate(chunks):
        mark = "[x]" if chunk.id in labelling.relevant else "[ ]"
        score = f" ({chunk.score:.2f})" if chunk.score is not None else ""
        heading = chunk_heading(i + 1, n, page)
        style = "dim" if heading.startswith("-") else "bold"
        out.append(f"{mark} {heading} {terminal_line(chunk.id) or '?'}{score}\n", style=style)
        out.append(chunk_text(chunk, quotes.get(chunk.id or "", []), selected))
        out.append("\n")
    return out


def _yes_no(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")


def _clip(text: str, width: int) -> str:
    text = terminal_line(" ".join(text.split()))
    return (text[: width - 1] + "…") if len(text) > width else (text or "-")


def form_text(line: ReviewLine, labelling: Labelling, golden_added: bool) -> Text:
    """The record-level labels, two lines of at most 80 columns; a `*` marks a value that follows
    another (refusal warranted: not answerable, unless set with w)."""
    out = Text()
    out.append("answerable: ", style="dim")
    out.append(_yes_no(labelling.answerable), style="bold")
    out.append("  refusal warranted: ", style="dim")
    out.append(_yes_no(labelling.refusal_warranted_value), style="bold")
    if labelling.refusal_warranted is None and labelling.answerable is not None:
        out.append("*", style="dim")
    out.append("  answer refuses/hedges: ", style="dim")
    out.append(_yes_no(labelling.answer_admits_uncertainty), style="bold")
    out.append("\nnote: ", style="dim")
    out.append(_clip(labelling.note, 24))
    out.append("  reference: ", style="dim")
    out.append(_clip(labelling.reference(line), 24))
    if golden_added:
        out.append("  [in golden set]", style="bold green")
    return out
