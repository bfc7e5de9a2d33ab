"""The app over a real llama-server, driven by Textual's Pilot: killing the server mid-reply
puts one sentence on screen, keeps the text, and → retries once the server is back."""

from __future__ import annotations

from tests.support.app import SIZE, run_async, send, wait_for
from tests.support.llama_server import free_port, llama_server, start_server  # noqa: F401
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.widgets.text import ConversationPane


@run_async
async def test_killing_the_server_mid_reply_shows_the_error_and_keeps_the_text(tmp_path):
    port = free_port()
    server = start_server(tmp_path, port=port)
    backend = RemoteBackend(server.url, SamplerSettings(temp=0.0))
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=True)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "Tell me about the sea.")

            def reply_tokens() -> int:
                v = app.view
                return (
                    0
                    if v is None or v.text.reply_start is None
                    else len(v.text.tokens) - v.text.reply_start
                )

            await wait_for(pilot, lambda: reply_tokens() >= 4, "a few reply tokens")
            server.proc.kill()
            server.proc.wait(30)
            await wait_for(
                pilot,
                lambda: (
                    app.view is not None
                    and app.view.notice_level == "error"
                    and "press → to retry" in app.view.notice
                ),
                "the error sentence",
            )
            v = app.view
            assert v.mode == "step"  # autoplay stopped: it would retry in a loop
            assert "llama-server" in v.notice.lower() or "nothing answers" in v.notice.lower()
            assert "Traceback" not in v.notice and v.notice.count(". ") <= 2
            kept = len(v.text.tokens)
            reply = b"".join(v.text.pieces[v.text.reply_start :]).decode("utf-8", "replace")
            assert reply.strip() and reply.strip() in app.query_one(ConversationPane).plain
            # the server comes back (cache lost): → feeds the same pick again
            server = start_server(tmp_path, port=port)
            await pilot.press("right")
            await wait_for(
                pilot,
                lambda: app.view is not None and len(app.view.text.tokens) == kept + 1,
                "retry",
            )
            assert app.view.text.tokens[:kept] == v.text.tokens
    finally:
        server.stop()


@run_async
async def test_the_panes_say_what_crossed_http(llama_server, tmp_path):  # noqa: F811
    from tui.widgets.header import StatusHeader
    from tui.widgets.kvcache import KVCachePane
    from tui.widgets.logits import LogitsPane
    from tui.widgets.pipeline import PipelinePane

    backend = RemoteBackend(llama_server.url, SamplerSettings(seed=3), n_probs=20)
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name a colour.")
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "one step")
        await pilot.press("4")
        await pilot.pause()
        v = app.view
        logits = app.query_one(LogitsPane)
        assert "log p" in logits._head(80, v).plain  # logprobs, never shown as raw logits
        assert "top 20 of 49152" in str(logits.border_subtitle) and "≤" in logits.border_subtitle
        assert 0 < len(v.logits.candidates) <= 16  # only real candidates, no stand-ins
        assert {c.id for c in v.logits.candidates} <= set(
            backend.records[backend.logits_record].server.top_ids
        )
        facts = app.query_one(PipelinePane).facts(v)
        assert facts[2].startswith("on the server:") and "round trip" in facts[2]
        assert "top 20 of 49152 as logprobs" in facts[3] and "H ≤" in facts[3]
        kv = app.query_one(KVCachePane)
        assert " ".join(kv.note_lines()).startswith("needs a local model: this one runs on")
        assert llama_server.url in " ".join(kv.note_lines())
        assert f"on the server at {llama_server.url}" in app.query_one(StatusHeader).render().plain
