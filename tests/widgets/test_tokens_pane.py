"""The tokens pane re-wraps only what changed between views; after every kind of change its
lines must equal the lines a fresh pane wraps from the same view."""

from __future__ import annotations

from tests.support.app import SIZE, make_app, run_async, send, wait_for
from tui.widgets.flow import FlowLines
from tui.widgets.tokens import TokensPane


def _lines(pane: TokensPane) -> list[list[tuple[str, object]]]:
    return [[(s.text, s.style) for s in line] for line in pane.flow.lines]


def _fresh_lines(pane: TokensPane) -> list[list[tuple[str, object]]]:
    """Forget every cached chip and line, wrap the same view again."""
    assert pane.view is not None
    kept = (pane._chips, pane._key, pane._tokens, pane._spans, pane._newest, pane.flow)
    pane._forget()
    pane.flow = FlowLines()
    pane.show(pane.view)
    out = _lines(pane)
    pane._chips, pane._key, pane._tokens, pane._spans, pane._newest, pane.flow = kept
    return out


@run_async
async def test_incremental_chips_equal_a_fresh_wrap(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name three rivers in Europe.")
        await pilot.press("1")  # the tokens tab (sending moved the focus to the controls)
        pane = app.query_one(TokensPane)

        async def settle(n: int) -> None:
            await wait_for(pilot, lambda: pane.view is not None and pane.view.text.n_past == n, "view")

        for _ in range(8):  # each step moves the newest-chip marker and adds a chip
            n = app.view.text.n_past + 1
            await pilot.press("right")
            await settle(n)
            assert _lines(pane) == _fresh_lines(pane)
        n = app.view.text.n_past - 3
        for _ in range(3):
            await pilot.press("left")
        await settle(n)
        assert _lines(pane) == _fresh_lines(pane)
        pane.toggle_ids()
        assert _lines(pane) == _fresh_lines(pane)
        assert any(ch in pane.plain for ch in "₀₁₂₃₄₅₆₇₈₉")  # the ids are drawn
        await pilot.press("i")  # back to the chat box: a second turn changes the spans
        await send(pilot, app, "And one in Asia.")
        await wait_for(pilot, lambda: pane.view is app.view, "the pane to draw the new turn")
        assert _lines(pane) == _fresh_lines(pane)
