"""Pane 5, the text: the conversation as the model sees it in its context, joined from the
token pieces' bytes (a character split over two tokens appears once both have arrived). The
newest token is marked; ``b`` draws the token boundaries."""

from __future__ import annotations

import codecs
import re

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..controller import View
from .common import DIM, HEX_STYLE, ROLE_NAMES, ROLE_STYLES, literal

NEWEST = Style(reverse=True, bold=True)
BOUNDARY_STYLES = (Style(bgcolor="#20304a"), Style(bgcolor="#3a2a4a"))


def span_text(
    pieces: tuple[bytes, ...],
    start: int,
    end: int,
    style: Style,
    *,
    boundaries: bool,
    newest: int | None,
) -> tuple[Text, bytes]:
    """The text of tokens [start, end): bytes joined with an incremental UTF-8 decoder so a
    character split across pieces is drawn once, complete. Returns the text and any trailing
    bytes still waiting for the rest of their character."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="tokenstep-hex")
    t = Text()
    for i in range(start, end):
        chunk = dec.decode(pieces[i], final=False)
        st = style
        if boundaries:
            st = st + BOUNDARY_STYLES[(i - start) % 2]
        if i == newest:
            st = st + NEWEST
        chunk = literal(chunk, keep_newlines=True)
        if boundaries and chunk:
            chunk = chunk.replace("\n", "↵\n")
        if "<0x" in chunk:
            _append_with_hex(t, chunk, st)
        else:
            t.append(chunk, st)
    pending, _ = dec.getstate()
    return t, pending


def _append_with_hex(t: Text, chunk: str, style: Style) -> None:
    for part in re.split(r"(<0x[0-9A-F]{2}>)", chunk):
        if part:
            t.append(part, style + HEX_STYLE if part.startswith("<0x") else style)


class ConversationPane(VerticalScroll):
    DEFAULT_CSS = """
    ConversationPane { height: 1fr; }
    ConversationPane > Static { width: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.view: View | None = None
        self.boundaries = False
        self.plain = ""  # the text as drawn, for tests and screen readers

    def compose(self) -> ComposeResult:
        yield Static(id="conversation-text")

    def show(self, view: View) -> None:
        self.view = view
        follow = self.scroll_y >= self.max_scroll_y - 1
        text = self.build(view)
        self.plain = text.plain
        self.query_one("#conversation-text", Static).update(text)
        if follow:
            self.call_after_refresh(self.scroll_end, animate=False)

    def toggle_boundaries(self) -> None:
        self.boundaries = not self.boundaries
        if self.view is not None:
            self.show(self.view)

    def build(self, v: View) -> Text:
        t = Text()
        # The token just generated is marked while the reply is still being generated.
        newest = v.n_past - 1 if v.reply_tokens and v.activity == "generating" else None
        if not v.tokens:
            hint = (
                "Type a prompt below and press Enter; the model continues the text."
                if v.raw
                else "Type a message below and press Enter to chat with the model."
            )
            t.append(hint, DIM)
            return t
        for sp in v.spans:
            if sp.role == "template":
                continue
            style = ROLE_STYLES.get(sp.role, Style())
            if not v.raw:
                if t:
                    t.append("\n")
                t.append(f"{ROLE_NAMES.get(sp.role, sp.role)} ▸ ", style + Style(bold=True))
            body, pending = span_text(
                v.pieces, sp.start, sp.end, style, boundaries=self.boundaries, newest=newest
            )
            t.append_text(body)
            if pending:
                t.append("⋯", DIM)
                t.append(f"({len(pending)} byte(s) of a character still to come)", DIM)
        if not v.raw and v.reply_start is not None and not v.reply_tokens:
            t.append("\nmodel ▸ ", ROLE_STYLES["reply"] + Style(bold=True))
        if v.activity == "generating" and v.mode == "step":
            t.append("▌", Style(color="bright_yellow", blink=False))
        elif v.activity == "done" and v.stop_reason:
            t.append(f"  [{v.stop_reason}]", DIM)
        return t
