"""The heatmap's rows as drawn, kept between frames: a frame pays only for rows it has not
drawn yet."""

from __future__ import annotations

import numpy as np

from ..engine.observe.attention_map import ContextAttention
from .heatmap import Runs, cell_sums, level_runs
from .lru import LRU


class HeatmapRows:
    """The rows of one :class:`~tui.engine.observe.attention_map.ContextAttention` and head: each
    row laid out over the keys, its cell sums and its colour runs for an aggregation (keys per
    cell) and colour scale, each kept in an LRU of ``maxsize`` rows. :meth:`reset` when the
    data or the head change."""

    def __init__(self, maxsize: int) -> None:
        self.att: ContextAttention | None = None
        self.head: int | None = None
        self._weights: LRU[np.ndarray] = LRU(maxsize)  # row -> weights per key
        self._sums: LRU[np.ndarray] = LRU(maxsize)  # (row, keys per cell) -> sum per cell
        self._runs: LRU[Runs] = LRU(maxsize)  # (row, keys per cell, scale) -> colour runs

    def reset(self, att: ContextAttention | None, head: int | None) -> None:
        self.att, self.head = att, head
        for cache in (self._weights, self._sums, self._runs):
            cache.clear()

    def weights(self, i: int) -> np.ndarray:
        """Query row ``i``: the head's weights (or their mean) per key (``ContextAttention.row``)."""
        got = self._weights.get(i)
        if got is None:
            assert self.att is not None
            got = self._weights.put(i, self.att.row(i, self.head))
        return got

    def sums(self, row: int, f: int) -> np.ndarray:
        """Row ``row`` summed over each run of ``f`` keys (one cell each)."""
        got = self._sums.get((row, f))
        if got is None:
            # A drawn row is a captured one: no NaN in it.
            got = self._sums.put((row, f), cell_sums(self.weights(row), f))
        return got

    def runs(self, row: int, f: int, scale: str, on_screen: range) -> Runs:
        """The colour runs of ``row`` (:func:`~tui.widgets.heatmap.level_runs`), computed with
        those of every captured row ``on_screen`` not known yet: one NumPy pass a frame."""
        got = self._runs.get((row, f, scale))
        if got is not None:
            return got
        assert self.att is not None
        captured = self.att.captured
        rows = [row] + [
            r for r in on_screen if r != row and captured[r] and (r, f, scale) not in self._runs
        ]
        sums = np.stack([self.sums(r, f) for r in rows])  # (rows, cells), float32
        runs = level_runs(sums, rows, f, scale)
        for r, got in zip(rows, runs, strict=True):
            self._runs.put((r, f, scale), got)
        return runs[0]
