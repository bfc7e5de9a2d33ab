"""Faults a new user met in the first hour, each driven as the user met it on the real model.

Keys that must arrive while a reply plays are posted as the terminal driver posts them
(``App.post_message(events.Key(...))``): ``Pilot.press`` first waits for the app to go idle,
which a playing app never does."""

from __future__ import annotations

from textual import events

from tests.support.app import SIZE, make_app, run_async, wait_for
from tui.widgets.chat_input import ChatInput

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


async def capture_on(pilot, app) -> None:
    """A short reply in step mode, then ``a``: capture on, tab 6 showing."""
    await pilot.press(*"Name three colors.", "enter")
    await wait_for(pilot, lambda: app.view is not None and app.view.activity == "generating", "")
    await pilot.press("right", "right", "right")
    await pilot.press("a")
    await wait_for(
        pilot,
        lambda: app.view.attention is not None and app.view.attention.att is not None,
        "the capture",
        timeout=300,
    )


@run_async
async def test_attention_keys_work_after_a_opened_the_tab_and_esc_came_back(make_engine, tmp_path):
    from tui.widgets.attention_tabs import AttentionTab

    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await capture_on(pilot, app)
        assert app._tab == "attention"
        chat = app.query_one(ChatInput)
        await pilot.press("i")  # e.g. the reply ended and moved the focus to the chat box
        assert chat.has_focus
        await pilot.press("escape")
        assert isinstance(app.focused, AttentionTab)  # the tab's own keys act there
        n = app.view.text.n_past
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: app.view.attention.layer == 1, "layer 1", timeout=300)
        assert chat.value == "" and app.view.text.n_past == n


@run_async
async def test_layer_presses_during_a_capture_add_up_and_show_progress(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    busy: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        await capture_on(pilot, app)
        on_view = app.worker.on_view

        def record(view) -> None:
            if view.busy:
                busy.append(view.busy)
            on_view(view)

        app.worker.on_view = record
        for _ in range(5):  # faster than a re-prefill: all five wait in the queue
            post_key(app, "right_square_bracket", "]")
        await wait_for(
            pilot,
            lambda: app.view.attention.layer == 5 and app.view.busy is None,
            "layer 5",
            timeout=300,
        )
        assert app.view.attention.att is not None and app.view.attention.att.layer == 5
        assert busy and all("Capturing layer" in b for b in busy)
        assert "already captured" not in app.view.notice


def test_info_describes_the_caches_the_app_creates_on_a_sliding_window_model(tmp_path):
    """`info` used llama.cpp's tools' window-sized SWA cache while the app makes a full one."""
    import json

    from tests.support.cli import run_cli
    from tests.support.swa_model import write_swa_model
    from tui.args import parse
    from tui.engine import Engine, Model
    from tui.engine.observe import memory as mem
    from tui.trace_cli import config_from_args

    path = write_swa_model(tmp_path / "tiny-swa.gguf")
    for flags in ([], ["--no-swa-full"]):
        _, args = parse(["-m", str(path), "-c", "1024", "-t", "2", *flags])
        config = config_from_args(args)
        assert config.swa_full == (not flags)
        eng = Engine(Model(path), config)
        try:
            made = [(c.kind, c.cells, c.bytes) for c in mem.memory_report(eng).caches]
        finally:
            eng.close()
        res = run_cli("info", "-m", str(path), "-c", "1024", "--json", *flags)
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        assert data["swa_full"] == (not flags)
        said = [(c["kind"], c["cells"], c["bytes"]["f16"]) for c in data["kv_caches"]]
        assert said == made  # llama.cpp's own allocation, as the memory tab reads it
        text = run_cli("info", "-m", str(path), "-c", "1024", *flags).stdout.decode()
        assert ("--no-swa-full:" in text) == bool(flags) and "two caches" in text
        assert "n_head_kv       2\n" in text  # a number, not the list "[2]"


def _odd_split(vocab) -> tuple[list[int], list[int]]:
    """A word the model may write as two pieces that a fresh tokenization splits otherwise."""
    for word, a, b in ((" Sunsets", " Sun", "sets"), (" seashore", " seas", "hore")):
        fresh = vocab.tokenize(word, add_special=False)
        written = vocab.tokenize(a, add_special=False) + vocab.tokenize(b, add_special=False)
        if fresh != written:
            return written, fresh
    raise AssertionError("no word tokenizes differently from its pieces")


def test_the_next_prompt_keeps_the_models_own_tokens_live_and_after_resume(
    make_engine, model, tmp_path
):
    from tui.engine.run.session import Engine
    from tui.worker import Worker
    from tui.worker.commands import Force, Save, Send
    from tui.worker.resume import restore
    from tui.worker.session_store import read_session

    eng = make_engine()
    w = Worker(eng, autoplay=False, autosave_dir=None, close_engine=False)
    w.handle(Send("Describe the evening sky in one word."))
    written, fresh = _odd_split(eng.vocab)
    for t in written:  # the model "writes" the word in pieces a retokenization would not
        w.handle(Force(t))
    held = list(eng.tokens)
    assert held[-len(written) :] == written
    w.handle(Send("Why?"))
    # A live session: every token the cache held is reused; none is decoded again.
    assert w.state.tokenized is not None and w.state.tokenized.reused == len(held)
    assert eng.tokens[: len(held)] == held
    for t in fresh:  # a second reply, still in the cache when the session is saved
        w.handle(Force(t))
    path = tmp_path / "s.jsonl"
    w.handle(Save(str(path)))
    header, _ = read_session(path)
    assert header["conversation"][1]["tokens"][-len(written) :] == written
    # After --resume: the saved reply keeps its ids, so the next turn reuses the whole cache.
    eng2 = Engine(model, eng.config, eng.settings)
    try:
        w2 = Worker(eng2, autoplay=False, autosave_dir=None, close_engine=False)
        restore(w2, header, path)
        before = list(eng2.tokens)
        w2.handle(Send("And then?"))
        assert w2.state.tokenized.reused == len(before)
    finally:
        eng2.close()


def test_a_cut_cache_says_where_and_why(make_engine):
    """A prompt that differs from the cache (an old session's retokenized reply) says so."""
    from tui.engine.model.chat_template import Message
    from tui.worker import Worker
    from tui.worker.commands import Force, Send

    eng = make_engine()
    w = Worker(eng, autoplay=False, autosave_dir=None, close_engine=False)
    w.handle(Send("Describe the evening sky in one word."))
    written, fresh = _odd_split(eng.vocab)
    for t in written:
        w.handle(Force(t))
    text = b"".join(eng.vocab.piece(t) for t in written).decode()
    # What an older tokenstep kept: the reply as text only.
    w.state.messages.append(Message("assistant", text))
    w.state.reply_start = None
    w.handle(Send("Why?"))
    assert "the cache was cut at token" in w.state.notice
