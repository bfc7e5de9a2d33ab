"""The paths tree's wording for a branch whose first token the chain had cut (a forced token):
its p′ is 0, which read "p′ 0" as if it were a probability the pick could have drawn."""

from __future__ import annotations

from textual.app import App, ComposeResult

from tests.support.app import run_async
from tui.widgets.paths import PathsPane
from tui.worker.paths import PathRow, PathsView


def _row(id: int, p_final: float | None) -> PathRow:
    return PathRow(id, "force" if id else "live", 3, 0, (b" cat",), 0.01, p_final, 5, False, None)


class _One(App):
    def compose(self) -> ComposeResult:
        yield PathsPane()


@run_async
async def test_a_branch_the_chain_cut_says_so_instead_of_p_prime_0():
    app = _One()
    async with app.run_test(size=(120, 20)) as pilot:
        pane = app.query_one(PathsPane)
        pane.show_paths(PathsView(rows=(_row(0, None), _row(1, 0.0), _row(2, 0.25)), shown=True))
        await pilot.pause()
        text = pane.render().plain
    cut = next(ln for ln in text.splitlines() if "#1" in ln)
    kept = next(ln for ln in text.splitlines() if "#2" in ln)
    assert "cut by the chain" in cut and "p′ 0 " not in cut, cut
    assert "p′" in kept and "cut by" not in kept, kept
