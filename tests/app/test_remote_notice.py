"""Over a real llama-server, each key's answer replaces the notice: `a` then `8` says the
lens's refusal, not attention's from the key before (issue #30's walk, at 100x30)."""

from __future__ import annotations

from tests.support.app import run_async, send, wait_for
from tests.support.llama_server import llama_server  # noqa: F401
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend


async def on_controls(pilot, app: TokenstepApp) -> None:
    await send(pilot, app, "Name a colour.")
    await pilot.press("escape")  # the controls: a key goes to the app, not the chat box
    await wait_for(pilot, lambda: not app.main.query_one("#chat").has_focus, "the controls")


@run_async
async def test_a_then_8_over_the_server_says_the_lens_refusal(llama_server, tmp_path):  # noqa: F811
    backend = RemoteBackend(llama_server.url, SamplerSettings(seed=3), n_probs=20)
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=False)
    where = f"needs a local model: this one runs on {backend.capabilities.name}"
    async with app.run_test(size=(100, 30)) as pilot:
        await on_controls(pilot, app)
        await pilot.press("a")
        await wait_for(pilot, lambda: app.view.notice == f"Attention {where}.", "a's refusal")
        await pilot.press("8")
        await wait_for(pilot, lambda: app.view.notice == f"The logit lens {where}.", "8's answer")
        assert "Attention" not in app.view.notice
