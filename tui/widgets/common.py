"""Shared pieces for the panes: how a token piece is drawn, colours, number formats, and a
scrolling base class that renders one line at a time (only the visible lines are drawn)."""

from __future__ import annotations

import math
import textwrap
from typing import Any, Self, cast

from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from ..engine.model.tokens import visible
from ..worker.views import View

# Invisible characters get a visible stand-in inside chips and tables.
HEX_STYLE = Style(color="bright_red", bold=True)
SPECIAL_STYLE = Style(color="magenta", italic=True)
DIM = Style(dim=True)
NOTE_STYLE = Style(color="grey62", italic=True)  # a pane saying why it has nothing to draw
GAP = Style(color="black", bgcolor="orange1", bold=True)  # where a context shift cut
CHIP_BACKGROUNDS = ("#1f3b57", "#3b2f57", "#2f5740", "#57442f", "#4a2f3f", "#2f4f57")
SEQ_COLORS = ("green", "dodger_blue1", "orange1", "magenta", "cyan", "yellow")
ROLE_STYLES = {
    "template": Style(color="grey50"),
    "system": Style(color="grey62", italic=True),
    "user": Style(color="bright_cyan"),
    "assistant": Style(color="bright_white"),
    "reply": Style(color="bright_green"),
    "prompt": Style(color="bright_cyan"),
    "generated": Style(color="bright_green"),
}
ROLE_NAMES = {
    "template": "template",
    "system": "system",
    "user": "you",
    "assistant": "model",
    "reply": "model",
    "prompt": "prompt",
    "generated": "model",
}


def piece_parts(data: bytes) -> list[tuple[str, bool]]:
    """Split a piece into (text, is_hex) runs: valid UTF-8 as text, every other byte as
    ``<0xNN>`` (the same rule as :func:`tui.engine.model.tokens.display_bytes`)."""
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(data):
        try:
            out.append((data[i:].decode("utf-8"), False))
            break
        except UnicodeDecodeError as err:
            if err.start:
                out.append((data[i : i + err.start].decode("utf-8"), False))
            bad = data[i + err.start : i + err.end]
            out.append(("".join(f"<0x{b:02X}>" for b in bad), True))
            i += err.end
    return out


def literal(s: str, *, keep_newlines: bool = False) -> str:
    """Text from outside (model metadata, model output, error messages) made safe to draw:
    control characters such as ESC are spelled out, never sent to the terminal."""
    out = []
    for ch in s:
        if ch.isprintable() or (keep_newlines and ch == "\n"):
            out.append(ch)
        elif ch == "\t":
            out.append("    ")
        else:
            out.append(repr(ch)[1:-1])
    return "".join(out)


def piece_text(data: bytes, style: Style | None = None, *, special: bool = False) -> Text:
    """A token piece drawn honestly: visible whitespace, broken bytes as ``<0xNN>``."""
    t = Text()
    if not data:
        t.append("∅", DIM)
        return t
    for part, is_hex in piece_parts(data):
        if is_hex:
            t.append(part, HEX_STYLE)
        else:
            t.append(visible(part), (style or Style()) + (SPECIAL_STYLE if special else Style()))
    return t


def is_special(data: bytes) -> bool:
    return data.startswith(b"<|") and data.endswith(b"|>")


def fmt_bytes(n: float) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{int(n):,} B"


def fmt_p(p: float) -> str:
    if math.isnan(p):
        return "?"
    if p >= 0.9995:
        return "1.000"
    if p < 0.0005:
        return "<.001" if p > 0 else "0"
    return f"{p:.3f}"


def show_timings(widget: Widget) -> bool:
    """Tests turn measured times off so snapshots do not depend on the machine's speed."""
    return bool(getattr(widget.app, "show_timings", True))


def fmt_ms(widget: Widget, ms: float) -> str:
    if not show_timings(widget):
        return "–.– ms"
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def fmt_rate(widget: Widget, tokens: int, ms: float) -> str:
    if not show_timings(widget):
        return "– tok/s"
    if ms <= 0:
        return "? tok/s"
    return f"{tokens * 1000.0 / ms:,.0f} tok/s"


def text_segments(widget: Widget, t: Text) -> list[Segment]:
    """One line of Rich text as segments for a Strip."""
    return [s for s in t.render(widget.app.console) if s.text != "\n"]


class Pane(Widget):
    """A pane that draws from the latest :class:`View` (set by the app, read on render).

    Subclasses return Rich renderables from ``render`` as usual, but the pane turns them into
    Strips itself, once per refresh, with Rich's own line renderer: Textual's general path
    (Rich text to Content, then wrapping) costs several times more, and these panes redraw
    many times a second while a reply plays. Lines wider than the pane are cropped, never
    wrapped (the panes lay out their own lines)."""

    DEFAULT_CSS = """
    Pane { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.view: View | None = None
        self._strips: list[Strip] | None = None
        self._strips_width = -1
        self._blank = Strip.blank(0)

    def show(self, view: View) -> None:
        self.view = view
        self.refresh()

    def refresh(self, *regions: Any, **kwargs: Any) -> Self:
        self._strips = None  # whatever asked for a redraw may change what render() returns
        return super().refresh(*regions, **kwargs)

    def render_rows(self, width: int) -> list[list[Segment]] | None:
        """A pane may build its rows as segments itself (cheaper than Rich text); None means
        "draw ``render()``"."""
        return None

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        if self._strips is None or self._strips_width != width:
            rows = self.render_rows(width)
            if rows is not None:
                self._strips = [Strip(row).crop_extend(0, width, None) for row in rows]
            else:
                console = self.app.console
                options = console.options.update(width=max(width, 1), height=None, highlight=False)
                renderable = cast(RenderableType, self.render())  # Rich renderables
                lines = console.render_lines(renderable, options, pad=True)
                self._strips = [Strip(line, width) for line in lines]
            self._strips_width = width
            base = self.rich_style  # computed once per redraw, not once per line
            self._strips = [strip.apply_style(base) for strip in self._strips]
            self._blank = Strip.blank(width, base)
        if y >= len(self._strips):
            return self._blank
        return self._strips[y]


class LinePane(ScrollView):
    """A scrolling pane drawn with ``render_line``: only the visible rows are ever built.

    Subclasses implement ``count_rows`` and ``build_row``; ``follow_row`` names a row to keep
    in view as the content grows (e.g. the newest KV cell)."""

    DEFAULT_CSS = """
    LinePane { height: 1fr; scrollbar-size-vertical: 1; overflow-x: hidden; }
    """
    NEEDS: str | None = None  # a Capabilities field without which the pane has nothing to draw

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.view: View | None = None
        self._follow_seq = -1  # the view whose follow row was last brought into view
        self._base_style: Style | None = None

    def show(self, view: View) -> None:
        self.view = view
        self.relayout()

    def on_resize(self) -> None:
        self._follow_seq = -1
        self.relayout()

    def missing(self) -> str | None:
        """Why the view's backend gives this pane nothing to draw (one sentence), or None."""
        if self.NEEDS is None or self.view is None:
            return None
        return self.view.capabilities.missing(self.NEEDS)

    def note_lines(self) -> list[str]:
        """The :meth:`missing` sentence wrapped to the pane's width (a URL must not be cut)."""
        note = self.missing() or ""
        return textwrap.wrap(note, max(self.size.width, 20), break_on_hyphens=False) or [""]

    def relayout(self) -> None:
        """Size the virtual canvas; on a new view, bring its follow row into view (the user
        may scroll freely until the next view arrives)."""
        rows = len(self.note_lines()) if self.missing() is not None else self.count_rows()
        size = Size(max(self.content_width(), 1), rows)
        if size != self.virtual_size:
            # Assigning virtual_size lays out the whole screen (tens of ms here). A pane that
            # only grew taller needs its scrollbar updated, nothing else: Textual's own
            # no-layout path. Whether a scrollbar appears is then decided by
            # _scroll_update, which lays out only if its visibility changes.
            self.set_reactive(Widget.virtual_size, size)
            self._scroll_update(size)
        self.refresh()
        if self.view is not None and self.view.seq != self._follow_seq:
            self.call_after_refresh(self._bring_follow_row)

    def _bring_follow_row(self, tries: int = 8) -> None:
        """Scroll so the follow row shows. Right after the pane becomes visible its scroll
        limits may not be known yet, so it tries again for a few frames."""
        target = self.follow_row() if self.missing() is None else None
        if target is None or self.view is None:
            return
        h = self.size.height
        top = int(self.scroll_offset.y)
        if h and top <= target < top + h:
            self._follow_seq = self.view.seq
            return
        if h:
            self.scroll_to(y=max(0, target - h + 1), animate=False, immediate=True)
            top = int(self.scroll_offset.y)
            if top <= target < top + h:
                self._follow_seq = self.view.seq
                return
        if tries > 0:
            self.set_timer(0.03, lambda: self._bring_follow_row(tries - 1))

    def content_width(self) -> int:
        return self.size.width

    def count_rows(self) -> int:
        return 0

    def follow_row(self) -> int | None:
        return None

    def build_row(self, row: int, width: int) -> list[Segment]:
        return []

    def refresh(self, *regions: Any, **kwargs: Any) -> Self:
        self._base_style = None  # the CSS style, looked up again on the next frame
        return super().refresh(*regions, **kwargs)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        row = y + scroll_y
        width = self.size.width
        base = self._base_style
        if base is None:  # once per redraw: Textual computes it from the whole DOM path
            base = self._base_style = self.rich_style
        if self.view is None:
            return Strip.blank(width, base)
        note = self.missing()
        if note is not None:  # the pane asks the capability, never the backend's type
            lines = self.note_lines()
            if row >= len(lines):
                return Strip.blank(width, base)
            strip = Strip([Segment(lines[row], NOTE_STYLE)])
        elif row >= self.count_rows():
            return Strip.blank(width, base)
        else:
            strip = Strip(self.build_row(row, max(self.content_width(), width)))
        strip = strip.crop(scroll_x, scroll_x + width).extend_cell_length(width)
        return strip.apply_style(base)
