"""The Textual app that ``tokenstep`` opens: chat with a real model and watch every stage.

The app never touches the engine. A :class:`~tui.worker.Worker` owns it on one worker
thread; key presses become commands on its queue, and each :class:`~tui.worker.views.View` it
publishes is drawn here. While a reply plays, the light panes (header, pipeline, logits) draw at
most ``LIGHT_HZ`` times a second and the heavy ones (text, tokens, KV grid, mask, timeline,
batch) at most ``HEAVY_HZ`` times, only the bottom pane that is showing; in step mode every
view is drawn at once.

What the keys do is in :mod:`tui.app_actions`; :mod:`tui.startup` builds the engine and runs
the app from the command line's flags.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Any

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.timer import Timer
from textual.widgets import ContentSwitcher, Input, Static

from .app_actions import AppActions
from .engine.run.backend import Backend
from .widgets.attention_tabs import AnatomyTab, AttentionTab
from .widgets.batch import BatchPane
from .widgets.busy import BusyBar
from .widgets.cache import CacheTab, MemoryTab
from .widgets.chat_input import ChatInput
from .widgets.common import literal
from .widgets.header import StatusHeader
from .widgets.keybar import KeyBar
from .widgets.kvcache import KVCachePane
from .widgets.lens import LensTab
from .widgets.logits import LogitsPane
from .widgets.mask import CausalMaskPane
from .widgets.paths import PathsPane
from .widgets.pipeline import PipelinePane
from .widgets.run_chart import RunChart
from .widgets.text import ConversationPane
from .widgets.timeline import TimelinePane
from .widgets.tokens import TokensPane
from .worker import View, Worker, slash

MIN_W, MIN_H = 80, 24
COMPACT_W, COMPACT_H = 110, 34
LIGHT_HZ = 10  # header, pipeline, logits while a reply plays
HEAVY_HZ = 5  # text, tokens, KV grid, mask, timeline, batch while a reply plays
GIL_SWITCH_S = 0.0005  # see on_mount


class ViewReady(Message):
    """The worker published a new view (the view itself is fetched with ``take``)."""


class TokenstepApp(AppActions):
    CSS_PATH = "app.tcss"
    TITLE = "tokenstep"
    ENABLE_COMMAND_PALETTE = False

    def __init__(
        self,
        engine: Backend,
        *,
        raw: bool = False,
        prefix_cache: bool = True,
        autoplay: bool = True,
        prefill: str = "",
        autosave_dir: str | Path | None = None,
        show_timings: bool = True,
        close_engine: bool = True,
    ) -> None:
        super().__init__()
        self.engine_name = engine.info.name
        self.show_timings = show_timings
        self.prefill_text = prefill
        self.worker = Worker(
            engine,
            raw=raw,
            prefix_cache=prefix_cache,
            autoplay=autoplay,
            autosave_dir=autosave_dir,
            on_view=self._on_view,
            close_engine=close_engine,
        )
        self.view: View | None = None
        self._last_heavy = 0.0
        self._heavy_timer: Timer | None = None
        self._apply_timer: Timer | None = None
        self._next_apply = 0.0
        self._returned_seq = 0
        self._notice_key: tuple[object, ...] | None = None  # what the notice row last drew
        self._said_over: tuple[str, str] | None = None  # the worker's notice under the app's own
        self._switch_interval = sys.getswitchinterval()
        self._tab = "tokens"
        # A control key (a binding outside the chat box) since the last message was sent: at
        # the reply's end the keys then stay on the controls, else the focus goes back to typing.
        self._controls_used = False

    def action_tour(self) -> None:  # l: the guided tour, in a context of its own
        from .tour.cli import open_tour
        open_tour(self)

    # -- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusHeader(self.engine_name, id="header")
        yield PipelinePane(id="pipeline")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield LogitsPane(id="logits")
            with Vertical(id="right"):
                yield ConversationPane(id="conversation")
                yield Static(id="tabstrip")
                with ContentSwitcher(initial="tokens", id="tabs"):
                    yield TokensPane(id="tokens")
                    yield BatchPane(id="batch")
                    yield TimelinePane(id="timeline")
                    yield KVCachePane(id="kv")
                    yield CausalMaskPane(id="mask")
                    yield AttentionTab(id="attention")
                    yield AnatomyTab(id="anatomy")
                    yield LensTab(id="lens")
                    yield MemoryTab(id="memory")
                    yield CacheTab(id="cache")
                    yield RunChart(id="run")
                    yield PathsPane(id="paths")
        yield ChatInput(
            self.prefill_text,
            placeholder=(
                "Type text for the model to continue and press Enter"
                if self.worker.raw
                else "Type a message and press Enter"
            ),
            id="chat",
            # Textual selects the whole box on focus, so the next key replaced it: `i` then a
            # letter erased a message handed back, and a word typed on the controls lost its
            # first letter ("He" became "e"). The cursor stays where it was instead.
            select_on_focus=False,
        )
        yield Static(id="notice")
        yield BusyBar(id="busy")
        yield KeyBar(id="keybar")
        yield Static(id="too-small")

    def on_mount(self) -> None:
        # The decode thread gives up the GIL inside every llama.cpp call and must win it back
        # afterwards; while this thread is drawing it can wait a whole switch interval for
        # it, several times per token. 5 ms (Python's default) is half a decode step here.
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(GIL_SWITCH_S)
        # Everything built so far (the model's metadata, the widget tree) lives as long as
        # the app: freezing it keeps Python's full collections, which stop both threads, from
        # walking it again and again (they took up to 60 ms mid-reply).
        gc.collect()
        gc.freeze()
        self.main.query_one("#pipeline").border_title = "pipeline · the loop"
        self.main.query_one("#logits").border_title = "logits → sampler"
        self.main.query_one("#conversation").border_title = "text"
        self.main.query_one("#chat").border_title = "chat" if not self.worker.raw else "prompt"
        self.main.query_one("#tokens").border_title = "tokens"
        self.main.query_one("#batch").border_title = "batch · last llama_decode"
        self.main.query_one("#timeline").border_title = "timeline · measured llama_decode time"
        self.main.query_one(
            "#cache"
        ).border_title = "cache · verify, work, prefix, shifts, sequences"
        self.main.query_one("#run").border_title = "run over time · entropy and p per step"
        self.main.query_one("#paths").border_title = "paths not taken · this turn"
        self._draw_tabstrip()
        self._size_classes()
        self.main.query_one("#chat", Input).focus()
        self._gate_keys()  # a flood of key presses cannot bury Ctrl+Q
        self.worker.start()

    def on_unmount(self) -> None:
        self.worker.stop(timeout=0.2 if self.quit_now else 60.0)
        sys.setswitchinterval(self._switch_interval)

    def on_resize(self, event: events.Resize) -> None:
        self._size_classes(event.size.width, event.size.height)

    def _size_classes(self, w: int | None = None, h: int | None = None) -> None:
        if w is None or h is None:
            w, h = self.size
        small = w < MIN_W or h < MIN_H
        # The panes' screen, not the active one: a resize while the help is open (or closing)
        # set the class on the help screen, and the panes came back squeezed, with no notice.
        was_small = self.main.has_class("-too-small")
        self.main.set_class(small, "-too-small")
        if was_small and not small and self.focused is None:
            # Hiding the panes took the focus away; give it back.
            self.call_after_refresh(self.main.query_one("#chat", Input).focus)
        self.main.set_class(not small and (w < COMPACT_W or h < COMPACT_H), "-compact")
        self.main.query_one(PipelinePane).set_class(w < COMPACT_W or h < COMPACT_H, "-compact")
        self.main.query_one(PipelinePane).refresh(layout=True)
        if small:
            self.main.query_one("#too-small", Static).update(
                Text(
                    f"tokenstep needs at least {MIN_W}×{MIN_H} (this terminal is {w}×{h}).\n"
                    "Enlarge the window; the model keeps its state.\nCtrl+Q quits."
                )
            )
        if self.screen_stack and self.main.query("#tabstrip"):
            self._draw_tabstrip()
            self.call_after_refresh(self._draw_tabstrip)  # again, once the strip has its width

    # -- views from the worker -----------------------------------------------------------------
    def _on_view(self, view: View) -> None:
        """Called on the worker thread: only hand over, never draw."""
        self.post_message(ViewReady())

    def _playing(self) -> bool:
        v = self.view
        return v is not None and v.mode == "autoplay" and v.activity == "generating"

    def on_view_ready(self, message: ViewReady) -> None:
        """While a reply plays, take views at most ``LIGHT_HZ`` times a second (the worker
        builds the next one only after this one is taken); otherwise draw at once."""
        latest = self.worker.latest
        answers = (
            latest is not None and self.view is not None and latest.commands > self.view.commands
        )
        if answers:  # the user pressed a key: show its effect now, not at the next tick
            if self._apply_timer is not None:
                self._apply_timer.stop()
            self._apply_latest()
            return
        if self._apply_timer is not None:
            return  # the timer takes the newest view when it fires
        wait = self._next_apply - time.monotonic()
        if wait > 0 and self._playing():
            self._apply_timer = self.set_timer(wait, self._apply_latest)
        else:
            self._apply_latest()

    def _apply_latest(self) -> None:
        self._apply_timer = None
        if not self.is_running or not self.screen_stack or not self.main.query("#chat"):
            return  # the app is closing (its widgets go one by one: a view could find half)
        view = self.worker.take()
        if view is None or (self.view is not None and view.seq <= self.view.seq):
            return
        self._next_apply = time.monotonic() + 1.0 / LIGHT_HZ
        prev, self.view = self.view, view
        self.main.query_one(StatusHeader).show(view)
        self.main.query_one(PipelinePane).show(view)
        self.main.query_one(LogitsPane).show(view)
        self._notice(view)
        self.show_busy(view.busy)
        self._keybar()
        now = time.monotonic()
        # While playing, the heavy panes redraw on every other light tick, in the same frame
        # (a separate timer would cost a frame of its own). Half a tick of slack keeps the
        # cadence when a tick comes a little early.
        due = self._last_heavy + 1.0 / HEAVY_HZ - 0.5 / LIGHT_HZ
        if self._playing() and now < due:
            if self._heavy_timer is None:  # in case no further view comes
                self._heavy_timer = self.set_timer(2.0 / HEAVY_HZ, self._flush_heavy)
        else:
            if self._heavy_timer is not None:
                self._heavy_timer.stop()
                self._heavy_timer = None
            self._draw_heavy()
        if view.header.returned_text and view.seq > self._returned_seq:
            self._returned_seq = view.seq
            chat = self.main.query_one("#chat", Input)
            if not chat.value:
                chat.value = view.header.returned_text
            elif view.header.returned_text not in chat.value:  # typed meanwhile: keep both
                chat.value = f"{view.header.returned_text} {chat.value}"
        # At the reply's end: someone who only chatted types the next message at once, so the
        # focus goes back to the box (at once: it always matches the view drawn; a key pressed
        # before still reaches the controls, see ChatInput). Someone who used a control key
        # since sending keeps the keys on the controls (k stays top-k; moving the focus typed
        # it as text); the notice then says that i types the next message (see _notice).
        ended = prev is not None and prev.activity == "generating" and view.activity == "done"
        if ended and not view.header.queued and not self._controls_used:
            self.main.query_one("#chat", ChatInput).take_focus()

    def _flush_heavy(self) -> None:
        self._heavy_timer = None
        if not self.is_running or not self.screen_stack:  # fired while the app was closing
            return
        self._draw_heavy()

    def _draw_heavy(self) -> None:
        view = self.view
        if view is None:
            return
        self._last_heavy = time.monotonic()
        self.main.query_one(ConversationPane).show(view)
        pane = self.main.query_one(f"#{self._tab}")
        pane.show(view)  # type: ignore[attr-defined]

    def _notice(self, view: View) -> None:
        colour = {"info": "grey85", "warn": "bright_yellow", "error": "bright_red"}
        chat = self.main.query_one("#chat", Input)
        hint = view.activity == "done" and not chat.has_focus and not view.header.queued
        key = (view.notice, view.notice_level, view.header.queued, view.header.autosave_path, view.header.last_saved, hint)
        if key == self._notice_key:
            return  # unchanged: a redraw would cost a frame for nothing
        self._notice_key = key
        if self._said_over != (view.notice, view.notice_level):
            # (else the app's own message, see _say, stays over the unchanged notice)
            self._said_over = None
            t = Text(overflow="fold")
            t.append(literal(view.notice), Style(color=colour.get(view.notice_level, "white")))
            if hint:  # the reply is over and the keys are on the controls
                t.append("  i types the next message.", Style(color="bright_cyan"))
            self._show_notice(t)
        base = "prompt" if view.raw else "chat"
        if view.header.queued:
            # The user's own words: plain text in the border, never markup.
            shown = literal(view.header.queued if len(view.header.queued) <= 40 else view.header.queued[:39] + "…")
            chat.border_title = Text.assemble(
                (f"{base} · ", ""),
                ("queued", Style(color="black", bgcolor="bright_yellow", bold=True)),
                (f" {shown!r} is sent when this reply ends", Style(color="bright_yellow")),
            )
        else:
            chat.border_title = base
        if view.header.autosave_path is None:
            chat.border_subtitle = "autosave off"
        else:
            where = view.header.autosave_path.replace(str(Path.home()), "~", 1)
            done = " (written)" if view.header.last_saved == view.header.autosave_path else ""
            # A path is plain text: a str border title would be parsed as markup.
            chat.border_subtitle = Text(literal(f"autosave after each reply → {where}{done}"))

    def _keybar(self) -> None:
        try:
            chat = self.main.query_one("#chat", Input)
            bar = self.main.query_one(KeyBar)
        except (NoMatches, IndexError):  # the app is closing
            return
        pane = getattr(self.focused, "id", None)  # tab 6, c or w take some keys for themselves
        bar.set_context(chat.has_focus, pane, self.view)  # queued, --spec-type, the backend

    async def run_action(
        self,
        action: Any,
        default_namespace: Any = None,
        namespaces: Any = None,
    ) -> bool:
        """Every key binding runs through here: note a control key (outside the chat box)."""
        focused = self.focused
        if focused is None or getattr(focused, "id", None) != "chat":
            self._controls_used = True
        return await super().run_action(action, default_namespace, namespaces)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        self._keybar()
        if self.view is not None and self.main.query("#notice"):
            self._notice(self.view)  # the end-of-reply hint depends on where the focus is
            # (not over a message of the app's own, such as a paste's: see _said_over)

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        self._keybar()

    # -- chat box ------------------------------------------------------------------------------
    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "chat":
            return
        text = event.value
        view = self.view
        queued = view is not None and view.header.queued is not None
        if not text.strip() and not queued:
            self._say("Type a message first.", "bright_yellow")
            return
        event.input.value = ""
        self._controls_used = False  # a new message: its reply's end returns to typing
        if text.startswith("/tokenize") and text[9:10] in ("", " "):
            self.worker.tokenize_text(text[10:])  # its tokens in the notice, not sent
            return
        if text.startswith("/system") and text[7:8] in ("", " "):
            self.worker.set_system_prompt(text[8:])  # /system TEXT (empty: none)
            return
        if slash.parse(text) is not None:  # /force TEXT, /p TEXT: the next step's token
            worker = self.worker
            worker.call_soon(lambda: slash.run(worker, text))
            return
        self.worker.send(text)
        if view is None or view.activity != "generating" or view.mode == "step":
            self.controls().focus()

    def on_chat_input_pasted_lines(self, event: ChatInput.PastedLines) -> None:
        self._say(
            f"Pasted {event.lines} lines ({event.chars} characters): the chat box is one line, "
            "so the line breaks became spaces. Enter sends it all."
        )
