"""The app over a real llama-server, driven by Textual's Pilot: killing the server mid-reply
puts one sentence on screen, keeps the text, and → retries once the server is back."""

from __future__ import annotations

from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.engine.remote import RemoteBackend
from tui.widgets.text import ConversationPane

from .llama_server import free_port, start_server
from .test_app import SIZE, run_async, send, wait_for


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
                return 0 if v is None or v.reply_start is None else len(v.tokens) - v.reply_start

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
            assert "llama-server" in v.notice or "nothing answers" in v.notice
            assert "Traceback" not in v.notice and v.notice.count(". ") <= 2
            kept = len(v.tokens)
            reply = b"".join(v.pieces[v.reply_start :]).decode("utf-8", "replace")
            assert reply.strip() and reply.strip() in app.query_one(ConversationPane).plain
            # the server comes back (cache lost): → feeds the same pick again
            server = start_server(tmp_path, port=port)
            await pilot.press("right")
            await wait_for(
                pilot, lambda: app.view is not None and len(app.view.tokens) == kept + 1, "retry"
            )
            assert app.view.tokens[:kept] == v.tokens
    finally:
        server.stop()
