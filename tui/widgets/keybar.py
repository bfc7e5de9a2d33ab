"""The footer: the keys that work right now. Clicking a key runs it.

On narrow terminals the labels get shorter, and if the keys still do not fit in two lines
the view keys drop out first (the help screen, ``?``, always lists everything)."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from .common import DIM
from .keys import CHAT_KEYS, KEYS

KEY = Style(color="black", bgcolor="bright_cyan", bold=True)
GROUP = {"step": "bright_yellow", "sampler": "bright_green", "view": "grey70", "app": "grey70"}
ORDER = {"step": 0, "sampler": 1, "app": 2, "view": 3}
SHORTER = {
    "run/pause": "play",
    "rewind": "back",
    "new chat": "new",
    "boundaries": "bounds",
}
CHAT_ACTIONS = {
    "esc": "app.leave_chat",
    "F1": "app.help",
    "^s": "app.save",
    "^n": "app.new_chat",
    "^q": "app.quit",
}
ESSENTIAL = ("?", "^q")  # always on the key bar
Item = tuple[str, str, str | None, str]  # key label, what it does, click action, group


class KeyBar(Widget):
    DEFAULT_CSS = """
    KeyBar { height: 2; dock: bottom; background: $panel; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.chat_focused = True
        self.queued = False

    def set_context(self, chat_focused: bool, queued: bool = False) -> None:
        if (chat_focused, queued) != (self.chat_focused, self.queued):
            self.chat_focused, self.queued = chat_focused, queued
            self.refresh()

    def items(self) -> list[Item]:
        if self.chat_focused:
            out: list[Item] = [(k, w, CHAT_ACTIONS.get(k), "app") for k, w in CHAT_KEYS]
            if self.queued:
                out.append(
                    (
                        "enter",
                        "on an empty box: send the queued one now (cuts the reply)",
                        None,
                        "app",
                    )
                )
            return out
        keys = sorted((k for k in KEYS if k.label), key=lambda k: ORDER[k.group])
        return [(k.label, k.short, f"app.{k.action}", k.group) for k in keys]

    def layout_lines(self, items: list[Item], width: int, short: bool) -> list[Text]:
        lines: list[Text] = [Text(no_wrap=True, overflow="ellipsis")]
        pad = "" if short else " "
        for label, what, action, group in items:
            what = SHORTER.get(what, what) if short else what
            meta = Style.from_meta({"@click": action}) if action else Style()
            chip = Text()
            chip.append(f"{pad}{label}{pad}" if short else f" {label} ", KEY + meta)
            chip.append(
                f" {what} " if not short else f" {what}  ", Style(color=GROUP[group]) + meta
            )
            if lines[-1].cell_len + chip.cell_len > width:
                lines.append(Text(no_wrap=True, overflow="ellipsis"))
            lines[-1].append_text(chip)
        return lines

    def render(self) -> Text:
        width = self.size.width or 80
        items = self.items()
        short = False
        lines = self.layout_lines(items, width, short)
        if len(lines) > 2:
            short = True
            lines = self.layout_lines(items, width, short)
        if len(lines) > 2:
            # Help and quit must always show: they go first, then the rest as space allows,
            # the view keys dropping out before the others.
            must = [it for it in items if it[0] in ESSENTIAL]
            rest = [it for it in items if it[0] not in ESSENTIAL]
            items = must + rest
            lines = self.layout_lines(items, width, short)
            while len(lines) > 2 and len(items) > len(must):
                views = [i for i, it in enumerate(items) if it[3] == "view" and i >= len(must)]
                drop = views[-1] if views else len(items) - 1
                items = items[:drop] + items[drop + 1 :]
                lines = self.layout_lines(items, width, short)
        if self.chat_focused and len(lines) == 1:
            lines.append(Text("Typing goes to the chat box. Esc: step/sampler keys.", DIM))
        return Text("\n").join(lines[:2])
