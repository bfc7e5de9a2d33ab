"""The lens grid (tab 8, key G): layers down, the context's newest positions across.

Each column is one position: its header the token read there, each cell the lens's top-1 for
the token after it at that layer, with its p; a cell is green where that top-1 is the token
that did come next in the context. As many of the newest positions as the pane's width
holds (9 columns a cell: a separator, the piece in 5, p in 3).
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from ..engine.model.tokens import escape_controls, visible
from ..worker.lens_grid import GridView

CELL = 5  # piece columns in a cell
HIT = "bold green"


def _piece(text: str | None, width: int = CELL) -> str:
    if text is None:
        return "–".ljust(width)
    shown = visible(escape_controls(text)) or "∅"
    shown = shown if len(shown) <= width else shown[: width - 1] + "…"
    return shown.ljust(width)


def _p(p: float | None) -> str:
    if p is None:
        return "  –"
    return "1.0" if p >= 0.995 else f"{p:.2f}"[1:]


def fitting(grid: GridView, width: int) -> int:
    """How many of the newest columns fit in ``width`` (the layer label takes 3)."""
    return max(1, min(len(grid.columns), (width - 3) // (CELL + 5)))


class GridRows:
    """A header row of the positions' tokens, then one row per layer."""

    def __init__(self, grid: GridView, n: int) -> None:
        self.grid, self.n = grid, n  # n: the newest columns shown (as in the summary)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        grid = self.grid
        if not grid.columns:
            yield Text("no position has a grid yet: send a message", "grey70")
            return
        cols = grid.columns[-self.n :]
        for layer in range(grid.n_layer):
            t = Text(no_wrap=True, overflow="ellipsis")
            t.append(f"{layer:>2} ", "grey62")
            for c in cols:
                t.append("│", "grey30")
                hit = c.next_token is not None and c.top1[layer] == c.next_token
                t.append(_piece(c.pieces[layer]), HIT if hit else "")
                t.append(" " + _p(c.p[layer]), "grey50")
            yield t


def token_header(grid: GridView, n: int) -> Text:
    """The tokens read at the positions shown, aligned with the rows' cells."""
    t = Text("   ", no_wrap=True, overflow="ellipsis")
    for c in grid.columns[-n:]:
        t.append("│")
        t.append(_piece(c.token, CELL + 4), "bright_cyan")
    return t


def grid_summary(grid: GridView, n: int, *, narrow: bool = False) -> Text:
    """Positions shown, their tokens (aligned with the rows' cells), what a cell is, and the
    last layer's check against llama.cpp; ``narrow`` (tab 8 at 80x24): the tokens alone."""
    t = Text(no_wrap=False)
    if not grid.columns:
        t.append("grid · every position: no position has one yet", "bold")
        return t
    if narrow:
        return token_header(grid, n)
    cols = grid.columns[-n:]
    diffs = [c.max_abs_diff for c in cols if c.max_abs_diff is not None]
    t.append(f"grid · positions {cols[0].pos}–{cols[-1].pos} of {grid.n_tokens}", "bold")
    if len(cols) < len(grid.columns):
        t.append(f" ({len(grid.columns) - len(cols)} older ones need a wider pane)", "grey70")
    if grid.missing:
        t.append(f" ({grid.missing} without a grid)", "grey70")
    t.append("\n")
    t.append_text(token_header(grid, n))
    t.append("\ncells: top-1 for the next token, p; ", "grey70")
    t.append("green", HIT)
    t.append(" came next", "grey70")
    if diffs:
        t.append(f" · last layer vs llama.cpp |Δ| ≤ {max(diffs):.3f}")
    return t
