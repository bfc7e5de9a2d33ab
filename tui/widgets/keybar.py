"""The footer: the keys that work right now, with their current meaning. Clicking a key runs it."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from .common import DIM
from .keys import CHAT_KEYS, KEYS

KEY = Style(color="black", bgcolor="bright_cyan", bold=True)
GROUP = {"step": "bright_yellow", "sampler": "bright_green", "view": "grey70", "app": "grey70"}


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

    def render(self) -> Text:
        width = self.size.width or 80
        items: list[tuple[str, str, str | None, str]] = []
        if self.chat_focused:
            for label, what in CHAT_KEYS:
                action = {
                    "esc": "app.leave_chat",
                    "F1": "app.help",
                    "^s": "app.save",
                    "^n": "app.new_chat",
                    "^q": "app.quit",
                }.get(label)
                items.append((label, what, action, "app"))
            if self.queued:
                items.append(("enter", "on empty box: send queued now (in step mode)", None, "app"))
        else:
            for k in KEYS:
                if k.label:
                    items.append((k.label, k.short, f"app.{k.action}", k.group))
        lines: list[Text] = [Text(no_wrap=True, overflow="ellipsis")]
        for label, what, action, group in items:
            chip = Text()
            meta = Style.from_meta({"@click": action}) if action else Style()
            chip.append(f" {label} ", KEY + meta)
            chip.append(f" {what} ", Style(color=GROUP.get(group, "white")) + meta)
            if lines[-1].cell_len + chip.cell_len > width and len(lines) < 2:
                lines.append(Text(no_wrap=True, overflow="ellipsis"))
            lines[-1].append_text(chip)
        if self.chat_focused and len(lines) == 1:
            lines.append(Text("Typing goes to the chat box. Esc: step/sampler keys.", DIM))
        return Text("\n").join(lines)
