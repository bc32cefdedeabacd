"""The terminal UI of `rag-monitor review` (textual): keys only, fits 80x24, works over SSH.

Draws a `ReviewSession` and maps keys to it; the rules (what a save needs, what undo takes back,
the labels line) are the session's. Queue lines from a topic arrive through `feed` while the
reviewer works.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Input, Static

from monitor.contracts.results import RESULTS_VERSION
from monitor.plumbing.errors import plural
from monitor.plumbing.safe_text import terminal_line, terminal_text
from monitor.review.labels import ClaimLabel
from monitor.review.render import form_text, record_text
from monitor.review.session import CHUNK_KEYS, ReviewSession

# The key help; `{chunks}`: the chunks the number keys are on (`keys_help`).
KEYS_HELP = (
    "s/c/n claim supported/contradicted/not in context  ↑↓ claim  PgUp/PgDn scroll\n"
    "a answerable  f answer refuses  w refusal warranted  e note  r ref  ⏎ save\n"
    "1-0: {chunks}  ] [ next/prev ten  g golden set  x skip  u undo  q quit"
)


def keys_help(first: int, last: int) -> str:
    """The key help with the ranks of the chunks the number keys are on ((0, 0): none)."""
    return KEYS_HELP.format(chunks=f"chunks {first}-{last}" if last else "no chunks")


# Reasons a queue line is passed over (`monitor.contracts.results.unreadable_reason`), short for one line.
_SHORT = {f"results line version other than {RESULTS_VERSION}": "another v", "not a JSON object": "not JSON"}

# Where more queue lines come from while the reviewer works (a topic): raw values, as they come.
Feed = Callable[[], AsyncIterator[bytes]]


class ReviewApp(App[None]):
    """Label the queued records one by one."""

    TITLE = "rag-monitor review"
    AUTO_FOCUS = None  # keys go to the app; the edit line takes focus only while editing
    CSS = """
    Screen { layout: vertical; }
    #top { height: auto; background: $boost; }
    #body { height: 1fr; }
    #form { height: 2; background: $boost; }
    #status { height: 2; }
    #edit { height: 3; }
    #keys { height: 3; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "claim('supported')", show=False),
        Binding("c", "claim('contradicted')", show=False),
        Binding("n", "claim('not_in_context')", show=False),
        Binding("up,k", "select(-1)", show=False),
        Binding("down,j", "select(1)", show=False),
        Binding("pageup", "scroll_body(-1)", show=False),
        Binding("pagedown,space", "scroll_body(1)", show=False),
        Binding("a", "answerable", show=False),
        Binding("w", "refusal_warranted", show=False),
        Binding("f", "admits", show=False),
        Binding("e", "edit('note')", show=False),
        Binding("r", "edit('reference')", show=False),
        Binding("g", "golden", show=False),
        Binding("enter", "save", show=False),
        Binding("x", "skip", show=False),
        Binding("u", "undo", show=False),
        Binding("right_square_bracket", "page(1)", show=False),
        Binding("left_square_bracket", "page(-1)", show=False),
        Binding("escape", "cancel_edit", show=False),
        Binding("q", "quit", show=False),
        Binding("ctrl+c", "quit", show=False, priority=True),  # every save is on disk already
        *(Binding(str((i + 1) % 10), f"chunk({i})", show=False) for i in range(10)),
    ]

    def __init__(self, session: ReviewSession, *, feed: Feed | None = None, source: str = "") -> None:
        super().__init__()
        self.session = session
        self.feed = feed
        self.source = source
        self.waiting = feed is not None  # more lines may come (a topic)
        self.status = Text("")
        self._editing: str | None = None
        self._edit_shown = self._edit_original = ""
        if session.labels_bad:
            self._say(
                f"{plural(session.labels_bad, 'unreadable line')} in the labels file, passed over", error=True
            )
        elif session.done_before:
            self._say(
                f"resumed: {plural(session.done_before, 'record')} already labelled in {session.labels.path}"
            )

    def compose(self) -> ComposeResult:
        yield Static(id="top")
        with VerticalScroll(id="body", can_focus=False):
            yield Static(id="record")
        yield Static(id="form")
        yield Static(id="status")
        yield Input(id="edit")
        yield Static(keys_help(1, CHUNK_KEYS), id="keys")

    def on_mount(self) -> None:
        self.query_one("#edit", Input).display = False
        self.redraw()
        if self.feed is not None:
            self.run_worker(self._follow(self.feed), exclusive=True, exit_on_error=False)

    async def _follow(self, feed: Feed) -> None:
        """Queue lines from the topic as they come; the shown record stays until saved."""
        try:
            async for raw in feed():
                if self.session.queue.add(raw) is not None:
                    self.session.more_arrived()
                self.redraw()
        except Exception as exc:  # a broker away or refusing: said on screen, the labelling goes on
            self.waiting = False
            self._act(f"error: reading {self.source} stopped: {type(exc).__name__}: {exc}", error=True)

    # -- drawing ----------------------------------------------------------------------------------

    def _say(self, message: str, *, error: bool = False) -> None:
        style = "bold red" if error or message.startswith("error") else ""
        self.status = Text(terminal_text(message), style=style)

    def top_text(self) -> Text:
        s = self.session
        out = Text()
        out.append(f"{s.labelled} of {s.total} labelled", style="bold")
        line = s.line
        if line is not None and s.index is not None:
            review = line.review
            reasons = (
                ", ".join(str(r) for r in (review.reasons if review and review.reasons else [])) or "none"
            )
            out.append(f" · record {s.index + 1} · reasons: {reasons}")
            if review is not None and review.weight is not None:
                out.append(f" · weight {review.weight:g}")
            out.append(f"\ntrace {terminal_line(line.trace_id)}", style="dim")
        bad = s.queue.bad_total
        if bad:
            counts = sorted(s.queue.bad.items())
            why = ", ".join(f"{n} {terminal_line(_SHORT.get(reason, reason))}" for reason, n in counts)
            out.append(f"\nbad queue lines: {bad} ({why})", style="bold red")
        return out

    def redraw(self) -> None:
        s = self.session
        self.query_one("#top", Static).update(self.top_text())
        record = self.query_one("#record", Static)
        form = self.query_one("#form", Static)
        line, cur = s.line, s.current
        if line is None or cur is None:
            if self.waiting:
                msg = f"All {s.total} queued records labelled; waiting for more on {self.source}. q quits."
            else:
                msg = f"All {s.total} queued records labelled (labels in {s.labels.path}). q quits."
            record.update(Text(msg, style="bold"))
            form.update("")
        else:
            record.update(record_text(line, cur, s.selected, s.page))
            form.update(form_text(line, cur, (line.trace_id or "").lower() in s.golden_added))
        self.query_one("#status", Static).update(self.status)
        self.query_one("#keys", Static).update(keys_help(*s.page_range()))

    # -- keys -------------------------------------------------------------------------------------

    def _act(self, message: str | None = None, *, error: bool = False) -> None:
        if message is not None:
            self._say(message, error=error)
        self.redraw()

    def action_claim(self, label: str) -> None:
        self.session.mark_claim(ClaimLabel(label))
        self._act("")
        self._follow_selection()

    def action_select(self, delta: int) -> None:
        self.session.select(delta)
        self._act()
        self._follow_selection()

    def _follow_selection(self) -> None:
        """Keep the selected claim (and its verdict line) in view on a short screen. Its line is
        counted in the text before wrapping: near enough, and PgUp/PgDn are there."""
        body = self.query_one("#body", VerticalScroll)
        plain = str(self.query_one("#record", Static).content)
        at = plain.find("▶")
        if at < 0:
            return
        row = plain.count("\n", 0, at)
        height = body.scrollable_content_region.height
        if row < body.scroll_y:  # the first claim: the question above it too
            body.scroll_to(y=0 if self.session.selected == 0 else row, animate=False)
        elif row + 2 > body.scroll_y + height:
            body.scroll_to(y=row + 2 - height, animate=False)

    def action_scroll_body(self, direction: int) -> None:
        body = self.query_one("#body", VerticalScroll)
        if direction > 0:
            body.scroll_page_down(animate=False)
        else:
            body.scroll_page_up(animate=False)

    def action_answerable(self) -> None:
        self.session.toggle_answerable()
        self._act("")

    def action_refusal_warranted(self) -> None:
        self.session.toggle_refusal_warranted()
        self._act("")

    def action_admits(self) -> None:
        self.session.toggle_admits()
        self._act("")

    def action_chunk(self, key: int) -> None:
        cid = self.session.toggle_chunk(key)
        self._act(None if cid is not None else f"no chunk {self.session.page * CHUNK_KEYS + key + 1}")

    def action_page(self, delta: int) -> None:
        self._act(self.session.turn_page(delta))
        self._show_page()

    def _show_page(self) -> None:
        """Scroll the body to the first chunk the number keys are on (its heading: `[ ] 1 #11`)."""
        plain = str(self.query_one("#record", Static).content)
        found = re.search(r"^\[[ x]\] 1 ", plain, flags=re.MULTILINE)
        if found is not None:
            row = plain.count("\n", 0, found.start())
            self.query_one("#body", VerticalScroll).scroll_to(y=row, animate=False)

    def action_save(self) -> None:
        if self._editing is not None:
            return
        self._act(self.session.save())
        self.query_one("#body", VerticalScroll).scroll_home(animate=False)

    def action_skip(self) -> None:
        self._act(self.session.skip())

    def action_undo(self) -> None:
        page = self.session.page
        self._act(self.session.undo())
        if self.session.page != page:  # a chunk marked on another ten: show that ten
            self._show_page()

    def action_golden(self) -> None:
        ok, message = self.session.add_to_golden()
        self._act(message, error=not ok)

    def action_edit(self, what: str) -> None:
        s = self.session
        if s.current is None or s.line is None:
            return
        value = s.current.note if what == "note" else s.current.reference(s.line)
        edit = self.query_one("#edit", Input)
        edit.value = self._edit_shown = terminal_line(value)  # escaped; Enter unchanged keeps `value`
        self._edit_original = value
        edit.placeholder = f"{what}: Enter keeps it, Esc cancels"
        edit.border_title = what
        edit.display = True
        self._editing = what
        edit.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self._editing is None:
            return
        value = self._edit_original if event.value == self._edit_shown else event.value
        if self._editing == "note":
            self.session.set_note(value)
        elif self._editing == "reference":
            self.session.set_reference(value)
        self._close_edit(f"{self._editing} set")

    def action_cancel_edit(self) -> None:
        if self._editing is not None:
            self._close_edit(f"{self._editing} unchanged")

    def _close_edit(self, message: str) -> None:
        edit = self.query_one("#edit", Input)
        edit.display = False
        self._editing = None
        self.set_focus(None)
        self._act(message)
