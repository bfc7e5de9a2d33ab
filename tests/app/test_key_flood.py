"""A paste the terminal did not bracket arrives as one key press per character: 212 kB with
raw ESC bytes used to become ~200,000 Key events, with Ctrl+Q stuck behind them for minutes.
The bytes go through Textual's own terminal parser and into the app's driver from a thread,
exactly as the terminal driver's input thread sends them."""

from __future__ import annotations

import asyncio
import time

import llama_cpp
import pytest
from textual._xterm_parser import XTermParser
from textual.widgets import Input

from tests.support.app import SIZE, make_app, run_async, wait_for
from tests.support.keys import feed
from tui.widgets.key_flood import FLOOD

SENTENCE = "The tide came in over the sand and nobody saw it. "


async def until(pred, what: str, timeout: float = 240) -> None:
    """Wait for ``pred`` without a pilot (the app may be closing)."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@run_async
async def test_ctrl_q_is_handled_behind_a_212_kb_unbracketed_paste(make_engine, tmp_path):
    data = (SENTENCE[:-1] + "\x1b ") * (212_000 // len(SENTENCE)) + "\x11"  # then Ctrl+Q
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        feeder = feed(app, data)
        await until(lambda: app.return_code is not None, "Ctrl+Q to be handled")
        feeder.join(timeout=60)
    assert app.return_code == 0


@run_async
async def test_a_flood_goes_into_the_chat_box_as_one_paste(make_engine, tmp_path):
    n = 40 * FLOOD // len(SENTENCE) + 1
    data = SENTENCE * n + "The end."
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        feeder = feed(app, data)
        chat = app.query_one("#chat", Input)
        await wait_for(pilot, lambda: chat.value.endswith("The end."), "the text in the box")
        feeder.join(timeout=60)
        assert chat.value == SENTENCE * n + "The end."  # every character, in order
        assert app.view is not None and app.view.text.n_past == 0  # nothing was sent
        # the app still answers keys
        await pilot.press("end", "backspace")
        assert chat.value.endswith("The end")


def test_a_served_tabs_quit_packet_stops_the_keys_at_once() -> None:
    """Under textual's web driver the quit packet reaches the gate on the input thread, before
    the ExitApp it posts: no key is let through after it (each queued key could cost a pass
    over a 200 kB chat box; 64 of them held a closed tab past the server's grace)."""
    from textual import events, messages
    from textual.drivers.web_driver import WebDriver

    from tui.widgets.key_flood import gate_driver

    class App:  # what the driver posts to
        def __init__(self) -> None:
            self.posted: list[object] = []

        def post_message(self, message: object) -> None:
            self.posted.append(message)

    # textual's own WebDriver, without its terminal: its input thread hands each in-band
    # packet to _on_meta as ("M", JSON bytes); the gate must see the quit in it.
    driver = WebDriver.__new__(WebDriver)
    driver._app = app = App()  # type: ignore[assignment]
    sent: list[object] = []
    driver.process_message = sent.append  # type: ignore[method-assign]
    stops: list[str] = []
    gate = gate_driver(driver, on_quit=lambda: stops.append("stop"))
    driver.process_message(events.Key("y", "y"))
    driver._on_meta("M", b'{"type": "resize", "width": 90, "height": 30}')
    assert len(sent) == 1 and not gate.quitting and not stops
    driver._on_meta("M", b'{"type": "quit"}')
    assert gate.quitting and stops == ["stop"]  # the decode thread is asked to stop at once
    assert isinstance(app.posted[-1], messages.ExitApp)  # the driver still quits
    driver.process_message(events.Key("y", "y"))
    driver.process_message(events.Resize.__new__(events.Resize))  # not a key: still passes
    assert len(sent) == 2 and not isinstance(sent[-1], events.Key)


# 200 characters, most of them keys that mean something on the controls (w, digits, space)
BURST = ("Hello " + " ".join(f"w{i}" for i in range(1, 60)))[:200]
REPLY = "Write a long story about a dragon who learns to read."


def endless_reply_app(make_engine, model, tmp_path):  # noqa: ANN001
    """An app whose reply cannot end within a test: no end-of-generation token can be
    picked (logit bias -inf, as ``-l ID-inf``) and the context holds 4096 tokens."""
    from tui.app import TokenstepApp
    from tui.engine import SamplerSettings

    eog = [t for t in range(model.info.n_vocab) if llama_cpp.llama_vocab_is_eog(model.vocab, t)]
    settings = SamplerSettings(temp=0.0, logit_bias=[(t, float("-inf")) for t in eog])
    engine = make_engine(settings, n_ctx=4096)
    return TokenstepApp(engine, autosave_dir=tmp_path / "autosave", close_engine=False)


async def _replying(pilot, app) -> None:  # noqa: ANN001
    from tests.support.app import send

    await send(pilot, app, REPLY)
    assert app.view is not None and app.view.activity == "generating"


def _send_keys(app, text: str, gated: bool) -> None:  # noqa: ANN001
    """``text`` key by key into the app's driver, every key at once (the app takes none of them
    meanwhile). ``gated``: as the terminal's input thread hands over one read, through
    ``process_message`` and so the key gate, which lets FLOOD keys through and keeps the rest;
    else as ``pilot.press`` sends each key (``send_message``), without its wait after each."""
    from textual import events

    if gated:
        for event in XTermParser(False).feed(text):
            app._driver.process_message(event)
        return
    for ch in text:
        key = "space" if ch == " " else ch
        event = events.Key(key, ch)
        event.set_sender(app)
        app._driver.send_message(event)


@pytest.mark.parametrize("gated", [True, False], ids=["terminal-read", "key-by-key"])
@pytest.mark.parametrize("focus", ["chat box", "controls"])
@run_async
async def test_a_burst_typed_during_a_reply_lands_whole_and_in_order(
    make_engine, model, tmp_path, focus, gated
):
    """A 200-character burst typed during a reply, after Esc (and i). Through the gate, all
    but FLOOD keys are kept and pasted once the app has taken those. Typed on the controls,
    the first character (no command there) starts the message and every key after it is typed
    too, as when typed one at a time (the keys the app had already sent to the controls used to
    run as commands or be dropped, and a flood's paste overtook keys on their way)."""
    app = endless_reply_app(make_engine, model, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _replying(pilot, app)
        await pilot.press("escape")
        chat = app.query_one("#chat", Input)
        if focus == "chat box":
            await pilot.press("i")
            await wait_for(pilot, lambda: chat.has_focus, "the chat box")
        else:
            assert not chat.has_focus
        assert app.key_gate is not None
        _send_keys(app, BURST, gated)
        await wait_for(pilot, lambda: len(chat.value) >= len(BURST), "the burst")
        assert chat.value == BURST
        if gated:
            notice = str(app.query_one("#notice").render())
            assert f"{len(BURST) - FLOOD} key presses came in faster" in notice
        assert app.view is not None and app.view.activity == "generating"  # still replying
