"""Issue 12 in the app: the chain keys re-run llama.cpp's chain on the same logits (no decode)."""

from __future__ import annotations

from tests.support.app import MESSAGE, SIZE, make_app, run_async, send, wait_for
from tui.engine import SamplerSettings


@run_async
async def test_chain_keys_move_turn_off_and_set_without_decoding(make_engine, tmp_path):
    settings = SamplerSettings(temp=0.9, seed=3, xtc_probability=1.0, xtc_threshold=0.05)
    app = make_app(make_engine, tmp_path, settings)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        before = app.view
        keys = [st.key for st in before.logits.chain.stages]
        assert "xtc" in keys
        # the cursor onto xtc (index 7 of the default order), then turn it off
        await pilot.press(*["right_square_bracket"] * 7)
        await wait_for(pilot, lambda: app.view.logits.chain_cursor == 7, "the cursor")
        await pilot.press("x")
        await wait_for(pilot, lambda: "xtc" in app.view.settings.off, "xtc off")
        v = app.view
        assert "xtc" not in [st.key for st in v.logits.chain.stages]
        assert v.header.n_records == before.header.n_records  # no decode
        # move it before min_p, turn it back on: the order follows
        await pilot.press("left_curly_bracket", "x")
        await wait_for(pilot, lambda: "xtc" not in app.view.settings.off, "xtc on")
        order = app.view.settings.samplers
        assert order.index("xtc") == order.index("min_p") - 1
        got = [st.key for st in app.view.logits.chain.stages]
        assert got.index("xtc") < got.index("min_p")
        # ':' sets any parameter by llama.cpp's flag name; a bad one is one sentence
        await pilot.press("colon")
        await pilot.pause()
        app.screen.query_one("#chain-set").value = "repeat-penalty 1.3"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.view.settings.repeat_penalty == 1.3, "repeat-penalty")
        assert "penalties" in [st.key for st in app.view.logits.chain.stages]
        await pilot.press("colon")
        await pilot.pause()
        app.screen.query_one("#chain-set").value = "no-such-flag 1"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "no sampler flag" in app.view.notice, "the sentence")
        assert app.view.header.n_records == before.header.n_records
