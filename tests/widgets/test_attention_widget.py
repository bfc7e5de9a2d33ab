"""The attention pane: a pure widget test on hand-made weights, and one on the real model."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
from textual.app import App, ComposeResult

from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.observe.attention_capture import AttentionCapture
from tui.engine.observe.attention_map import ContextAttention, context_attention
from tui.widgets.attention import HEADER_H, AttentionPane


def run_async(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body in its own event loop (no pytest plugin needed)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


PIECES = [b"The", b" cat", b" sat", b" because", b" it"]


def _fake(n: int = 5, n_head: int = 2) -> ContextAttention:
    """Widget-test data only: causal rows that sum to 1; head 1 sends row 4 to key 1."""
    w = np.zeros((n_head, n, n), dtype=np.float32)
    for h in range(n_head):
        for q in range(n):
            w[h, q, : q + 1] = 1.0 / (q + 1)
    if n_head > 1 and n >= 5:
        w[1, 4, :5] = [0.1, 0.7, 0.05, 0.05, 0.1]
    return ContextAttention(
        layer=2,
        positions=list(range(n)),
        tokens=list(range(n)),
        weights=w,
        captured=np.ones(n, dtype=bool),
    )


class Host(App):
    def __init__(self) -> None:
        super().__init__()
        self.requested: list[int] = []
        self.selections: list[tuple[int, int | None]] = []

    def compose(self) -> ComposeResult:
        yield AttentionPane()

    def on_attention_pane_layer_requested(self, msg: AttentionPane.LayerRequested) -> None:
        self.requested.append(msg.layer)

    def on_attention_pane_selection_changed(self, msg: AttentionPane.SelectionChanged) -> None:
        self.selections.append((msg.layer, msg.head))


def _text(pane: AttentionPane) -> list[str]:
    return [pane.render_line(y).text for y in range(pane.size.height)]


@run_async
async def test_pane_draws_heatmap_ranks_and_keys():
    app = Host()
    async with app.run_test(size=(80, 20)) as pilot:
        pane = app.query_one(AttentionPane)
        pane.update_from(_fake(), PIECES, n_layer=4)
        pane.focus()
        await pilot.pause()
        assert "layer 2 of 4" in pane.border_title and "mean of 2 heads" in pane.border_title
        assert "keys 1:1" in pane.border_subtitle
        lines = _text(pane)
        # Column labels run downwards: "The" then "cat" (leading space dropped) ...
        assert lines[0].strip().startswith("T  c  s  b  i")
        row0 = lines[HEADER_H]
        assert "The" in row0 and row0.count("·") == 4  # four future keys, masked
        assert pane.cursor == 4  # the cursor follows the newest token
        await pilot.press("right", "right")  # mean -> head 0 -> head 1
        assert pane.head == 1
        top = pane.ranked(3)
        assert [(k, p) for k, p, _ in top][:2] == [(1, b" cat"), (0, b"The")]
        assert abs(top[0][2] - 0.7) < 1e-6
        footer = "\n".join(_text(pane))
        assert "▶ ␣it (pos 4)" in footer and "1. ␣cat" in footer and "0.700" in footer
        await pilot.press("up")
        assert pane.cursor == 3
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert app.requested == [3]
        assert (3, None) in app.selections or (3, 1) in app.selections
        await pilot.click(AttentionPane, offset=(2, HEADER_H + 1))
        assert pane.cursor == 1


@run_async
async def test_long_context_aggregates_and_scrolls_and_marks_uncaptured_rows():
    n = 200
    att = _fake(n, 1)
    att.captured[:10] = False
    att.weights[:, :10, :] = np.nan
    app = Host()
    async with app.run_test(size=(80, 20)) as pilot:
        pane = app.query_one(AttentionPane)
        pane.update_from(att, [b"x"] * n, n_layer=4)
        await pilot.pause()
        sub = pane.border_subtitle
        assert "keys aggregated: 1 cell = sum of 4 keys" in sub
        assert "scrolls" in sub and "of 200" in sub
        assert pane.ranked(1)[0][2] > 0  # the newest row is captured
        pane.move_cursor(0)
        await pilot.pause()
        assert "not captured" in _text(pane)[HEADER_H]
        assert pane.ranked() == []


@run_async
async def test_pronoun_attends_to_its_referent_on_the_real_model(model):
    """SmolLM2-135M, layer 13, head 8: in "...because it was tired" the token " it" gives
    most of its weight to " cat" (the weights are the model's own, from kq_soft_max-13)."""
    cap = AttentionCapture(model.info.n_layer, [13])
    eng = Engine(model, EngineConfig(n_ctx=256, n_threads=2), SamplerSettings(temp=0.0), [cap])
    try:
        eng.prefill(eng.vocab.tokenize("The cat sat on the mat because it was tired."))
        att = context_attention(eng, 13)
        pieces = [eng.vocab.piece(t) for t in eng.tokens]
    finally:
        eng.close()
    app = Host()
    async with app.run_test(size=(100, 24)) as pilot:
        pane = app.query_one(AttentionPane)
        pane.update_from(att, pieces, n_layer=model.info.n_layer)
        pane.set_head(8)
        pane.move_cursor(pieces.index(b" it"))
        await pilot.pause()
        (k, piece, w), *_ = pane.ranked()
        assert piece == b" cat" and w > 0.5
        assert "1. ␣cat" in "\n".join(_text(pane))


class _CountingRows(ContextAttention):
    """Widget-test data: row sources as a capture keeps them; counts the rows laid out."""

    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(1)
        sources = []
        for i in range(n):
            r = rng.random(i + 1).astype(np.float32)
            sources.append(((r / r.sum())[None, None, :], 0, np.arange(i + 1)))
        super().__init__(
            0, list(range(n)), list(range(n)), sources=sources, key_ids=np.arange(n), id_bound=n
        )
        self.laid_out: list[int] = []

    def row(self, i: int, head: int | None) -> np.ndarray:
        self.laid_out.append(i)
        return super().row(i, head)


@run_async
async def test_a_long_context_lays_out_only_the_rows_on_screen_and_reuses_them():
    n = 3000
    att = _CountingRows(n)
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(AttentionPane)
        pane.update_from(att, [b"x"] * n, n_layer=4)
        await pilot.pause()
        first = _text(pane)
        drawn = set(att.laid_out)
        # The rows of the screen (before and after it follows the newest token), not n.
        assert len(drawn) <= 2 * pane.body_h + 1
        assert set(range(n - pane.body_h, n)) <= drawn
        att.laid_out.clear()
        pane.refresh()
        assert _text(pane) == first and att.laid_out == []  # the next frame reuses them
        # The same data made dense (rows laid out over every key) draws the same picture.
        dense = ContextAttention(0, att.positions, att.tokens, att.weights[:, :, :], att.captured)
        pane.update_from(dense, [b"x"] * n, n_layer=4)
        await pilot.pause()
        assert _text(pane) == first
