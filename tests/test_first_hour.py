"""Faults a new user met in the first hour, each driven as the user met it on the real model.

Keys that must arrive while a reply plays are posted as the terminal driver posts them
(``App.post_message(events.Key(...))``): ``Pilot.press`` first waits for the app to go idle,
which a playing app never does."""

from __future__ import annotations

from textual import events

from tui.engine import SamplerSettings
from tui.widgets.chat_input import ChatInput

from .test_app import SIZE, make_app, run_async, wait_for

LONG = "Write a long story about a lighthouse keeper and the sea."


def post_key(app, key: str, character: str | None = None) -> None:
    """One key as the terminal driver sends it: a Key event on the app's queue."""
    app.post_message(events.Key(key, character))


@run_async
async def test_esc_during_a_reply_goes_to_the_controls_and_space_pauses(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*LONG, "enter")
        await wait_for(
            pilot, lambda: app.view is not None and app.view.activity == "generating", "the reply"
        )
        await wait_for(pilot, lambda: app.view.text.reply_tokens >= 3, "a few reply tokens")
        chat = app.query_one(ChatInput)
        assert app.view.mode == "autoplay" and app.view.activity == "generating"
        post_key(app, "escape")  # the user thinks the chat box still has the focus
        await wait_for(pilot, lambda: app.focused is not None, "the Esc to be handled")
        assert not chat.has_focus
        post_key(app, "space", " ")
        await wait_for(pilot, lambda: app.view.mode == "step", "Space to pause the reply")
        assert chat.value == ""
        # From the chat box Esc goes to the controls too.
        post_key(app, "i", "i")
        await wait_for(pilot, lambda: chat.has_focus, "i to open the chat box")
        post_key(app, "escape")
        await wait_for(pilot, lambda: not chat.has_focus, "Esc to leave the chat box")
        assert chat.value == ""
