"""The app as the snapshot tests build it: fixed timings, a steady cursor."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.widgets import Input

from tui.app import TokenstepApp
from tui.engine import SamplerSettings


def make_app(make_engine, **kw) -> TokenstepApp:
    return TokenstepApp(
        make_engine(SamplerSettings(temp=0.0)),
        autosave_dir=None,
        show_timings=False,
        close_engine=False,
        **kw,
    )


async def wait_for(pilot, pred: Callable[[], bool], timeout: float = 180) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        await pilot.pause(0.02)
        if pred():
            await pilot.pause(0.2)
            return
    raise AssertionError("timed out")


def steady_cursor(app: TokenstepApp) -> None:
    app.query_one("#chat", Input).cursor_blink = False
