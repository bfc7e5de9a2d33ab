"""Input the user typed is never lost: a queued message too long for the context is refused
when it is queued (and handed back to the chat box), one that stops fitting while the reply
grows is handed back too, and the autosave file holds a message as soon as it is sent, so a
``kill -9`` during the first reply keeps it."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from textual.widgets import Input

from tests.support.app import SIZE, run_async, wait_for
from tests.support.cli import ROOT
from tests.support.keys import feed
from tests.support.worker import make_worker, wait  # noqa: F401  (the fixture)
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.worker import Worker
from tui.worker.session_store import read_session

GREEDY = SamplerSettings(temp=0.0)
LONG = "the waves rolled in and " * 400  # about 2,400 tokens


def raw_worker(engine, tmp_path: Path) -> Worker:
    c = Worker(
        engine, raw=True, autoplay=True, autosave_dir=tmp_path / "autosave", close_engine=False
    )
    c.start()
    return c


def test_a_queued_message_too_long_is_refused_when_queued(make_engine, tmp_path):
    """As reported: the box cleared, said "Queued", and the text was gone when the reply
    ended. Raw completion of a counting prompt plays on well past this check."""
    c = raw_worker(make_engine(GREEDY, n_ctx=512), tmp_path)
    try:
        c.send("One, two, three, four, five, six, seven, eight, nine, ten, eleven,")
        wait(c, lambda v: v.activity == "generating", "the reply to start")
        c.send(LONG)
        v = wait(c, lambda v: v.notice_level == "error", "the refusal")
        assert "context holds 512" in v.notice, v.notice
        assert v.header.returned_text == LONG  # the chat box gets it back
        assert v.header.queued is None
    finally:
        assert c.stop()
    assert c.error is None, c.error


def test_a_queued_message_that_no_longer_fits_comes_back(make_engine, tmp_path):
    """It fit when it was queued; the reply then filled the context (raw completion of a
    count plays until the context is full). It goes back to the box instead of vanishing."""
    c = raw_worker(make_engine(GREEDY, n_ctx=64), tmp_path)
    try:
        c.send("One, two, three, four, five,")
        wait(c, lambda v: v.activity == "generating", "the reply to start")
        c.send(" and so on.")
        v = wait(c, lambda v: v.header.returned_text is not None, "the message to come back", 300)
        assert v.stop_reason == "context full"
        assert "context holds 64" in v.notice
        assert v.header.returned_text == " and so on." and v.header.queued is None
    finally:
        assert c.stop()
    assert c.error is None, c.error


def test_a_sent_message_is_autosaved_before_the_reply(make_worker):  # noqa: F811
    c = make_worker(autoplay=False)
    c.send("Hi there")
    v = wait(c, lambda v: v.action == "send", "the prefill")
    assert v.activity == "generating" and v.text.reply_tokens == 0  # the reply has not begun
    header, _ = read_session(c.autosave_path)
    assert header["conversation"] == [{"role": "user", "content": "Hi there"}]
    assert header["context_tokens"] == list(v.text.tokens)


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tui.app import TokenstepApp
    from tui.engine import Engine, EngineConfig, Model, SamplerSettings

    async def main():
        eng = Engine(Model(), EngineConfig(n_ctx=512, n_threads=1), SamplerSettings(temp=0.0))
        app = TokenstepApp(eng, autosave_dir=Path(sys.argv[1]), autoplay=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press(*"Keep this message", "enter")
            while app.view is None or app.view.activity != "generating":
                await pilot.pause(0.05)
            print("SENT", flush=True)  # the reply has begun (step mode: it waits for a key)
            while True:
                await pilot.pause(1)

    asyncio.run(main())
    """
)


def test_kill_9_during_the_first_reply_keeps_the_message(tmp_path: Path) -> None:
    """As reported: no autosave existed until the reply ended."""
    folder = tmp_path / "autosave"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the child says the message went
        assert line.strip() == b"SENT", line
        assert proc.poll() is None  # still in the first reply
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    files = list(folder.glob("*.jsonl"))
    assert len(files) == 1, files
    header, _ = read_session(files[0])
    assert header["conversation"] == [{"role": "user", "content": "Keep this message"}]


@run_async
async def test_a_213_kb_paste_queued_during_a_reply_stays_in_the_box(make_engine, tmp_path):
    """The reported case, with the bytes a terminal sends: a bracketed paste of a 213 kB
    line during a reply, then Enter. The box keeps the text, the reply plays on."""
    big = "the waves rolled in and " * 8_900  # 213,600 characters, one line
    assert len(big) > 213_000
    # The reply must still be playing when the refusal comes, however slowly this machine
    # parses the paste: end tokens are biased away (-l ID-inf) and a full context shifts.
    engine = make_engine(GREEDY, n_ctx=512, context_full="shift")
    eog = [t for t in range(engine.info.n_vocab) if engine.vocab.is_eog(t)]
    engine.settings = dataclasses.replace(
        engine.settings, logit_bias=[(t, -math.inf) for t in eog]
    )
    app = TokenstepApp(
        engine,
        raw=True,
        autoplay=True,
        autosave_dir=tmp_path / "autosave",
        close_engine=False,
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"One, two, three, four, five, six,", "enter")
        await wait_for(
            pilot, lambda: app.view is not None and app.view.activity == "generating", "reply"
        )
        chat = app.query_one("#chat", Input)
        if not chat.has_focus:
            await pilot.press("i")  # i: from the controls to the chat box
        feeder = feed(app, "\x1b[200~" + big + "\x1b[201~\r")  # the paste, then Enter
        await wait_for(
            pilot,
            lambda: app.view is not None and app.view.notice_level == "error",
            "the refusal",
        )
        feeder.join(timeout=60)
        assert "context holds 512" in app.view.notice
        await wait_for(pilot, lambda: chat.value == big, "the text back in the box")
        assert app.view.header.queued is None
        assert app.view.activity == "generating"  # the reply was not cut
