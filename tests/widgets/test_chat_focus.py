"""The chat box and the app's own focus move at the end of a reply (no model needed).

A key pressed while the controls had the focus can reach the chat box after the app moved the
focus there (it waited behind the view that ended the reply). It must act on the controls, as
it would have a moment earlier, not be typed: ``0`` opens the cache tab instead of starting a
message with "0"."""

from __future__ import annotations

import asyncio

from textual import events
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import Button

from tui.widgets.chat_input import ChatInput


class FocusApp(App[None]):
    BINDINGS = [("0", "tab", "cache tab")]

    def __init__(self) -> None:
        super().__init__()
        self.tabs = 0

    def compose(self) -> ComposeResult:
        yield Button("controls", id="controls")
        yield ChatInput(id="chat")

    def action_tab(self) -> None:
        self.tabs += 1


async def _controls_focused(app: FocusApp, pilot: Pilot[None]) -> ChatInput:
    """The chat box, with the focus on the controls."""
    app.query_one("#controls").focus()
    await pilot.pause()
    return app.query_one(ChatInput)


def test_a_key_pressed_before_the_move_reaches_the_controls():
    async def run() -> None:
        app = FocusApp()
        async with app.run_test() as pilot:
            chat = await _controls_focused(app, pilot)
            early = events.Key("0", "0")  # pressed while the controls have the focus
            chat.take_focus()
            assert app.focused is chat  # at once, not at the next message
            app.post_message(early)
            await pilot.pause()
            assert app.tabs == 1
            assert chat.value == ""
            assert app.focused is app.query_one("#controls")  # the user was still there
            # Pressed after the move: typed, as any key in the box.
            chat.take_focus()
            await pilot.pause()
            await pilot.press("0", "x")
            assert chat.value == "0x"
            assert app.tabs == 1

    asyncio.run(run())


def test_a_user_focus_types_every_key():
    async def run() -> None:
        app = FocusApp()
        async with app.run_test() as pilot:
            chat = await _controls_focused(app, pilot)
            early = events.Key("0", "0")
            chat.focus()  # the user's own move (Esc, i, a click): no special case
            await pilot.pause()
            app.post_message(early)
            await pilot.pause()
            assert chat.value == "0"
            assert app.tabs == 0

    asyncio.run(run())
