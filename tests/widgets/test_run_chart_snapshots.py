"""The run chart (c) must be readable: at 120x40 one plot at a time gets the tab's rows (two
plots got three rows of points each); at 80x24 the tab is too short for any plot, so z (the
bottom pane over the whole window) draws it. Snapshots on the real model, greedy."""

from __future__ import annotations

from tests.support.kernel_class import need_picture, per_kernels
from tests.support.snapshot_app import make_app, steady_cursor, wait_for
from tui.widgets.run_chart import RunChart

MESSAGE = "Write a story about the sea."


def _run_before(app, extra: tuple[str, ...]):
    async def run_before(pilot) -> None:
        steady_cursor(app)
        await pilot.press(*MESSAGE, "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.activity == "generating")
        await pilot.press("escape")
        for _ in range(20):
            await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 20)
        await pilot.press("c", *extra)
        chart = app.query_one(RunChart)
        await wait_for(pilot, lambda: chart.has_focus and chart.cursor == 19)

    return run_before


@per_kernels
def test_run_chart_at_120x40(snap_compare, make_engine, request, kernels):
    need_picture(request, "test_run_chart_snapshots", kernels)
    app = make_app(make_engine, autoplay=False)
    assert snap_compare(app, terminal_size=(120, 40), run_before=_run_before(app, ()))


@per_kernels
def test_run_chart_enlarged_at_80x24(snap_compare, make_engine, request, kernels):
    need_picture(request, "test_run_chart_snapshots", kernels)
    app = make_app(make_engine, autoplay=False)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_run_before(app, ("z",)))
