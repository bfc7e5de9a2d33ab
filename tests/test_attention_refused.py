"""A refused attention toggle changes nothing: with a fork in place, ``a`` is refused, and the
pane, the notice and the header keep agreeing with the context (its real flash-attention
setting, no capture installed) however often it is pressed."""

from __future__ import annotations

from tui.engine.attention_capture import find_capture
from tui.widgets.attention_tabs import AttentionTab

from .test_app import SIZE, make_app, run_async, send, wait_for

MESSAGE = "Name a colour."


@run_async
async def test_a_with_a_fork_in_place_changes_nothing(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await pilot.press("right", "right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 2, "2 steps")
        eng = app.controller.engine
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
            n = app.controller.commands
            await pilot.press("a")
            await wait_for(pilot, lambda n=n: app.controller.commands > n, f"a #{press + 1}")
            await wait_for(pilot, lambda n=n: app.view.commands > n, "its view")
            v = app.view
            assert v.notice_level == "error" and "drop the fork first" in v.notice, v.notice
            assert "flash attention stays off" not in v.notice
            a = v.attention
            assert not a.on and not a.installed and a.layer == before.layer
            assert a.status == before.status  # not "no weights captured yet"
            assert "no weights captured yet" not in pane.status
            assert app.controller.engine is eng and find_capture(eng) is None
            assert v.header.flash_attn == eng.flash_attn_resolved == fa
            assert eng.branches  # the fork is still there


@run_async
async def test_a_refused_layer_or_capture_keeps_the_installed_capture_as_it_was(
    make_engine, tmp_path
):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "a step")
        await pilot.press("escape", "a")  # the context is rebuilt with the capture
        await wait_for(pilot, lambda: app.view.attention.on, "attention on")
        eng = app.controller.engine
        cap = find_capture(eng)
        assert cap is not None and cap.layers == [0] and app.view.header.flash_attn == "off"
        await pilot.press("F")
        await wait_for(pilot, lambda: "Forked" in app.view.notice, "the fork")
        await pilot.press("6")
        pane = app.query_one(AttentionTab)
        await wait_for(pilot, lambda: pane.has_focus, "tab 6")
        n = app.controller.commands
        await pilot.press("right_square_bracket")  # layer 1 would need a prefill: refused
        await wait_for(pilot, lambda: app.view.commands > n, "the refusal")
        assert "drop the fork first" in app.view.notice
        assert app.view.attention.layer == 0 and cap.layers == [0] and app.view.attention.on
        await pilot.press("a")  # off: allowed, nothing to prefill
        await wait_for(pilot, lambda: not app.view.attention.on, "attention off")
        assert "flash attention stays off" in app.view.notice  # true: the callback context
        off = app.view.attention.status
        n = app.controller.commands
        await pilot.press("a")  # on again would prefill: refused, still off
        await wait_for(pilot, lambda: app.view.commands > n, "the refusal")
        v = app.view
        assert "drop the fork first" in v.notice and not v.attention.on
        assert v.attention.status == off and cap.layers == []
        assert v.header.flash_attn == app.controller.engine.flash_attn_resolved == "off"
