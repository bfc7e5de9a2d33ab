"""The Attention pane's words: its title and subtitle, and the footer that ranks the keys
the cursor token attends to most."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style

from ..engine.observe.attention_map import ContextAttention
from .heatmap import DIM, LABEL, label

TITLE = Style(color="bright_white", bold=True)
BAR = Style(color="#e9c46a")

Ranked = list[tuple[int, bytes, float]]  # (key index, piece, weight), highest first


def titles(
    att: ContextAttention | None,
    *,
    layer: int,
    n_layer: int,
    head: int | None,
    keys_per_cell: int,
    scale: str,
    rows: tuple[int, int],
    status: str,
) -> tuple[str, str]:
    """(border title, border subtitle): layer, head and size; how keys map to cells, the
    colour scale, the rows on screen (``rows``: first row, body height) and ``status``."""
    if att is None:
        return f"attention · layer {layer}", status
    n, nh = len(att.positions), att.n_head
    head_text = f"head {head} of 0–{nh - 1}" if head is not None else f"mean of {nh} heads"
    title = f"attention · layer {layer} of {n_layer} · {head_text} · {n}×{n} · query ↓ key →"
    f = keys_per_cell
    parts = [
        "keys 1:1" if f == 1 else f"keys aggregated: 1 cell = sum of {f} keys",
        "colour = weight / row max" if scale == "row" else "colour = weight (0–1)",
    ]
    top, h = rows
    if n > h > 0:
        parts.append(f"rows {top}–{min(n, top + h) - 1} of {n}, scrolls")
    if status:
        parts.append(status)
    return title, " · ".join(parts)


def footer_line(
    i: int, footer_h: int, att: ContextAttention, cursor: int, piece: bytes, ranked: Ranked
) -> list[Segment]:
    """Footer line ``i`` for the cursor token: its piece and position, then (one per line, or
    all on one line when ``footer_h`` is 1) the keys it attends to most with their weights."""
    pos = att.positions
    text = label(piece, 16)
    if i == 0:
        if not att.captured[cursor]:
            return [Segment(f"▶ {text!r} (pos {pos[cursor]}): not captured", DIM)]
        head = [
            Segment(f"▶ {text} ", TITLE),
            Segment(f"(pos {pos[cursor]}) → ", DIM),
        ]
        if footer_h == 1:  # no room for a list: one line
            items = "  ".join(f"{label(p, 10)} {w:.3f}" for _, p, w in ranked)
            return [*head, Segment(items, LABEL)]
        return [*head, Segment("attends most to:", DIM)]
    if i - 1 >= len(ranked):
        return []
    k, p, w = ranked[i - 1]
    bar = "█" * max(1, round(w * 20))
    return [
        Segment(f"  {i}. {label(p, 12):<12} ", LABEL),
        Segment(f"{w:6.3f} ", TITLE),
        Segment(f"pos {pos[k]:<5} ", DIM),
        Segment(bar, BAR),
    ]
