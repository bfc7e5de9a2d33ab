"""The Lens tab drawn from hand-made views (a pure widget test, no model): layers down with
their top 5, the marked token's first layers flagged, the check's max |Δ|, and the capability
sentence for a backend without the lens instead of stale rows."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from textual.app import App, ComposeResult

from tests.support.lens import PARIS, deep_view
from tui.engine.run.backend import LOCAL_LENS, Capabilities
from tui.widgets.lens import LensPane, LensTab
from tui.worker.lens import LensStep, LensView, first_layers

REMOTE = Capabilities("llama-server at http://127.0.0.1:8080", attention=False, graph=False)


def _layers() -> list[dict[str, Any]]:
    """Widget-test data only: 4 layers; ' Paris' enters the top 5 at layer 2, top 1 at 3."""
    tops = [
        [(11, " a"), (12, " the"), (13, " so"), (14, "."), (15, " not")],
        [(12, " the"), (11, " a"), (13, " so"), (14, "."), (16, ",")],
        [(12, " the"), (11, " a"), (PARIS, " Paris"), (14, "."), (16, ",")],
        [(PARIS, " Paris"), (12, " the"), (17, " London"), (11, " a"), (16, ",")],
    ]
    return [
        {
            "layer": i,
            "top": [
                {"id": t, "piece": p, "logit": 10.0 - j, "p": 0.5 / (j + 1)}
                for j, (t, p) in enumerate(top)
            ],
        }
        for i, top in enumerate(tops)
    ]


def _view(caps: Capabilities) -> Any:
    layers = _layers()
    first1, first5 = first_layers(layers, PARIS)
    check = {"max_abs_diff": 0.23245, "head": "RMS norm (eps 1e-05) · token_embd.weight", "ms": 80}
    step = LensStep(3, 4, layers, check, PARIS, " Paris", "llama.cpp's top-1", first1, first5)
    return SimpleNamespace(capabilities=caps, lens=LensView(True, "preview", step, 4, ""))


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield LensTab(id="lens")


def _text(pane: Any) -> str:
    return "\n".join(pane.render_line(y).text for y in range(pane.size.height))


def test_first_layers_of_the_marked_token() -> None:
    assert first_layers(_layers(), PARIS) == (3, 2)
    assert first_layers(_layers(), 99) == (None, None)


def test_lens_tab_draws_layers_and_says_what_a_backend_cannot_give() -> None:
    async def run() -> None:
        app = Host()
        async with app.run_test(size=(120, 30)) as pilot:
            tab = app.query_one(LensTab)
            tab.show(_view(LOCAL_LENS))
            await pilot.pause()
            rows = _text(app.query_one(LensPane)).splitlines()
            head = _text(app.query_one("#lens-summary"))
            assert rows[2].startswith("▸ 2") and "␣Paris" in rows[2]
            assert rows[3].startswith("★ 3") and rows[3].split()[3] == "␣Paris"
            assert rows[0].startswith("  0") and "␣Paris" not in rows[0] + rows[1]
            assert rows[3].split()[4] == ".50"  # p of the layer's top-1
            assert "max |Δ| 0.232" in head
            assert "top 5 first at layer 2" in head and "top-1 first at layer 3" in head

            tab.show(_view(REMOTE))
            await pilot.pause()
            text = _text(app.query_one(LensPane))
            want = REMOTE.missing("lens")
            assert want is not None and f"the logit lens {want}" in text
            assert "␣Paris" not in text  # no stale rows
            assert not app.query_one("#lens-summary").display

    asyncio.run(run())


def _visible_layers(app: Any) -> list[int]:
    """The layers whose rows are on screen now (the VerticalScroll's window)."""
    from textual.containers import VerticalScroll

    rows = app.query_one(LensTab).query_one(VerticalScroll)
    text = _text(app.query_one(LensPane)).splitlines()
    y = round(rows.scroll_y)
    return [int(ln[1:3]) for ln in text[y : y + rows.scrollable_content_region.height]]


def test_lens_rows_show_every_piece_and_end_each_p() -> None:
    """Issue 24, fault 9: a U+00A0 piece is drawn as the logits pane draws it (``\\xa0``,
    not a blank), and each p is followed by a separator, never by the next piece."""

    async def run() -> None:
        app = Host()
        async with app.run_test(size=(80, 40)) as pilot:
            app.query_one(LensTab).show(deep_view())
            await pilot.pause()
            row0 = _text(app.query_one(LensPane)).splitlines()[0]
            assert "\\xa0" in row0, row0
            cells = row0[4:].split("│")[1:]
            assert len(cells) >= 4
            for cell in cells:
                piece, p = cell.split()
                assert p.startswith(".") and len(p) == 3, cell

    asyncio.run(run())


def test_lens_opens_where_the_pick_enters_the_top5_and_the_keys_scroll() -> None:
    """Issue 24, fault 2: the rows open at the layer where the marked token enters the top 5
    (28 of 30), so 28 and 29 show without a mouse; PgUp/PgDn/Home/End (the tab's
    ``scroll_tab``, where the app routes them) move through the layers; at an 80x24 app's
    pane height (7 rows) layer rows still show."""

    async def run(size: tuple[int, int]) -> None:
        app = Host()
        async with app.run_test(size=size) as pilot:
            tab = app.query_one(LensTab)
            tab.show(deep_view())
            await pilot.pause()
            await pilot.pause()
            shown = _visible_layers(app)
            assert 28 in shown and 29 in shown, shown
            tab.scroll_tab(-2)
            await pilot.pause()
            assert _visible_layers(app)[0] == 0
            tab.scroll_tab(1)
            await pilot.pause()
            assert _visible_layers(app)[0] > 0
            tab.scroll_tab(2)
            await pilot.pause()
            assert _visible_layers(app)[-1] == 29

    asyncio.run(run((120, 14)))
    asyncio.run(run((36, 4)))  # tab 8 at 80x24: 36 columns, 4 rows inside its border
