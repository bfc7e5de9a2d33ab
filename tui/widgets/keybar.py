"""The footer: the keys that work right now. Clicking a key runs it.

A bottom pane with the focus (tab 6, the run chart, the paths tree) takes some keys for itself
(``keys.PANE_KEYS``): there the bar shows what they do in that pane (← → head, chart cursor),
and a global chip keeps only the keys the pane left it (``→ step`` becomes ``n step``).

On narrow terminals the labels get shorter, and if the keys still do not fit in two lines
the view keys drop out first (the help screen, ``?``, always lists everything)."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from ..engine.run.backend import LOCAL, Capabilities
from ..worker.views import View
from .common import DIM
from .keys import CHAT_KEYS, KEYS, PANE_KEYS, Key, off

KEY = Style(color="black", bgcolor="bright_cyan", bold=True)
GROUP = {
    "pane": "bright_magenta",
    "step": "bright_yellow",
    "sampler": "bright_green",
    "view": "grey70",
    "app": "grey70",
}
ORDER = {"pane": -1, "step": 0, "sampler": 1, "app": 2, "view": 3}
GLYPH = {
    "left": "←",
    "right": "→",
    "up": "↑",
    "down": "↓",
    "enter": "⏎",
    "backspace": "⌫",
    "space": "space",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
}
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


def _names(k: Key) -> list[str]:
    return [n.strip() for n in k.keys.split(",")]


def families(keys: tuple[Key, ...]) -> list[tuple[Key, list[str], list[Key]]]:
    """Each labelled key with its own key names and the unlabelled keys listed after it (the
    table writes ``t/T`` once, then ``T`` without a label)."""
    out: list[tuple[Key, list[str], list[Key]]] = []
    for k in keys:
        if k.label:
            out.append((k, _names(k), [k]))
        elif out:
            out[-1][2].append(k)
    return out


def bar_items(
    pane: str | None, spec: bool = False, caps: Capabilities = LOCAL
) -> list[tuple[Item, tuple[tuple[str, str], ...]]]:
    """The chips for the controls with ``pane`` focused: each item with the (key name,
    action) pairs it stands for, pane actions unprefixed, app actions as ``app.NAME``;
    ``spec``: speculation runs, so its keys get a chip too; a key whose backend lacks what it
    ``needs`` (``caps``: fork and verify over llama-server) gets none."""
    mine = tuple(k for k in PANE_KEYS.get(pane or "", ()) if not k.action.startswith("app."))
    taken = {n: k for k in mine for n in _names(k)}  # an "app." pane key keeps the app's chip
    out: list[tuple[Item, tuple[tuple[str, str], ...]]] = []
    for k, own, members in families(mine):
        pairs = tuple((n, m.action) for m in members for n in _names(m))
        out.append(((k.label, k.short, f"app.simulate_key('{own[0]}')", "pane"), pairs))
    for k, own, members in sorted(families(KEYS), key=lambda f: ORDER[f[0].group]):
        if (k.spec and not spec) or not k.bar or off(k, caps) is not None:
            continue
        pairs = tuple(
            (n, f"app.{m.action}") for m in members for n in _names(m) if n not in taken
        )
        if not pairs:
            continue  # the pane took all its keys
        label = k.label
        left = [n for n in own if n not in taken]
        if len(left) < len(own):  # the pane took some of its own keys: name the rest
            if not left:
                left = [n for n, _ in pairs[:1]]
            label = "/".join(GLYPH.get(n, n) for n in left)
        action = f"app.{k.action}" if own[0] not in taken else pairs[0][1]
        out.append(((label, k.short, action, k.group), pairs))
    return out


class KeyBar(Widget):
    DEFAULT_CSS = """
    KeyBar { height: 2; dock: bottom; background: $panel; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.chat_focused = True
        self.queued = False
        self.pane: str | None = None  # the focused bottom pane, when it takes keys
        self.spec = False  # a round has run (--spec-type): its keys get chips
        self.caps = LOCAL  # the backend's: a key it cannot honour gets no chip

    def set_context(self, chat_focused: bool, pane: str | None, view: View | None) -> None:
        """``view``: a message queued, a round run (--spec-type: its keys get chips), and
        the backend's capabilities (a key it cannot honour gets none)."""
        pane = pane if pane in PANE_KEYS else None
        queued, spec = bool(view and view.header.queued), bool(view and view.header.spec)
        caps = view.capabilities if view is not None else LOCAL
        now = (chat_focused, queued, pane, spec, caps)
        if now != (self.chat_focused, self.queued, self.pane, self.spec, self.caps):
            self.chat_focused, self.queued, self.pane, self.spec, self.caps = now
            self.refresh()

    def meaning(self, key: str) -> tuple[str, str, str] | None:
        """What the bar says ``key`` (a Textual key name) does on the controls now: (chip
        label, its words, the action the chip stands for)."""
        for (label, what, _, _), pairs in bar_items(self.pane, self.spec, self.caps):
            for name, action in pairs:
                if name == key:
                    return label, what, action
        return None

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
        return [item for item, _ in bar_items(self.pane, self.spec, self.caps)]

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
