"""Attention with a fork in place: the capture runs in an observer context of its own, which
replays the fork too, so nothing is refused and nothing of the run changes. The pane, the
notice and the header keep agreeing with the run's context (its real flash-attention setting,
no capture installed in it) however often ``a`` and ``]`` are pressed."""

from __future__ import annotations

from tests.support.app import SIZE, make_app, run_async, send, wait_for
from tui.engine.observe.attention_capture import find_capture
from tui.widgets.attention_tabs import AttentionTab

MESSAGE = "Name a colour."


@run_async
async def test_a_with_a_fork_in_place_captures_in_its_own_context(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await pilot.press("right", "right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 2, "2 steps")
        eng = app.worker.engine
        fa = eng.flash_attn_resolved
        assert app.view.header.flash_attn == fa and find_capture(eng) is None
        await pilot.press("escape", "F")
        await wait_for(pilot, lambda: "Forked" in app.view.notice, "the fork")
        await pilot.press("6")
        pane = app.query_one(AttentionTab)
        await wait_for(pilot, lambda: pane.has_focus, "tab 6")
        before = app.view.attention
        assert not before.on and not before.installed
        for press in range(2):
            n = app.worker.commands
            await pilot.press("a")
            await wait_for(pilot, lambda n=n: app.view.commands > n, f"a #{press + 1}")
            v = app.view
            assert v.notice_level != "error", v.notice
            assert v.attention.on == (press == 0)
            assert app.worker.engine is eng and find_capture(eng) is None
            assert v.header.flash_attn == eng.flash_attn_resolved == fa
            assert eng.branches  # the fork is still there
        n = app.worker.commands
        await pilot.press("a")
        await wait_for(pilot, lambda: app.view.attention.on, "attention on")
        assert "observer context" in app.view.notice
        obs = app.worker.observers.engine
        assert obs is not None and obs.flash_attn_resolved == "off"
        n = app.worker.commands
        await pilot.press("right_square_bracket")  # layer 1: a new replay, not refused
        await wait_for(pilot, lambda: app.view.commands > n, "layer 1")
        v = app.view
        assert v.attention.layer == 1 and v.attention.on, v.notice
        assert "replayed" in v.notice and v.notice_level != "error"
        cap = find_capture(app.worker.observers.engine)
        assert cap is not None and cap.layers == [1]
        assert v.header.flash_attn == eng.flash_attn_resolved == fa and eng.branches
