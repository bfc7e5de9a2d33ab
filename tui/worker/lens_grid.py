"""The lens grid for the app: the context's positions x layers, assembled on the decode
thread from the records' ``extras["lens_grid"]`` (:mod:`tui.engine.observe.lens_grid`).

Each position's column comes from the newest record that decoded that position with the grid
on and the same token there (a rewind and a different token leave it out). Nothing here
imports Textual or Rich.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.model.tokens import display_bytes

if TYPE_CHECKING:
    from ..engine.run.session import Engine

GRID_SHOW = 64  # the newest positions the view carries (the pane shows those that fit)


@dataclass(frozen=True)
class GridColumn:
    pos: int
    token: str  # the piece read at this position
    next_token: int | None  # the token after it in the context (None: the newest position)
    top1: tuple[int | None, ...]  # per layer: the lens's top-1 for the next token
    pieces: tuple[str | None, ...]
    p: tuple[float | None, ...]
    max_abs_diff: float | None  # the last layer against llama.cpp's logits row


@dataclass(frozen=True)
class GridView:
    columns: tuple[GridColumn, ...]  # oldest first
    n_layer: int
    n_tokens: int  # tokens in the context
    missing: int  # positions among the newest GRID_SHOW without a grid column


def grid_view(eng: Engine) -> GridView:
    toks = eng.tokens
    lo = max(0, len(toks) - GRID_SHOW)
    found: dict[int, GridColumn] = {}
    for rec in reversed(eng.records):
        g = rec.extras.get("lens_grid")
        if not g:
            continue
        for k, pos in enumerate(g["pos"]):
            if lo <= pos < len(toks) and pos not in found and g["token"][k] == toks[pos]:
                found[pos] = GridColumn(
                    pos,
                    display_bytes(eng.vocab.piece(toks[pos])),
                    toks[pos + 1] if pos + 1 < len(toks) else None,
                    tuple(g["top1"][k]),
                    tuple(g["top1_piece"][k]),
                    tuple(g["p"][k]),
                    g["max_abs_diff"][k],
                )
        if len(found) == len(toks) - lo:
            break
    cols = tuple(found[p] for p in sorted(found))
    return GridView(cols, eng.info.n_layer, len(toks), len(toks) - lo - len(cols))
