"""The cache tab of an app played to its first context shift."""

from __future__ import annotations

from rich.console import Console

from tests.support.app import wait_for
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.widgets.cache import CacheTab


def shown(widget) -> str:
    """The text a Static-like widget renders (its current renderable, without colour)."""
    con = Console(width=200, record=True, color_system=None)
    con.print(widget.content)
    return con.export_text()


async def open_tab(pilot, app: TokenstepApp, key: str) -> None:
    """Press a tab key as a user would: when a reply has ended the chat box has the focus, so
    Esc first goes back to the controls (otherwise the key would be typed into the box)."""
    if app.focused is not None and app.focused.id == "chat":
        await pilot.press("escape")
    await pilot.press(key)


def cache_text(app: TokenstepApp) -> str:
    tab = app.query_one(CacheTab)
    return "\n".join(shown(s) for s in tab.query("Static"))


SHIFT_TEXT = "One two three four five six seven eight nine ten eleven twelve"


def shift_app(make_engine, tmp_path) -> TokenstepApp:
    """Raw mode, greedy, -c 48 --context-full shift --keep 4: autoplay soon shifts."""
    engine = make_engine(SamplerSettings(temp=0.0), n_ctx=48, context_full="shift", n_keep=4)
    return TokenstepApp(
        engine, raw=True, autoplay=True, autosave_dir=tmp_path / "a", close_engine=False
    )


async def play_to_first_shift(pilot, app: TokenstepApp) -> None:
    """Send SHIFT_TEXT, let autoplay run until the context shifts, then pause.

    Paused with the worker's Pause (what the app's cursor keys send), not Space: the greedy
    reply may end right after the shift (its text depends on the CPU's kernels, and a loaded
    machine lets it run on before a key lands). At a reply's end the focus goes back to the
    chat box for someone who only chatted, so a Space pressed then is typed there and the run
    stays in autoplay: "timed out waiting for the pause". Pause sets step mode either way."""
    await pilot.press(*SHIFT_TEXT, "enter")
    await wait_for(pilot, lambda: app.view is not None and app.view.cache.shifts, "a shift")
    app.worker.pause()
