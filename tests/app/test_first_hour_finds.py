"""What a new user looked for: a chat template fallback said at start-up, a system prompt (flag
and in the app), --version; driven on real models."""

from __future__ import annotations

from tests.support.app import SIZE, run_async, wait_for
from tests.support.cli import run_cli
from tui.args import parse
from tui.engine.model.chat_template import CHATML, Message, chat_tokens
from tui.startup import build_app
from tui.trace_cli import engine_from_args


@run_async
async def test_a_model_without_a_template_says_so_at_start_and_chats_in_chatml(tmp_path):
    from tests.support.swa_model import write_swa_model

    path = write_swa_model(tmp_path / "no-template.gguf")
    args = parse(["-m", str(path), "-c", "512", "-t", "2", "--temp", "0"])[1]
    engine = engine_from_args(args)
    assert engine.info.chat_template is None
    app = build_app(engine, args, autosave_dir=None, close_engine=False, autoplay=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.view is not None, "the first view")
            assert "no chat template: using ChatML" in app.view.notice  # before any typing
            await pilot.press(*"Hi", "enter")
            await wait_for(pilot, lambda: app.view.activity == "generating", "the prefill")
            want = chat_tokens(
                engine.vocab, CHATML, [Message("user", "Hi")], add_bos=engine.info.add_bos
            ).tokens
            assert list(app.view.text.tokens) == want
            rendered = b"".join(app.view.text.pieces).decode("utf-8", "replace")
            assert "<|im_start|>user" in rendered and rendered.endswith("<|im_start|>assistant\n")
    finally:
        app.worker.stop()
        engine.close()


def test_chat_template_flag_and_version(tmp_path):
    bad = run_cli("--chat-template", str(tmp_path / "missing.jinja"))
    assert bad.returncode == 1 and bad.stderr.count(b"\n") == 1
    assert b"neither a template name (chatml) nor a readable" in bad.stderr
    ver = run_cli("--version")
    assert ver.returncode == 0 and ver.stdout.startswith(b"tokenstep 0.")
    assert b"llama-cpp-python 0.3.36" in ver.stdout


@run_async
async def test_system_prompt_from_the_flag_and_from_the_chat_box(model, tmp_path):
    args = parse(["-sys", "You answer in one word.", "-c", "1024", "-t", "2", "--temp", "0"])[1]
    engine = engine_from_args(args)
    app = build_app(engine, args, autosave_dir=None, close_engine=False, autoplay=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press(*"Name a colour.", "enter")
            await wait_for(pilot, lambda: app.view.activity == "generating", "the prefill")
            msgs = [Message("system", "You answer in one word."), Message("user", "Name a colour.")]
            want = chat_tokens(
                engine.vocab, engine.info.chat_template, msgs, add_bos=engine.info.add_bos
            ).tokens
            assert list(app.view.text.tokens) == want
            assert [m.role for m in app.view.text.messages][:2] == ["system", "user"]
            # In the app: /system replaces it; the next message renders the chat with it.
            await pilot.press("i", *"/system Answer in French.", "enter")
            await wait_for(pilot, lambda: "System prompt set" in app.view.notice, "/system")
            assert app.query_one("#chat").value == ""
            await pilot.press(*"Another?", "enter")  # the box keeps the focus
            await wait_for(pilot, lambda: app.view.text.messages[-1].content == "Another?", "")
            assert app.view.text.messages[0] == Message("system", "Answer in French.")
            assert "Answer in French." in b"".join(app.view.text.pieces).decode("utf-8", "replace")
    finally:
        app.worker.stop()
        engine.close()


@run_async
async def test_copy_the_reply_click_a_candidate_and_focus_after_ctrl_s(make_engine, tmp_path):
    from tests.support.app import make_app, send
    from tui.widgets.logits import LogitsPane

    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name a colour.")
        pane = app.query_one(LogitsPane)
        assert app.focused is pane
        n = app.view.text.n_past
        third = app.view.logits.candidates[2]
        # A click on the third candidate's row forces it.
        await pilot.click(LogitsPane, offset=(3, 1 + 3 + 2))  # border, 3 lines, row 2
        await wait_for(pilot, lambda: app.view.text.n_past == n + 1, "the forced token")
        assert app.view.text.tokens[-1] == third.id and app.view.text.last_pick.forced
        await pilot.press("y")
        reply = app.view.text.messages[-1]
        assert reply.role == "assistant" and app.clipboard == reply.content
        assert "Copied the reply" in str(app.query_one("#notice").content)
        await pilot.press("ctrl+s")
        await pilot.press("escape")  # the dialog cancelled
        assert app.focused is pane  # back on the controls, where Ctrl+S was pressed


@run_async
async def test_all_layers_in_one_prefill(make_engine, tmp_path):
    from tests.support.app import make_app, send

    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name a colour.")
        await pilot.press("A")
        await wait_for(
            pilot,
            lambda: app.view.attention.att is not None and "All 30 layers" in app.view.notice,
            "every layer",
            timeout=300,
        )
        records = app.view.header.n_records
        for layer in (1, 2, 3):
            await pilot.press("right_square_bracket")
            await wait_for(
                pilot,
                lambda layer=layer: (
                    app.view.attention.att is not None and app.view.attention.att.layer == layer
                ),
                f"layer {layer}",
            )
        assert app.view.header.n_records == records  # no prefill for any of them
        assert "without another replay" in app.view.notice


@run_async
async def test_quitting_shows_the_autosave_under_way_and_then_writes_it(make_engine, tmp_path):
    import threading

    from tests.support.app import make_app
    from tui.widgets.busy import BusyBar

    app = make_app(make_engine, tmp_path, autoplay=True)
    gate = threading.Event()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Name a colour.", "enter")
        await wait_for(
            pilot,
            lambda: app.view is not None and app.view.activity in ("generating", "done"),
            "a reply",
        )
        real_stop = app.worker.stop

        def held_stop(timeout: float | None = 60.0) -> bool:
            gate.wait(60)  # the real stop, once the test has looked at the screen
            return real_stop(timeout)

        app.worker.stop = held_stop  # type: ignore[method-assign]
        from textual import events

        app.post_message(events.Key("ctrl+q", None))  # as the terminal sends it, mid-reply
        bar = app.query_one(BusyBar)
        await wait_for(pilot, lambda: bar.display and bar.what is not None, "the quit's progress")
        assert "Quitting" in bar.what and "autosaving to" in bar.what
        assert not app.query_one("#notice").display
        path = app.worker.autosave_path
        gate.set()
        import asyncio

        for _ in range(1200):  # the app leaves on its own once the autosave is written
            if app.return_code is not None:
                break
            await asyncio.sleep(0.05)
    assert app.return_code == 0
    assert path is not None and path.is_file()
