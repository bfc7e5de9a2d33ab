"""The quadratic-wall pane: forward passes with the KV cache against a loop without one.

Renders a :class:`tui.engine.model.work.WorkSnapshot` (a copy the engine's thread made): the two
totals and their ratio, both running totals charted against the context length on one scale,
and the measured decode time per step as the context grows."""

from __future__ import annotations

import numpy as np
from rich.console import Group, RenderableType
from rich.text import Text
from textual.widgets import Static

from ..engine.model.work import WorkSnapshot

BLOCKS = " ▁▂▃▄▅▆▇█"
CHART_W = 48


def _columns(x: np.ndarray, width: int) -> np.ndarray:
    """Indices of ``width`` samples spread over ``x`` (all of it when shorter)."""
    if x.size <= width:
        return np.arange(x.size)
    return np.linspace(0, x.size - 1, width).round().astype(np.int64)


def spark(values: np.ndarray, top: float, width: int = CHART_W) -> str:
    """One line of block characters, scaled so that ``top`` fills a cell."""
    if values.size == 0 or top <= 0:
        return ""
    idx = _columns(values, width)
    levels = np.clip(np.ceil(values[idx] / top * (len(BLOCKS) - 1)), 0, len(BLOCKS) - 1)
    levels[(values[idx] > 0) & (levels == 0)] = 1
    return "".join(BLOCKS[int(v)] for v in levels)


MIN_FIT_STEPS = 8  # fewer steps than this make a line through noise
MIN_FIT_R2 = 0.5  # the line must explain at least half the spread of the step times


def slope_line(snap: WorkSnapshot) -> str:
    """The least-squares slope as a finding only when the fit means something: enough steps,
    a line explaining most of the spread, and time growing with the history; else says why not."""
    if snap.ms_per_1k is None:
        return ""
    n, r2 = int(snap.decode_ctx.size), snap.slope_r2
    if n >= MIN_FIT_STEPS and r2 is not None and r2 >= MIN_FIT_R2 and snap.ms_per_1k > 0:
        return (
            f"  slope {snap.ms_per_1k:+.2f} ms per 1,000 tokens of context (least squares, "
            f"R² {r2:.2f}): attention reads every cached K and V row once per step"
        )
    why = f"{n} steps" if n < MIN_FIT_STEPS else f"R² {r2 or 0.0:.2f} over {n} steps"
    if n >= MIN_FIT_STEPS and r2 is not None and r2 >= MIN_FIT_R2:
        why += ", falling"  # time cannot shrink with more history: the machine's load changed
    return (
        f"  no slope shown ({why}): the step times vary more with other work on the machine "
        "than with the context length here"
    )


def render_work(snap: WorkSnapshot, width: int = CHART_W) -> RenderableType:
    parts: list[RenderableType] = [
        Text.assemble(
            ("With the cache     ", "bold green"),
            f"{snap.with_cache:>12,} token-forward passes (prompt + steps)",
        ),
        Text.assemble(
            ("Without a cache    ", "bold red"),
            f"{snap.without_cache:>12,} (every step recomputes its whole context)",
        ),
        Text.assemble(("Ratio              ", "bold"), f"{snap.ratio:>12.1f}×"),
    ]
    if snap.context.size:
        top = float(snap.without_series[-1])
        lo, hi = int(snap.context[0]), int(snap.context[-1])
        parts.append(Text(f"Running totals, context {lo:,} → {hi:,} tokens (one scale):"))
        parts.append(
            Text.assemble(("  with    ", "green"), (spark(snap.with_series, top, width), "green"))
        )
        parts.append(
            Text.assemble(("  without ", "red"), (spark(snap.without_series, top, width), "red"))
        )
    if snap.time_bins:
        slowest = max(b.median_ms for b in snap.time_bins)
        parts.append(Text("Decode step time (median, measured) as the context grows:"))
        for b in snap.time_bins:
            n = 0 if slowest <= 0 else max(1, round(20 * b.median_ms / slowest))
            parts.append(
                Text.assemble(
                    f"  {b.ctx_lo:>6,}–{b.ctx_hi:<6,} ",
                    ("█" * n, "cyan"),
                    f" {b.median_ms:.2f} ms ({b.n} steps)",
                )
            )
        line = slope_line(snap)
        if line:
            parts.append(Text(line, style="grey62"))
    return Group(*parts)


class QuadraticPane(Static):
    """Shows the latest :class:`WorkSnapshot`; call :meth:`show_snapshot` from the UI thread."""

    DEFAULT_CSS = "QuadraticPane { height: auto; }"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__("nothing decoded yet", id=id, classes=classes)
        self.border_title = "Quadratic wall"
        self.snapshot: WorkSnapshot | None = None

    def show_snapshot(self, snap: WorkSnapshot) -> None:
        self.snapshot = snap
        self.border_subtitle = f"{snap.ratio:.1f}× less work with the cache"
        width = max(16, self.size.width - 12) if self.size.width else CHART_W
        self.update(render_work(snap, width))
