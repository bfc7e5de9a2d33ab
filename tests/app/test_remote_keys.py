"""The key bar and the help read the backend's capabilities: over a real llama-server the
keys it cannot honour (fork, verify, attention) get no chip, the help says in one sentence why
each is off, and the worker still refuses the key if it is pressed. A local model keeps them."""

from __future__ import annotations

from tests.support.app import SIZE, run_async, send, wait_for
from tests.support.compare_records import screen_text
from tests.support.llama_server import llama_server  # noqa: F401
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.engine.run.backend import LOCAL, Capabilities
from tui.widgets.help import HelpScreen, help_text
from tui.widgets.keybar import KeyBar, bar_items
from tui.widgets.keys import KEYS, off

OFF_OVER_HTTP = {"F": "fork", "v/V": "verify", "a": "attention", "A": "attention"}


def chips(app: TokenstepApp) -> set[str]:
    """The key labels the bar shows now (what the screen draws, from the same items)."""
    return {label for label, *_ in app.main.query_one(KeyBar).items()}


async def on_controls(pilot, app: TokenstepApp) -> None:
    await send(pilot, app, "Name a colour.")
    await pilot.press("escape")  # the controls: the bar shows the step and sampler keys
    await wait_for(pilot, lambda: not app.main.query_one("#chat").has_focus, "the controls")


def test_every_key_that_needs_something_names_a_capability():
    fields = set(Capabilities.__dataclass_fields__)
    needy = {k.label: k.needs for k in KEYS if k.needs}
    assert needy == OFF_OVER_HTTP
    assert set(needy.values()) <= fields
    assert all(off(k, LOCAL) is None for k in KEYS)  # a local model honours every key
    server = Capabilities("llama-server at http://x", fork=False, verify=False, attention=False)
    shown = {label for (label, *_), _ in bar_items(None, caps=server)}
    assert shown.isdisjoint(OFF_OVER_HTTP) and "→" in shown
    assert OFF_OVER_HTTP.keys() <= {label for (label, *_), _ in bar_items(None)}
    plain = help_text(None, browser=False, caps=server).plain
    assert "Off here: fork needs a local model: this one runs on llama-server at http://x." in plain


@run_async
async def test_over_llama_server_the_bar_leaves_out_fork_and_verify_and_help_says_why(
    llama_server,  # noqa: F811
    tmp_path,
):
    backend = RemoteBackend(llama_server.url, SamplerSettings(seed=3), n_probs=20)
    assert backend.local is None  # no session here: what the keys below need is not offered
    caps = backend.capabilities
    assert not (caps.fork or caps.verify or caps.attention)
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=False)
    async with app.run_test(size=SIZE) as pilot:
        await on_controls(pilot, app)
        await wait_for(pilot, lambda: not app.view.capabilities.fork, "the server's capabilities")
        shown = chips(app)
        assert "→" in shown and "t/T" in shown
        assert shown.isdisjoint(OFF_OVER_HTTP), shown
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        await pilot.pause()
        lines = [line.strip(" │╭╮╰╯▁▇█") for line in screen_text(app).splitlines()]
        on_screen = " ".join(" ".join(lines).split())  # a long row wraps under its own text
        where = f"this one runs on {backend.capabilities.name}."
        for what in ("fork", "verify"):  # the Stepping keys, at the top of the help
            assert f"Off here: {what} needs a local model: {where}" in on_screen, on_screen
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen), "the help closed")
        if app.main.query_one("#chat").has_focus:
            await pilot.press("escape")
        await pilot.press("F")  # bound still: the worker refuses it in the same words
        refused = f"Fork needs a local model: {where}"
        await wait_for(pilot, lambda: app.view.notice == refused, "the worker's refusal")


@run_async
async def test_a_local_model_keeps_fork_and_verify_on_the_bar(make_engine, tmp_path):
    engine = make_engine()
    assert engine.local is engine  # the session itself forks, verifies and is observed
    app = TokenstepApp(engine, autosave_dir=tmp_path / "autosave", autoplay=False)
    async with app.run_test(size=SIZE) as pilot:
        await on_controls(pilot, app)
        assert {"F", "v/V", "a"} <= chips(app)
