"""The app over an OpenAI-compatible server, driven by Textual's Pilot: the panes say what
crossed HTTP, the notice says when a text-only server tokenized our text otherwise, and the API
key reaches no screen, no saved session and no autosave."""

from __future__ import annotations

from tests.support.app import SIZE, chat, run_async, send, wait_for
from tests.support.openai_servers import fake, llama_cpp_server  # noqa: F401  (fixtures)
from tests.support.remote import KEY, remote_screen_text
from tui.app import TokenstepApp
from tui.engine import SamplerSettings, default_model_path
from tui.engine.model.local_vocab import LocalVocab
from tui.engine.remote.openai_backend import OpenAIBackend
from tui.widgets.logits import LogitsPane
from tui.widgets.pipeline import PipelinePane


@run_async
async def test_the_key_reaches_no_screen_and_no_saved_session(fake, tmp_path):  # noqa: F811
    backend = OpenAIBackend(
        fake.url,
        SamplerSettings(temp=0.0),
        local_vocab=LocalVocab(default_model_path()),
        api_key=KEY,
    )
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello")
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "one step")
        fake.status = 401  # the next request is refused: its sentence is on screen
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.notice_level == "error", "the 401 sentence")
        assert "HTTP 401" in app.view.notice and KEY not in app.view.notice
        assert KEY not in remote_screen_text(app)
        await pilot.press("ctrl+s")
        await pilot.pause()
    assert fake.seen_auth and all(a == f"Bearer {KEY}" for a in fake.seen_auth)
    saved = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert saved  # the autosave of the turn
    for p in saved:
        assert KEY.encode() not in p.read_bytes(), p


@run_async
async def test_the_panes_and_notice_over_a_text_only_server(llama_cpp_server, tmp_path):  # noqa: F811
    backend = OpenAIBackend(
        llama_cpp_server.url,
        SamplerSettings(temp=0.0),
        local_vocab=LocalVocab(default_model_path()),
        n_probs=10,
    )
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Say hi.")
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "one step")
        await pilot.press("4")
        await pilot.pause()
        v = app.view
        assert "top 10 of 49152" in str(app.query_one(LogitsPane).border_subtitle)
        facts = app.query_one(PipelinePane).facts(v)
        assert "no timings or cache counts reported" in facts[2] and "round trip" in facts[2]
        assert "the text of all" in facts[6]
        # force two newline tokens: as text they are one "\n\n" token for the server
        nl = backend.vocab.tokenize("\n", add_special=False)[0]
        for _ in range(2):
            n = app.view.text.reply_tokens
            await chat(pilot, app, f"/force #{nl}")
            await wait_for(pilot, lambda n=n: app.view.text.reply_tokens == n + 1, "the forced id")
            assert app.view.text.tokens[-1] == nl
        n = app.view.text.reply_tokens
        await pilot.press("escape")  # out of the chat box
        await pilot.press("right")  # a plain step on that prefix: its notice says what differs
        await wait_for(pilot, lambda: app.view.text.reply_tokens == n + 1, "one more step")
        assert "takes text only" in app.view.notice, app.view.notice
        assert app.view.notice_level == "warn"
        assert app.view.logits.remote.warning and "⚠" in app.view.logits.remote.lines()[0]
