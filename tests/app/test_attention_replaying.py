"""While `a` replays the run in the observer's own context, the attention pane says it is
replaying, not "capture off" beside the status line's "Attention on" (issue #30's walk)."""

from __future__ import annotations

import threading

from tests.support.app import make_app, run_async, send, wait_for
from tui.engine.observe.observer_context import ObserverContext
from tui.widgets.attention_tabs import AttentionTab


@run_async
async def test_the_pane_says_replaying_during_the_replay(make_engine, tmp_path, monkeypatch):
    go = threading.Event()
    held: list[int] = []
    real = ObserverContext.catch_up

    def hold(self: ObserverContext, *args: object, **kwargs: object) -> int:
        if self.pending() and not held:  # the first replay waits until the pane was read
            held.append(self.pending())
            assert go.wait(120), "the pane never said it was replaying"
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ObserverContext, "catch_up", hold)
    app = make_app(make_engine, tmp_path, raw=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await send(pilot, app, "The capital of France is")
        await pilot.press("escape")
        await pilot.press("6")
        pane = app.query_one(AttentionTab)
        await wait_for(pilot, lambda: "capture off" in pane.status, "the pane before a")
        await pilot.press("a")
        try:
            await wait_for(pilot, lambda: bool(held), "the replay to start")
            n = held[0]
            want = f"replaying the run's {n} operation(s) in its own context"
            await wait_for(pilot, lambda: want in pane.status, "the replaying status")
            assert "capture off" not in pane.status
        finally:
            go.set()
        await wait_for(pilot, lambda: pane.att is not None, "the weights after the replay")
        assert "captured from kq_soft_max-0" in pane.status
