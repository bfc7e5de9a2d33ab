"""The logits pane builds its rows as segments (a fast path). Every cell, character and
style, must equal what Rich draws from the pane's own ``render()`` for the same view."""

from __future__ import annotations

import pytest
from rich.style import Style
from textual.strip import Strip

from tests.support.app import SIZE, make_app, run_async, send
from tui.engine import SamplerSettings
from tui.widgets.logits import LogitsPane


def _cells(strips: list[Strip]) -> list[list[tuple[str, Style]]]:
    return [[(ch, seg.style or Style()) for seg in strip for ch in seg.text] for strip in strips]


def _both(pane: LogitsPane, width: int) -> tuple[list, list]:
    rows = pane.render_rows(width)
    assert rows is not None
    fast = [Strip(r).crop_extend(0, width, None) for r in rows]
    console = pane.app.console
    options = console.options.update(width=width, height=None, highlight=False)
    rich = [Strip(line, width) for line in console.render_lines(pane.render(), options, pad=True)]
    rich += [Strip.blank(width)] * (len(fast) - len(rich))
    fast += [Strip.blank(width)] * (len(rich) - len(fast))
    return _cells(fast), _cells(rich)


@pytest.mark.parametrize("size", [SIZE, (80, 24), (100, 30)])
@run_async
async def test_fast_rows_equal_the_rich_rendering(make_engine, tmp_path, size):
    app = make_app(make_engine, tmp_path, SamplerSettings(temp=0.9, top_k=5, seed=3))
    async with app.run_test(size=size) as pilot:
        await send(pilot, app, "Say something about 日本 and emoji 🙂.")
        pane = app.query_one(LogitsPane)
        await pilot.press("right", "right", "down", "down")  # steps, then the cursor moves
        await pilot.pause(0.3)
        assert pane.view is not None and pane.view.logits.candidates
        width = pane.content_size.width
        fast, rich = _both(pane, width)
        assert fast == rich, _first_diff(fast, rich)
        pane.blur()
        fast, rich = _both(pane, width)
        assert fast == rich, _first_diff(fast, rich)


def _first_diff(a, b):
    for r, (x, y) in enumerate(zip(a, b, strict=False)):
        for c, (p, q) in enumerate(zip(x, y, strict=False)):
            if p != q:
                return r, c, p, q
        if len(x) != len(y):
            return r, "len", len(x), len(y)
    return None
