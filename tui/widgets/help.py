"""The help screen (``?`` or F1): every key, the seven stages in our own words, and what the
columns of the logits pane mean."""

from __future__ import annotations

import os

from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..engine.run.backend import LOCAL, Capabilities
from ..worker.stages import STAGES
from .keys import CHAT_KEYS, KEYS, PANE_KEYS, PANE_TITLES, off
from .pipeline import EXPLAIN

H = Style(bold=True, color="bright_white")
K = Style(bold=True, color="bright_cyan")
DIM = Style(color="grey62")


def in_browser() -> bool:
    """True when the app draws into a browser tab: textual-serve starts every tab's app with
    textual's web driver (``TEXTUAL_DRIVER=textual.drivers.web_driver:WebDriver``)."""
    return "web_driver" in os.environ.get("TEXTUAL_DRIVER", "")


def browser_text() -> Text:
    """What differs when the app runs in a browser tab (``tokenstep serve``)."""
    t = Text()
    t.append("\nIn a browser\n", H)
    t.append("  This tab runs its own tokenstep process on the server, on the server's model.\n")
    t.append("  Closing the tab is how to quit: the process ends and the chat is autosaved\n")
    t.append("  first. ^q ends it too; the page's Restart button then starts a fresh one.\n")
    t.append("  The browser keeps some keys for itself: ^n opens a window, so ", DIM)
    t.append("F2", K)
    t.append(" starts\n  a new chat here; ^w closes the tab, ^t and ^tab are the browser's.\n", DIM)
    t.append("  Saved and autosaved files are written on the server, in the folder above.\n")
    t.append("  Resize the window at will: the screen follows it (80×24 at least).\n")
    return t


class HelpText(Group):
    """The help's renderables, with their words as ``plain``."""

    def __init__(self, *parts: RenderableType, plain: str) -> None:
        super().__init__(*parts)
        self.plain = plain


class _Help:
    """The help as Rich renderables: running text, and key rows in a two-column grid so that a
    long line wraps under its own text (a hanging indent), not under the key."""

    def __init__(self) -> None:
        self.parts: list[RenderableType] = []
        self.plain: list[str] = []  # the words, for a search or a test
        self.text = Text()
        self.rows: Table | None = None

    def append(self, s: str, style: Style | str = "") -> None:
        self._end_rows()
        self.text.append(s, style)
        self.plain.append(s)

    def row(self, key: str, what: str, key_style: Style = K, what_style: Style | str = "") -> None:
        if self.rows is None:
            if self.text:
                self.text.rstrip()
                self.parts.append(self.text)
                self.text = Text()
            self.rows = Table.grid(padding=(0, 1))
            self.rows.add_column(width=9, no_wrap=True)
            self.rows.add_column(ratio=1)
        self.rows.add_row(Text("  " + key, key_style), Text(what, what_style))
        self.plain.append(f"  {key} {what}")

    def _end_rows(self) -> None:
        if self.rows is not None:
            self.parts.append(self.rows)
            self.rows = None

    def append_text(self, text: Text) -> None:
        self._end_rows()
        self.text.append_text(text)
        self.plain.append(text.plain)

    def done(self) -> HelpText:
        self._end_rows()
        if self.text:
            self.parts.append(self.text)
        return HelpText(*self.parts, plain="\n".join(self.plain))


def help_text(
    autosave: str | None, browser: bool | None = None, caps: Capabilities = LOCAL
) -> HelpText:
    """The help; ``caps``: the backend's, so a key it cannot honour says why it is off."""
    t = _Help()
    t.append("tokenstep", H)
    t.append(" steps a real llama.cpp model one llama_decode at a time.\n", DIM)
    t.append("Type in the chat box and press Enter; the reply plays on its own. Space pauses it\n")
    t.append("(step mode): then each → is one decode, ← takes one back, and the sampler keys\n")
    t.append("re-run the sampler on the same logits so you see what each setting cuts.\n\n")
    groups = {
        "step": "Stepping",
        "sampler": "Sampler (live, no decode)",
        "view": "View",
        "app": "App",
    }
    for g, title in groups.items():
        t.append(f"{title}\n", H)
        for k in KEYS:
            if k.group == g and k.label:
                why = off(k, caps)
                if why is None:
                    t.row(k.label, k.help)
                else:
                    t.row(k.label, f"{k.help} {why}", DIM, DIM)
    t.append("In a bottom pane (it has the focus; the key bar shows these there)\n", H)
    for pane, keys in PANE_KEYS.items():
        rows = [k for k in keys if k.label]
        key, name = PANE_TITLES[pane].split(" ", 1)
        t.row(key, f"{name}: " + " · ".join(f"{k.label} {k.help}" for k in rows))
    t.append("Chat box\n", H)
    for label, what in CHAT_KEYS:
        t.row(label, what)
    t.append(
        "  Enter while a reply plays queues the message; in step mode it cuts the reply and sends.\n",
        DIM,
    )
    t.row("/system", "/system TEXT sets the system prompt (the chat's first message; -sys at "
          "start-up); /system alone removes it.")
    t.row("/force", "/force TEXT forces the one token TEXT is (the text after one space, as typed: "
          "'/force  Paris' is ' Paris'), any of the vocabulary, not only the listed rows; "
          "/force #ID forces an id. Text of two or more tokens is refused with its pieces.")
    t.row("/p", "/p TEXT (or /p #ID): where that token stands at this step: its rank, logit and "
          "p in the full logits row, and its p′ after the chain or the stage that cut it "
          "(over --server: its rank in the top K, or that it is outside them).")
    t.append("\nThe seven stages of the loop\n", H)
    for i, (name, (call, body)) in enumerate(zip(STAGES, EXPLAIN, strict=True)):
        t.append(f"  {i + 1} {name} ", K)
        t.append(f"({call})\n", Style(color="bright_green"))
        t.row("", body)
    t.append("\nLogits pane\n", H)
    t.row("logit′", "the logit after penalties, DRY and logit bias (shown when one of them "
          "moved a logit): what top-k, top-p and min-p then compare")
    t.row("p", "softmax of the raw logits over the whole vocabulary (temperature 1)")
    t.row("p′", "probability after the sampler chain: what the pick draws from")
    t.row("★", "the token the next step will pick (same logits, a clone of the seeded RNG); "
          "at a reply's end, the end token that was picked")
    t.row("cut by", "the first stage that removed the candidate")
    t.append("\nSessions\n", H)
    t.append("  ctrl+s saves the conversation, the settings and every step record as JSON Lines\n")
    t.append("  (the 'tokenstep trace' format). After every reply the session is autosaved to\n")
    t.append(f"  {autosave or '(autosave is off)'}\n", Style(color="bright_yellow"))
    if in_browser() if browser is None else browser:
        t.append_text(browser_text())
    t.append("\nEsc, q, ? or F1 closes this screen.", DIM)
    return t.done()


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,question_mark,f1", "close", "close", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 100; max-width: 100%; height: 90%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, autosave: str | None, caps: Capabilities = LOCAL) -> None:
        super().__init__()
        self.autosave = autosave
        self.caps = caps

    def compose(self) -> ComposeResult:
        box = VerticalScroll(Static(help_text(self.autosave, caps=self.caps)))
        box.border_title = "Help · keys and the loop"
        box.border_subtitle = "↑↓ PgUp PgDn scroll · Esc closes"
        yield box

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)
