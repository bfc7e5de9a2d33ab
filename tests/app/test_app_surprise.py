"""The surprise map, the run over time and the paths not taken, in the app on the real model."""

from __future__ import annotations

from rich.style import Style

from tests.support.app import SIZE, make_app, run_async, send, wait_for
from tui.engine import SamplerSettings
from tui.widgets.paths import PathsPane
from tui.widgets.run_chart import RunChart
from tui.widgets.surprise import H_BANDS, P_BANDS, band
from tui.widgets.text import ConversationPane

MESSAGE = "Name a colour."


@run_async
async def test_the_map_colours_each_token_by_its_records_p(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(ConversationPane)
        await pilot.press("escape", "u")  # on before the prompt: the prompt is scored too
        await wait_for(pilot, lambda: app.view.text.surprise.scale == "p", "the p scale")
        await send(pilot, app, MESSAGE)
        await pilot.press("right", "right", "right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 3, "3 steps")
        sv = app.view.text.surprise
        start = app.view.text.reply_start
        assert start is not None and sv.prompt_scored == start - 1 and sv.prompt_ppl
        styles = pane.token_styles(app.view)
        assert len(styles) == len(app.view.text.tokens)
        for i, v in enumerate(sv.values):
            if v is None:
                assert styles[i] is None
            else:
                assert styles[i] == Style(bgcolor=band(v[0], P_BANDS))
        legend = str(pane.border_subtitle)
        assert "p (raw logits)" in legend and f"prompt ppl {sv.prompt_ppl:.2f}" in legend
        assert "extra logits rows" in legend
        await pilot.press("u", "u")  # p' then entropy
        await wait_for(pilot, lambda: app.view.text.surprise.scale == "entropy", "entropy")
        styles = pane.token_styles(app.view)
        v = app.view.text.surprise.values[start]
        assert v is not None and styles[start] == Style(bgcolor=band(v[2], H_BANDS))
        await pilot.press("u")
        await wait_for(pilot, lambda: app.view.text.surprise.scale == "off", "off")
        assert pane.token_styles(app.view) == () and not pane.border_subtitle


@run_async
async def test_moving_along_the_chart_moves_the_token_cursor(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        for _ in range(4):
            await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 4, "4 steps")
        await pilot.press("c")
        chart = app.query_one(RunChart)
        await wait_for(pilot, lambda: chart.has_focus and chart.cursor == 3, "the chart")
        await pilot.press("left", "left")
        await wait_for(pilot, lambda: chart.cursor == 1, "the cursor")
        pane = app.query_one(ConversationPane)
        start = app.view.text.reply_start
        assert pane.mark == start + 1
        assert app.view.text.reply_tokens == 4  # ← moved the cursor, it did not rewind
        await pilot.press("1")
        assert pane.mark is None


@run_async
async def test_the_tree_pane_jumps_to_a_branch(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, SamplerSettings(temp=0.0))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        for _ in range(4):
            await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 4, "4 steps")
        before = app.view.text.tokens
        await pilot.press("w")
        tree = app.query_one(PathsPane)
        await wait_for(pilot, lambda: tree.has_focus, "the tree pane")
        await pilot.press("left", "left")  # rewinds (the pane shows: cells parked in seq 1)
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 2, "the rewind")
        await wait_for(pilot, lambda: len(app.view.paths.rows) == 2, "one branch")
        branch = app.view.paths.rows[1]
        assert branch.cached and branch.seq == 1 and branch.at == 2
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.view.action == "jump", "the jump")
        assert app.view.text.tokens == before
        assert app.view.paths.note is not None and "from the KV cache" in app.view.paths.note


@run_async
async def test_a_new_chat_keeps_the_map_it_scores_for(make_engine, tmp_path):
    """Issue 24, fault 10: ctrl+n used to hide the map (the new chat's state started "off")
    while the engine went on scoring every prompt. Now the map stays on, the notice says so,
    and the next chat's prompt is scored and coloured."""
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(ConversationPane)
        await pilot.press("escape", "u")
        await wait_for(pilot, lambda: app.view.text.surprise.scale == "p", "the p scale")
        await send(pilot, app, MESSAGE)
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "a step")
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: app.view.action == "new", "the new chat")
        assert app.view.text.surprise.scale == "p"
        assert app.worker.observers.wants.score  # its own context scores prompts
        assert not app.worker.engine.score_prompt  # the run's: one logits row, as always
        assert "surprise map stays on (p)" in app.view.notice
        await send(pilot, app, "Name a fruit.")
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "a step")
        sv = app.view.text.surprise
        start = app.view.text.reply_start
        assert start is not None and sv.prompt_scored == start - 1
        assert "p (raw logits)" in str(pane.border_subtitle)
        assert any(s is not None for s in pane.token_styles(app.view))
