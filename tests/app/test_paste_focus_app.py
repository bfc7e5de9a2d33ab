"""Where keys and pastes go (App.run_test, the bundled model): a reply's end leaves the keys on
the controls (``k`` is top-k, not a letter in the chat box) and says that ``i`` types; a message
sent in step mode says how to start its reply; a paste lands in the chat box whatever has the
focus (the pty test, tests/app/test_paste_pty.py, sends a terminal's real bytes); a resize while
the help is open still tells a too-small terminal so."""

from __future__ import annotations

import dataclasses
import math

from textual import events
from textual.widgets import Input

from tests.support.app import SIZE, make_app, run_async, send, wait_for
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.widgets.chat_input import ChatInput
from tui.widgets.logits import LogitsPane
from tui.widgets.text import ConversationPane

HINT = "i types the next message."
STEP_HINT = "→ decodes the first token, space plays the reply"


def notice(app) -> str:
    return str(app.query_one("#notice").content)


@run_async
async def test_a_replys_end_leaves_the_keys_on_the_controls(make_engine, tmp_path):
    """As reported: someone stepping a reply with the keys, then playing it to its end."""
    app = make_app(make_engine, tmp_path)  # step mode
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Say hi.")
        await pilot.press("right")  # a control key since the send
        await pilot.press("space")  # then play it out
        await wait_for(
            pilot,
            lambda: app.view.activity == "done" and app.view.text.reply_tokens > 0,
            "the reply to end",
            300,
        )
        chat = app.query_one(ChatInput)
        assert isinstance(app.focused, LogitsPane)  # where the send put it, and it stays
        assert HINT in notice(app)
        top_k = app.view.settings.top_k
        await pilot.press("k")  # as reported: typed into the box, not top-k
        await wait_for(pilot, lambda: app.view.settings.top_k != top_k, "top-k to move")
        assert chat.value == ""
        await pilot.press("i")  # one key to type
        assert chat.has_focus
        await wait_for(pilot, lambda: HINT not in notice(app), "the hint to go")
        await pilot.press("h", "i")
        assert chat.value == "hi"
        await pilot.press("escape")
        await wait_for(pilot, lambda: HINT in notice(app), "the hint back on the controls")


@run_async
async def test_a_reply_only_watched_gives_the_keys_back_to_typing(make_engine, tmp_path):
    """No control key since the send: the next message is typed at once (a chat)."""
    app = make_app(make_engine, tmp_path, autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Say hi.", "enter")  # a short reply: it may end before a view shows it
        await wait_for(
            pilot,
            lambda: app.view.activity == "done" and app.view.text.reply_tokens > 0,
            "the reply to end",
            300,
        )
        await wait_for(pilot, lambda: app.query_one(ChatInput).has_focus, "the chat box")
        await pilot.press("k")
        assert app.query_one(ChatInput).value == "k"


@run_async
async def test_a_message_sent_in_step_mode_says_how_its_reply_starts(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)  # step mode
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Say hi.")
        pane = app.query_one(ConversationPane)
        await wait_for(pilot, lambda: STEP_HINT in pane.plain, "the hint under the message")
        assert pane.plain.rstrip().endswith(f"model ▸ ▌  {STEP_HINT}")
        n = app.view.text.n_past
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.n_past == n + 1, "the first token")
        await wait_for(pilot, lambda: STEP_HINT not in pane.plain, "the hint to go")


@run_async
async def test_a_paste_on_the_controls_goes_into_the_chat_box(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Say hi.")
        assert isinstance(app.focused, LogitsPane)
        chat = app.query_one("#chat", Input)
        app.post_message(events.Paste("a pasted line"))
        await wait_for(pilot, lambda: chat.value == "a pasted line", "the paste in the box")
        assert chat.has_focus
        assert "Pasted 13 characters into the chat box" in notice(app)
        app.query_one(LogitsPane).focus()
        await pilot.pause()
        app.post_message(events.Paste("one\ntwo"))
        await wait_for(pilot, lambda: chat.value == "a pasted lineone two", "the joined lines")
        assert "Pasted 2 lines" in notice(app)
        await pilot.press("ctrl+s")  # a dialog's own box keeps its pastes
        await pilot.pause()
        dialog_box = app.screen.query_one(Input)
        before = dialog_box.value
        app.post_message(events.Paste("x.jsonl"))
        await wait_for(pilot, lambda: dialog_box.value != before, "the paste in the dialog")
        assert chat.value == "a pasted lineone two"


@run_async
async def test_the_paste_message_outlives_the_views_of_a_playing_reply(make_engine, tmp_path):
    """As seen in CI: each view of a playing reply (the same "Playing" notice every step)
    replaced the app's own message at once, so under load the paste's notice was never drawn.
    It now stays until the worker says something new."""
    # A context shift is news the worker says (it rightly replaces the message): a context
    # of 4096 keeps it far past the test's steps (at -c 512 a loaded run reached it first).
    engine = make_engine(SamplerSettings(temp=0.0), n_ctx=4096, context_full="shift")
    eog = [t for t in range(engine.info.n_vocab) if engine.vocab.is_eog(t)]
    engine.settings = dataclasses.replace(
        engine.settings, logit_bias=[(t, -math.inf) for t in eog]
    )  # the reply plays on until the test ends
    app = TokenstepApp(engine, autoplay=True, autosave_dir=tmp_path / "autosave", close_engine=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Tell me a story.")
        await wait_for(pilot, lambda: app.view.text.reply_tokens >= 2, "the reply to play")
        assert isinstance(app.focused, LogitsPane)
        app.post_message(events.Paste("a pasted line"))
        await wait_for(pilot, lambda: "Pasted 13 characters" in notice(app), "the message")
        shown = app.view.text.reply_tokens
        await wait_for(pilot, lambda: app.view.text.reply_tokens >= shown + 4, "four more views")
        assert "Pasted 13 characters into the chat box" in notice(app)
        await pilot.press("escape")  # back to the controls (the paste gave the box the keys)
        await wait_for(pilot, lambda: isinstance(app.focused, LogitsPane), "the controls")
        assert "Pasted 13 characters into the chat box" in notice(app)  # a focus move keeps it
        await pilot.press("space")  # the worker says something new: it replaces the message
        await wait_for(pilot, lambda: "Pasted" not in notice(app), "the worker's notice")


@run_async
async def test_a_resize_while_the_help_is_open_still_says_too_small(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        await pilot.pause()
        await pilot.resize_terminal(70, 20)
        await pilot.pause()
        await pilot.press("f1")  # the help closes
        await pilot.pause()
        assert app.screen is app.main
        assert app.main.has_class("-too-small")
        await pilot.resize_terminal(*SIZE)
        await pilot.pause()
        assert not app.main.has_class("-too-small")


@run_async
async def test_going_to_the_chat_box_keeps_what_it_holds(make_engine, tmp_path):
    """Textual's Input selected its whole text on focus, so the next key replaced it: ``i``
    then ``x`` turned a message handed back into "x", and "He" typed on the controls became
    "e" (the first letter focused the box and was selected with the rest)."""
    app = make_app(make_engine, tmp_path, prefill="keep this")
    async with app.run_test(size=SIZE) as pilot:
        chat = app.query_one("#chat", Input)
        app.query_one(LogitsPane).focus()
        await pilot.pause()
        await pilot.press("i", "x")
        assert chat.value == "keep thisx"
        app.query_one(LogitsPane).focus()
        await pilot.pause()
        await pilot.press("H", "e")
        assert chat.value == "keep thisxHe"
