"""What the keys do in the app: the bindings built from the one key table
(:mod:`tui.widgets.keys`, which also feeds the key bar and the help screen), the tab strip, and
every ``action_*``.

Each action only queues a command for the worker (``self.worker``) or changes what the UI
shows; the view that answers a command is drawn by :class:`tui.app.TokenstepApp`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import ContentSwitcher, Input, Static

from .app_keys import KeyRouting
from .app_tabs import tabstrip
from .engine.run.backend import LOCAL
from .widgets.attention import AttentionPane
from .widgets.busy import BusyBar
from .widgets.help import HelpScreen
from .widgets.keys import KEYS
from .widgets.logits import LogitsPane
from .widgets.paths import PathsPane
from .widgets.pipeline import PipelinePane
from .widgets.run_chart import RunChart
from .widgets.save_dialog import SaveScreen, default_save_path
from .widgets.text import ConversationPane
from .widgets.tokens import TokensPane
from .worker.commands import SpecRowMove, SpecStage

if TYPE_CHECKING:
    from .worker import View, Worker

def _bindings() -> list[BindingType]:
    out: list[BindingType] = []
    for k in KEYS:
        out.append(Binding(k.keys, k.action, k.short or k.action, show=False, priority=k.anywhere))
    out.append(Binding("f1", "help", "help", show=False, priority=True))
    out.append(Binding("escape", "toggle_focus", "chat/controls", show=False))
    return out


class AppActions(KeyRouting):
    """The key actions and the tab strip; :class:`tui.app.TokenstepApp` adds the rest."""

    BINDINGS = _bindings()

    # set by TokenstepApp.__init__
    worker: Worker
    view: View | None
    _tab: str
    _notice_key: tuple[object, ...] | None
    _said_over: tuple[str, str] | None
    _paths_shown = False  # the tree pane shows: the worker parks rewound cells

    def _draw_tabstrip(self) -> None:
        strip = self.main.query_one("#tabstrip", Static)
        room = (strip.size.width or self.size.width // 2) - 2
        strip.update(tabstrip(self._tab, room), layout=False)  # always one row

    def _show_notice(self, t: Text) -> None:
        """The whole notice, on up to three rows; the layout is redone only when the number
        of rows changes (most notices are one row)."""
        notice = self.main.query_one("#notice", Static)
        width = max(notice.size.width - 2, 20)  # its padding
        rows = min(len(t.wrap(self.console, width)), 3)
        notice.update(t, layout=rows != notice.styles.height.value)  # type: ignore[union-attr]
        notice.styles.height = rows

    def show_busy(self, what: str | None, keys: str = "Ctrl+Q quits") -> None:
        """The progress row stands in for the notice row while a slow command runs."""
        if self._quitting and what is None:
            return  # the quit's own progress stays up to the end
        self.main.query_one(BusyBar).show(what, keys)
        self.main.query_one("#notice").display = what is None

    def _say(self, text: str, colour: str = "grey85") -> None:
        # It stays until the worker says something new: views keep coming while a reply plays
        # (the same "Playing" each time), and replacing it at the next one hid it before a frame.
        view = self.view
        self._said_over = None if view is None else (view.notice, view.notice_level)
        self._show_notice(Text(text, Style(color=colour)))

    # -- the loop --------------------------------------------------------------------------------
    def action_toggle_play(self) -> None:
        self.worker.toggle_play()

    def action_step(self) -> None:
        self.worker.step()

    def action_rewind(self) -> None:
        self.worker.rewind(1)

    def action_cursor(self, delta: int) -> None:
        logits = self.main.query_one(LogitsPane)
        if (
            self.view is not None
            and self.view.mode == "autoplay"
            and self.view.activity == "generating"
        ):
            self.worker.pause()
        logits.move(delta)

    def action_spec_row(self, delta: int) -> None:  # --spec-type: across the verify rows
        self.worker.put(SpecRowMove(delta))

    def action_spec_stage(self) -> None:  # --spec-type: the last round's stages, in order
        self.worker.put(SpecStage())

    def action_force(self) -> None:
        row = self.main.query_one(LogitsPane).highlighted
        if row is None:
            self._say("No candidates yet: send a message first.", "bright_yellow")
            return
        self.worker.force(row.id)

    def on_logits_pane_clicked(self, event: LogitsPane.Clicked) -> None:
        self.action_force()  # the clicked row is the cursor now

    def action_copy_reply(self) -> None:
        """The newest reply to the clipboard (Textual's copy_to_clipboard: OSC 52)."""
        msgs = self.view.text.messages if self.view is not None else ()
        reply = next((m.content for m in reversed(msgs) if m.role == "assistant"), None)
        if not reply:
            self._say("No reply to copy yet.", "bright_yellow")
            return
        self.copy_to_clipboard(reply)
        self._say(
            f"Copied the reply ({len(reply):,} characters) to the clipboard (OSC 52: the "
            "terminal must allow it; tmux needs set-clipboard on)."
        )

    def action_adjust(self, name: str, direction: int) -> None:
        self.worker.adjust(name, direction)

    def action_chain(self, op: str, arg: str = "") -> None:
        self.worker.chain_edit(op, arg)

    def action_chain_set(self) -> None:
        from .widgets.chain_dialog import ChainScreen

        def done(line: str | None) -> None:
            if line:
                self.worker.chain_edit("set", line)

        self.push_screen(ChainScreen(), done)

    def action_greedy(self) -> None:
        self.worker.toggle_greedy()

    def action_seed(self) -> None:
        self.worker.next_seed(1)

    # -- the tabs --------------------------------------------------------------------------------
    def action_tab(self, name: str) -> None:
        self._tab = name
        self.main.query_one(ContentSwitcher).current = name
        self._draw_tabstrip()
        if self.view is not None:
            self.main.query_one(f"#{name}").show(self.view)  # type: ignore[attr-defined]
        # The worker builds the whole-context attention matrix only while tab 6 or 7 shows it.
        self.worker.attention_cmd("tabs", name == "attention", name == "anatomy")
        self.worker.lens_cmd("tab", name == "lens")  # the lens is computed only on tab 8
        if name in ("attention", "anatomy", "run", "paths"):
            self.main.query_one(f"#{name}").focus()
        elif self.focused is not None and self.focused.id in ("run", "paths"):
            self.main.query_one(LogitsPane).focus()  # the pane that had the keys is hidden
        if (name == "paths") != self._paths_shown:
            self._paths_shown = name == "paths"  # while it shows, rewinds park their cells
            self.worker.paths_shown(self._paths_shown)
        if name != "run":
            self.main.query_one(ConversationPane).set_mark(None)

    def action_surprise(self) -> None:
        self.worker.surprise_scale()

    def on_run_chart_moved(self, event: RunChart.Moved) -> None:
        self.main.query_one(ConversationPane).set_mark(event.index)

    def on_paths_pane_jump(self, event: PathsPane.Jump) -> None:
        self.worker.jump_path(event.branch)

    def action_scroll_tab(self, direction: int) -> None:
        """PgUp/PgDn (±1) and Home/End (±2): a tab that scrolls inside (tab 8's layers under
        its fixed summary) says how with its own ``scroll_tab``."""
        pane = self.main.query_one(f"#{self._tab}")
        inner = getattr(pane, "scroll_tab", None)
        if inner is not None:
            inner(direction)
        elif abs(direction) >= 2:
            (pane.scroll_end if direction > 0 else pane.scroll_home)(animate=False)
        elif direction > 0:
            pane.scroll_page_down()
        else:
            pane.scroll_page_up()

    def action_zoom_tab(self) -> None:
        """z: the bottom pane takes the whole window (pipeline, logits and text hidden)."""
        zoomed = not self.main.has_class("-zoom")
        self.main.set_class(zoomed, "-zoom")
        self._say(
            "Bottom pane enlarged: z again gives the pipeline, logits and text panes back."
            if zoomed
            else "Bottom pane back to its size: z enlarges it again."
        )

    def action_verify(self, mode: str = "batched") -> None:
        self.worker.verify(mode)
        self.action_tab("cache")

    def action_fork(self) -> None:
        self.worker.fork()
        self.action_tab("cache")

    def action_attention(self) -> None:
        self.worker.attention_cmd("toggle")
        if self._tab not in ("attention", "anatomy"):
            self.action_tab("attention")

    def action_lens_mode(self) -> None:
        self.worker.lens_cmd("mode")
        if self._tab != "lens":
            self.action_tab("lens")

    def action_lens_grid(self) -> None:
        if self._tab != "lens":
            self.action_tab("lens")  # the lens goes on first, then the grid
        self.worker.lens_cmd("grid")

    def action_attention_all(self) -> None:
        self.worker.attention_cmd("all")
        if self._tab not in ("attention", "anatomy"):
            self.action_tab("attention")

    def on_attention_pane_layer_requested(self, event: AttentionPane.LayerRequested) -> None:
        self.worker.attention_cmd("layer", event.layer)

    def on_attention_pane_selection_changed(self, event: AttentionPane.SelectionChanged) -> None:
        self.worker.attention_cmd("head", event.head)

    def action_boundaries(self) -> None:
        self.main.query_one(ConversationPane).toggle_boundaries()

    def action_ids(self) -> None:
        self.action_tab("tokens")
        self.main.query_one(TokensPane).toggle_ids()

    def action_seen(self) -> None:
        self.main.query_one(LogitsPane).toggle_seen()

    def action_explain(self) -> None:
        self.main.query_one(PipelinePane).toggle_explain()

    # -- focus, files, help ----------------------------------------------------------------------
    def action_focus_chat(self) -> None:
        self.main.query_one("#chat", Input).focus()

    def controls(self) -> Widget:
        """Where the step/sampler keys go: tab 6 or 7 while it shows (its own keys, [ ] and
        the arrows, act there), else the logits pane."""
        if self._tab in ("attention", "anatomy"):
            return self.main.query_one(f"#{self._tab}")
        return self.main.query_one(LogitsPane)

    def action_leave_chat(self) -> None:
        self.controls().focus()

    def action_toggle_focus(self) -> None:
        """Esc always leads to the controls, never away from them: an Esc pressed on the
        controls during a reply leaves the next Space to pause, not to be typed."""
        chat = self.main.query_one("#chat", Input)
        if chat.has_focus:
            self.controls().focus()
        else:
            self._say("Esc: the step/sampler keys already have the focus; i or any letter types.")

    def action_new_chat(self) -> None:
        self.worker.new_chat()
        self.main.query_one("#chat", Input).focus()

    def action_save(self) -> None:
        before = self.focused  # back there after the dialog, not where a reply's end moved it

        def done(path: str | None) -> None:
            if path:
                self.worker.save(path)
            else:
                self._say("Not saved.")
            target = before if before is not None and before.is_attached else self.controls()
            self.main.set_focus(target)

        self.push_screen(SaveScreen(default_save_path(self.worker.autosave_dir)), done)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss(None)
            return
        path = self.worker.autosave_path
        caps = self.view.capabilities if self.view is not None else LOCAL
        self.push_screen(HelpScreen(str(path) if path else None, caps))

    _quitting = False
    quit_now = False  # a second Ctrl+Q: do not wait for the decode thread

    async def action_quit(self) -> None:
        """Stop the decode thread (it autosaves) with the screen still up and saying so; a
        second Ctrl+Q leaves at once."""
        if self._quitting:
            self.quit_now = True
            self.exit(0)
            return
        self._quitting = True
        path = self.worker.autosave_path
        where = f", autosaving to {path}" if path else ""
        self.show_busy(
            f"Quitting: finishing the decode under way{where}",
            "Ctrl+Q again quits without waiting; this autosave may then be lost",
        )
        self.run_worker(self._stop_then_exit(), exclusive=True)  # keys keep working meanwhile

    def _stop_now(self) -> None:
        """On the driver's input thread, at a served tab's quit: ask, without waiting."""
        self.worker.stop(timeout=0)

    async def _stop_then_exit(self) -> None:
        await asyncio.to_thread(self.worker.stop)
        self.exit(0)
