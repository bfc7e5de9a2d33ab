"""The tour on screen: one page at a time, a guess before each reveal, and the score.

Enter or → goes on, ← goes back, q or Esc leaves; 1-9 answer a choice, and a typed guess
has a box of its own (Enter sends it). The chapters run on the model in a thread of the
screen's own (:class:`LabThread`), which alone touches the lab's contexts; its facts arrive
as messages, and a page whose chapter is still running says so until they do.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Input, Static

from ..engine.model.errors import TokenstepError, one_line
from ..widgets.keys import KEYS
from .chapters import Page
from .lab import CHAPTERS, Facts, Lab, Skipped
from .strings_en import STRINGS as EN
from .strings_zh import STRINGS as ZH
from .walk import Tour
from .wrap import pack, wrap

LANGS = {"en": EN, "zh": ZH}
OWN_KEYS = {"enter", "right", "left", "q", "escape", *map(str, range(1, 10))}
# Over the app, its keys would reach the conversation under the tour (space would play it):
# the tour takes them and does nothing. Its keys that work anywhere (quit, save) still do.
SWALLOWED = sorted({n for k in KEYS if not k.anywhere for n in k.keys.split(",")} - OWN_KEYS)


def locale_lang(env: Mapping[str, str] | None = None) -> str:
    """zh where the locale says Chinese (LC_ALL, then LANG), else en."""
    env = os.environ if env is None else env
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name, "")
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


class LabThread(threading.Thread):
    """Runs every chapter in order on one lab, the only thread that touches its contexts,
    and hands each chapter's facts to ``deliver``; a chapter that fails is skipped with its
    one sentence."""

    def __init__(self, make_lab: Callable[[], Lab], deliver: Callable[[str, Facts], None]) -> None:
        super().__init__(name="tour-lab", daemon=False)
        self.make_lab = make_lab
        self.deliver = deliver
        self.stop = threading.Event()

    def run(self) -> None:
        lab: Lab | None = None
        try:
            lab = self.make_lab()
            for chapter in CHAPTERS:
                if self.stop.is_set():
                    return
                try:
                    facts = lab.run(chapter)
                except TokenstepError as exc:
                    facts = Skipped("error", one_line(str(exc)))
                except Exception as exc:  # noqa: BLE001 - said on the page, never a traceback
                    facts = Skipped("error", one_line(f"{type(exc).__name__}: {exc}"))
                if self.stop.is_set():
                    return
                self.deliver(chapter, facts)
        finally:
            if lab is not None:
                lab.close()


class TourScreen(Screen[None]):
    DEFAULT_CSS = """
    TourScreen { layout: vertical; }
    #tour-body { height: 1fr; padding: 0 1; }
    #tour-typed { margin: 0 1; }
    #tour-keys { height: 1; padding: 0 1; background: $panel; }
    """
    BINDINGS = [
        Binding("enter,right", "forward", "on", show=False),
        Binding("left", "back", "back", show=False),
        Binding("q,escape", "leave", "leave", show=False),
        *[Binding(str(i), f"answer('{i}')", str(i), show=False) for i in range(1, 10)],
        Binding(",".join(SWALLOWED), "nothing", show=False),
    ]

    def __init__(
        self,
        lang: str = "en",
        *,
        lab: Callable[[], Lab] | None = None,
        facts: Mapping[str, Facts] | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        super().__init__()
        self.lang = lang
        self.s = LANGS[lang]
        self.tour = Tour(self.s)
        self.redact = redact or (lambda text: text)
        self._thread = LabThread(lab, self._deliver) if lab is not None else None
        for chapter, f in (facts or {}).items():
            self.tour.arrived(chapter, f)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="tour-scroll"):
            yield Static(id="tour-body", markup=False)
        yield Input(id="tour-typed")
        yield Static(id="tour-keys", markup=False)

    def on_mount(self) -> None:
        self.query_one("#tour-typed", Input).cursor_blink = False
        if self._thread is not None:
            self._thread.start()
        self.draw()

    def on_unmount(self) -> None:
        if self._thread is not None:
            self._thread.stop.set()

    def on_resize(self) -> None:
        self.draw()

    # -- the lab's facts ---------------------------------------------------------------------
    def _deliver(self, chapter: str, facts: Facts) -> None:
        try:
            self.app.call_from_thread(self.arrived, chapter, facts)
        except RuntimeError:  # the app has gone
            if self._thread is not None:
                self._thread.stop.set()

    def arrived(self, chapter: str, facts: Facts) -> None:
        self.tour.arrived(chapter, facts)
        if chapter == self.tour.name:
            self.draw()

    @property
    def ready(self) -> bool:
        """Every chapter's facts are here."""
        return len(self.tour.pages) == len(CHAPTERS)

    # -- keys ----------------------------------------------------------------------------------
    def action_forward(self) -> None:
        self.tour.forward()
        self.draw()

    def action_back(self) -> None:
        self.tour.back()
        self.draw()

    def action_nothing(self) -> None:
        pass

    def action_leave(self) -> None:
        self.dismiss(None)

    def action_answer(self, key: str) -> None:
        if self.tour.give(key) is not None:
            self.draw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if not event.value.strip():  # Enter on an empty box: no guess, go on
            self.action_forward()
        elif self.tour.give(event.value) is not None:
            event.input.value = ""
            self.draw()

    # -- drawing -------------------------------------------------------------------------------
    def draw(self) -> None:
        if not self.is_mounted:
            return
        width = max(20, self.size.width - 3)
        page = self.tour.current
        typed = self.query_one("#tour-typed", Input)
        wants_typing = (
            page is not None
            and page.guess is not None
            and not page.guess.choices
            and self.tour.answer is None
        )
        typed.display = wants_typing
        if wants_typing:
            typed.focus()
        elif typed.has_focus:
            self.set_focus(None)
        self.query_one("#tour-body", Static).update(self.page_text(page, width))
        self.query_one("#tour-keys", Static).update(self.keys_text(page))

    def _lines(self, text: str, width: int, style: str = "") -> Text:
        return Text("\n".join(wrap(self.redact(text), width)) + "\n", style=style)

    def page_text(self, page: Page | None, width: int) -> Text:
        s = self.s
        if self.tour.finished:
            right, asked = self.tour.score
            return self._lines(s["ui.end"].format(right=right, asked=asked), width, "bold")
        head = s["ui.chapter"].format(i=self.tour.chapter + 1, n=len(CHAPTERS))
        if page is None:
            out = Text(head + "\n\n", style="bold")
            out.append(self._lines(s["ui.running"], width, "italic"))
            return out
        out = Text(f"{head} · {page.title}\n", style="bold")
        if page.stages:
            lines = Text("\n".join(pack(list(page.stages), width)) + "\n", style="dim")
            if page.lit >= 0:
                lines.highlight_words([page.stages[page.lit]], "bold reverse")
            out.append(lines)
        out.append("\n")
        out.append(self._lines(page.body, width))
        g = page.guess
        if g is not None:
            out.append(self._lines(g.question, width, "bold"))
            for i, choice in enumerate(g.choices, start=1):
                out.append(self._lines(f"  {i}) {choice}", width))
            given = self.tour.answer
            if given is not None:
                text, right = given
                key = "ui.right" if right else "ui.wrong"
                out.append("\n")
                out.append(
                    self._lines(
                        s[key].format(answer=g.shown_answer),
                        width,
                        "bold green" if right else "bold red",
                    )
                )
                out.append(self._lines(g.why, width))
        if page.pane:
            out.append("\n")
            out.append(self._lines(page.pane, width, "dim"))
        return out

    def keys_text(self, page: Page | None) -> Text:
        s = self.s
        parts = [s["ui.keys"]]
        g = page.guess if page is not None else None
        if g is not None and self.tour.answer is None:
            parts.append(
                s["ui.keys_choice"].format(n=len(g.choices)) if g.choices else s["ui.keys_typed"]
            )
        right, asked = self.tour.score
        parts.append(s["ui.score"].format(right=right, asked=asked))
        return Text("   ".join(parts))


class TourApp(App[None]):
    """``tokenstep tour``: the tour alone, on the model the flags name."""

    TITLE = "tokenstep tour"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, screen: TourScreen) -> None:
        super().__init__()
        self.tour_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.tour_screen, lambda _: self.exit())
