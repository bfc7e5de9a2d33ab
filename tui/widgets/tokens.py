"""Pane 2, tokens: every token in the context as a coloured chip (``#`` shows the ids), with
token counts next to character counts. Pieces are drawn as bytes really are: a space is ␣, a
newline ↵, and a byte that is not valid UTF-8 on its own is shown as ``<0xNN>``."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..controller import View
from .common import (
    CHIP_BACKGROUNDS,
    DIM,
    ROLE_NAMES,
    ROLE_STYLES,
    is_special,
    piece_text,
)

SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
MAX_CHIPS = 1500  # the newest ones; older chips are counted, not drawn


def chars_of(pieces: tuple[bytes, ...], start: int, end: int) -> int:
    return len(b"".join(pieces[start:end]).decode("utf-8", errors="replace"))


class TokensPane(VerticalScroll):
    DEFAULT_CSS = """
    TokensPane { height: 1fr; }
    TokensPane > Static { width: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.view: View | None = None
        self.show_ids = False

    def compose(self) -> ComposeResult:
        yield Static(id="tokens-chips")

    def toggle_ids(self) -> None:
        self.show_ids = not self.show_ids
        if self.view is not None:
            self.show(self.view)

    def titles(self, v: View) -> None:
        """Token count against character count, in the border: overall, then per origin."""
        n = v.n_past
        chars = chars_of(v.pieces, 0, n)
        title = f"tokens · {n:,} tokens, {chars:,} chars"
        if n:
            title += f" ({chars / n:.2f} chars/token)"
        self.border_title = title
        roles: dict[str, list[int]] = {}
        for sp in v.spans:
            acc = roles.setdefault(sp.role, [0, 0])
            acc[0] += sp.end - sp.start
            acc[1] += chars_of(v.pieces, sp.start, sp.end)
        parts = [f"{ROLE_NAMES.get(r, r)} {nt:,}/{nc:,}" for r, (nt, nc) in roles.items()]
        self.border_subtitle = " · ".join(parts) + " (tokens/chars)" if parts else ""

    def chips(self, v: View) -> Text:
        t = Text()
        role_at = ["template"] * v.n_past
        for sp in v.spans:
            for i in range(sp.start, min(sp.end, v.n_past)):
                role_at[i] = sp.role
        start = max(0, v.n_past - MAX_CHIPS)
        if start:
            t.append(f"… {start:,} earlier tokens not drawn …\n", DIM)
        newest = v.n_past - 1
        for i in range(start, v.n_past):
            data = v.pieces[i]
            bg = CHIP_BACKGROUNDS[i % len(CHIP_BACKGROUNDS)]
            fg = ROLE_STYLES.get(role_at[i], Style())
            chip = piece_text(data, fg, special=is_special(data))
            chip.stylize(Style(bgcolor=bg))
            if i == newest and i >= (v.reply_start if v.reply_start is not None else v.n_past):
                chip.stylize(Style(reverse=True))
            if self.show_ids:
                chip.append(
                    str(v.tokens[i]).translate(SUBSCRIPT), Style(color="grey70", bgcolor=bg)
                )
            t.append_text(chip)
            t.append(" ")
            if data.endswith(b"\n"):
                t.append("\n")
        return t

    def show(self, view: View) -> None:
        self.view = view
        follow = self.scroll_y >= self.max_scroll_y - 1
        self.titles(view)
        if not view.tokens:
            self.query_one("#tokens-chips", Static).update(
                Text("No tokens yet. Each piece of the prompt and the reply appears here.", DIM)
            )
            return
        self.query_one("#tokens-chips", Static).update(self.chips(view))
        if follow:
            self.call_after_refresh(self.scroll_end, animate=False)
