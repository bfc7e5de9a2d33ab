"""Snapshots of tab 8 from hand-made views (pure widget pictures, no model): the layers open
where the marked token enters the top 5, at tab 8's size in a 120x40 and an 80x24 app, with
every piece visible and a separator after each p (issue 24, faults 2 and 9); and the grid."""

from __future__ import annotations

from textual.app import App, ComposeResult

from tests.support.lens import deep_view
from tui.widgets.lens import LensTab
from tui.worker.lens import LensView
from tui.worker.lens_grid import GridColumn, GridView


class Host(App[None]):
    def __init__(self, view) -> None:
        super().__init__()
        self.view_ = view

    def compose(self) -> ComposeResult:
        yield LensTab(id="lens")

    def on_mount(self) -> None:
        self.query_one(LensTab).show(self.view_)


def test_lens_rows_at_the_120x40_pane(snap_compare):
    assert snap_compare(Host(deep_view()), terminal_size=(58, 13))


def test_lens_rows_at_the_80x24_pane(snap_compare):
    assert snap_compare(Host(deep_view()), terminal_size=(36, 4))


def test_lens_grid_picture(snap_compare):
    words = ["The", " capital", " of", " France", " is"]
    cols = tuple(
        GridColumn(
            pos,
            w,
            100 + pos + 1 if pos < 4 else None,
            tuple(100 + pos + 1 if layer >= 2 else 7 for layer in range(4)),
            tuple(words[pos + 1] if layer >= 2 and pos < 4 else "\u00a0" for layer in range(4)),
            tuple(0.2 * (layer + 1) for layer in range(4)),
            0.25,
        )
        for pos, w in enumerate(words)
    )
    view = deep_view()
    lens = view.lens
    view.lens = LensView(True, lens.mode, lens.step, 4, "", GridView(cols, 4, 5, 0))
    assert snap_compare(Host(view), terminal_size=(58, 10))
