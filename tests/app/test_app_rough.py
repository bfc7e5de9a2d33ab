"""Rough handling of the app on the real bundled model: key mashing while a reply plays, a
100 kB paste, and a resize to a too-small terminal and back in the middle of a reply.

The engine is only ever read on the worker's decode thread: the checks go in as a command
(``call_soon``) that the worker runs between decode calls, like any key press."""

from __future__ import annotations

import codecs
import random
import threading
from typing import Any

from textual import events

from tests.support.app import SIZE, run_async, wait_for
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.widgets.common import literal
from tui.widgets.help import HelpScreen
from tui.widgets.keys import KEYS
from tui.widgets.text import ConversationPane

MESSAGE = "Tell me a long story about a lighthouse keeper."
# quitting ends the test; the save dialog would write into the repo; the tour takes every key
# after it for its own screen (its keys are driven in tests/tour/test_tour_app.py)
NO_MASH = {"quit", "save", "tour"}


def mash_keys() -> list[str]:
    """Every key of the app's binding set, except quit and save."""
    keys = [k for key in KEYS if key.action not in NO_MASH for k in key.keys.split(",")]
    return keys + ["f1", "escape"]


async def probe(pilot, app: TokenstepApp) -> dict[str, Any]:
    """Run the checks on the worker thread (as a queued command) and wait for the answer."""
    ctl = app.worker
    out: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        eng = ctl.engine
        out["problems"] = eng.kv.check(eng.ctx)
        out["tokens"] = list(eng.tokens)
        out["mirror_pos_max"] = max((c.pos for c in eng.kv.cells if 0 in c.seqs), default=-1)
        import llama_cpp

        mem = llama_cpp.llama_get_memory(eng.ctx)
        out["llama_pos_max"] = llama_cpp.llama_memory_seq_pos_max(mem, 0)
        start = ctl.state.reply_start
        out["reply_start"] = start
        out["reply_pieces"] = (
            b"".join(eng.vocab.piece(t) for t in eng.tokens[start:]) if start is not None else b""
        )
        done.set()

    ctl.call_soon(run)
    await wait_for(pilot, done.is_set, "the worker to run the probe")
    return out


def shown_reply(app: TokenstepApp) -> str:
    """The reply as the text pane draws it: after the last 'model ▸ ', without the markers."""
    plain = app.query_one(ConversationPane).plain
    reply = plain.rsplit("model ▸ ", 1)[-1]
    reply = reply.rstrip("▌")
    if "  [" in reply and reply.endswith("]"):
        reply = reply[: reply.rindex("  [")]
    return reply


def expected_reply(data: bytes) -> str:
    """The pieces' bytes joined and decoded once, whole (not piece by piece as the pane does);
    bytes of a character still to come are left out, invalid bytes spelled as <0xNN>."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="tokenstep-hex")
    text = dec.decode(data, final=False)
    pending, _ = dec.getstate()
    out = literal(text, keep_newlines=True)
    if pending:
        out += f"⋯({len(pending)} byte(s) of a character still to come)"
    return out


@run_async
async def test_500_random_keys_while_a_reply_plays(make_engine, tmp_path):
    engine = make_engine(SamplerSettings(temp=0.8, seed=7), n_ctx=1024, context_full="shift")
    app = TokenstepApp(engine, autosave_dir=tmp_path / "autosave", close_engine=False)
    rng = random.Random(20261129)
    keys = mash_keys()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*MESSAGE, "enter")
        await wait_for(
            pilot,
            lambda: app.view is not None and app.view.text.reply_tokens > 0,
            "the reply to start",
        )
        pressed = [rng.choice(keys) for _ in range(500)]
        for i, key in enumerate(pressed):
            await pilot.press(key)
            if i % 25 == 0:
                await pilot.pause(0.05)  # let the worker decode between bursts
        assert app.is_running and app.worker.error is None
        # Stop: close any help screen, leave the chat box, step mode.
        while isinstance(app.screen, HelpScreen):
            app.screen.dismiss(None)
            await pilot.pause()
        app.worker.pause()
        await wait_for(
            pilot,
            lambda: (
                app.view is not None
                and (app.view.mode == "step" or app.view.activity != "generating")
                and app.worker.queue_empty()
            ),
            "the worker to go idle",
        )
        if app.view.text.reply_start is None or app.view.text.reply_tokens == 0:
            # The keys ended on a fresh chat or a rewound reply: give it one more turn.
            app.worker.send(MESSAGE)
            app.worker.step()
            app.worker.step()
            await wait_for(pilot, lambda: app.view.text.reply_tokens >= 2, "two reply tokens")
        got = await probe(pilot, app)
        pane = app.query_one(ConversationPane)
        if pane.boundaries:  # 'b' was pressed an odd number of times
            pane.toggle_boundaries()
        await wait_for(
            pilot,
            lambda: (
                app.worker.latest is not None
                and app.view.seq == app.worker.latest.seq
                and app._heavy_timer is None
            ),
            "the last view to be drawn",
        )
        app._draw_heavy()
        view = app.view
        assert app.worker.error is None, app.worker.error
        assert got["problems"] == []
        assert got["llama_pos_max"] == got["mirror_pos_max"] == len(got["tokens"]) - 1
        assert list(view.text.tokens) == got["tokens"]
        assert view.text.reply_start == got["reply_start"]
        assert shown_reply(app) == expected_reply(got["reply_pieces"])


@run_async
async def test_a_100_kb_paste_is_refused_with_a_reason_and_kept(make_engine, tmp_path):
    engine = make_engine(SamplerSettings(temp=0.0))
    app = TokenstepApp(
        engine, autosave_dir=tmp_path / "autosave", close_engine=False, autoplay=False
    )
    line = "The quick brown fox jumps over the lazy dog. "
    lines = [line * 20] * (100_000 // (len(line) * 20) + 1)
    pasted = "\n".join(lines)[:100_000]
    assert len(pasted.encode()) == 100_000
    async with app.run_test(size=SIZE) as pilot:
        chat = app.query_one("#chat")
        await wait_for(pilot, lambda: app.view is not None, "the first view")
        chat.post_message(events.Paste(pasted))
        await pilot.pause()
        # Every line arrived in the one-line box (line breaks become spaces) and the notice
        # says so; nothing after the first line was dropped.
        assert chat.value == pasted.replace("\n", " ")
        assert "line" in str(app.query_one("#notice").render())
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: app.view.notice_level == "error" and "context holds" in app.view.notice,
            "the refusal",
        )
        await pilot.pause(0.1)
        assert app.is_running and app.worker.error is None
        assert app.view.text.n_past == 0  # nothing was decoded
        assert "512" in app.view.notice  # the reason names the context size
        assert chat.value == pasted.replace("\n", " ")  # the text came back to the box


@run_async
async def test_resize_to_40x12_and_back_while_a_reply_plays(make_engine, tmp_path):
    engine = make_engine(SamplerSettings(temp=0.0))
    app = TokenstepApp(engine, autosave_dir=tmp_path / "autosave", close_engine=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*MESSAGE, "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.reply_tokens > 0, "reply")
        await pilot.resize_terminal(40, 12)
        await pilot.pause(0.1)
        assert app.screen.has_class("-too-small")
        small = app.query_one("#too-small")
        assert small.display and "40×12" in str(small.render())
        at_small = app.view.text.reply_tokens
        await wait_for(
            pilot,
            lambda: app.view.text.reply_tokens > at_small + 3 or app.view.activity == "done",
            "generation to go on while the terminal is too small",
        )
        await pilot.resize_terminal(*SIZE)
        await pilot.pause(0.1)
        assert not app.screen.has_class("-too-small")
        assert not small.display
        back = app.view.text.reply_tokens
        await wait_for(
            pilot,
            lambda: app.view.text.reply_tokens > back or app.view.activity == "done",
            "generation to go on",
        )
        await wait_for(pilot, lambda: app._heavy_timer is None, "a heavy redraw")
        app._draw_heavy()
        assert app.query_one(ConversationPane).plain.count("model ▸") == 1
        assert app.query_one(ConversationPane).size.width > 40
        assert app.worker.error is None
