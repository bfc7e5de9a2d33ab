"""The quadratic wall, counted from the real run.

With a KV cache each ``llama_decode`` pushes only the new tokens through the model. A loop
without a cache would push the *whole* context through again for every token it samples.
:class:`WorkCounter` is fed one entry per decode call by the engine and keeps both totals, so
the difference is arithmetic on what actually ran, not a formula on screen.

A token-forward pass here means one token going through every layer once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class WorkPoint:
    record: int  # StepRecord index
    n_tokens: int  # tokens this call computed (with the cache)
    context: int  # tokens the logits row(s) looked at; 0 for a call with no logits
    with_cache: int  # running total of token-forward passes done
    without_cache: int  # running total a cache-less loop would have done
    decode_ms: float
    phase: str


@dataclass(frozen=True)
class TimeBin:
    ctx_lo: int
    ctx_hi: int
    median_ms: float
    n: int


@dataclass(frozen=True)
class WorkSnapshot:
    """A copy of the counter that another thread (the UI) may read while the engine runs."""

    with_cache: int
    without_cache: int
    ratio: float
    context: np.ndarray  # context length at each logits row
    with_series: np.ndarray  # cumulative token-forward passes with the cache
    without_series: np.ndarray  # ... and without one
    decode_ctx: np.ndarray  # context length of each one-token decode step
    decode_ms: np.ndarray  # its measured time
    time_bins: tuple[TimeBin, ...]
    ms_per_1k: float | None
    slope_r2: float | None = None  # how much of the time's spread the line explains


class WorkCounter:
    """Running totals of forward passes with the cache and without one."""

    def __init__(self) -> None:
        self.points: list[WorkPoint] = []
        self.with_cache = 0
        self.without_cache = 0

    def add(
        self,
        record: int,
        n_tokens: int,
        contexts: Sequence[int],
        decode_ms: float,
        phase: str,
    ) -> WorkPoint:
        """One decode call. ``contexts`` holds, for each logits row it produced, the length of
        that row's sequence after the call: what a cache-less loop must recompute for it."""
        self.with_cache += n_tokens
        self.without_cache += sum(contexts)
        pt = WorkPoint(
            record,
            n_tokens,
            max(contexts, default=0),
            self.with_cache,
            self.without_cache,
            decode_ms,
            phase,
        )
        self.points.append(pt)
        return pt

    def reset(self) -> None:
        self.points.clear()
        self.with_cache = self.without_cache = 0

    @property
    def ratio(self) -> float:
        """How many times more work the cache-less loop would have done."""
        return self.without_cache / self.with_cache if self.with_cache else 0.0

    @property
    def saved(self) -> int:
        return self.without_cache - self.with_cache

    def series(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(context length, cumulative with cache, cumulative without) at each logits row."""
        pts = [p for p in self.points if p.context]
        ctx = np.fromiter((p.context for p in pts), dtype=np.int64, count=len(pts))
        w = np.fromiter((p.with_cache for p in pts), dtype=np.int64, count=len(pts))
        wo = np.fromiter((p.without_cache for p in pts), dtype=np.int64, count=len(pts))
        return ctx, w, wo

    def decode_times(self) -> tuple[np.ndarray, np.ndarray]:
        """(context length, measured ms) of every one-token decode step."""
        pts = [p for p in self.points if p.phase == "decode" and p.context]
        ctx = np.fromiter((p.context for p in pts), dtype=np.int64, count=len(pts))
        ms = np.fromiter((p.decode_ms for p in pts), dtype=np.float64, count=len(pts))
        return ctx, ms

    def decode_time_bins(self, n_bins: int = 8) -> list[TimeBin]:
        """Median decode time in equal-width bins of context length."""
        ctx, ms = self.decode_times()
        if ctx.size == 0:
            return []
        lo, hi = int(ctx.min()), int(ctx.max())
        edges = np.linspace(lo, hi + 1, min(n_bins, hi + 1 - lo) + 1)
        which = np.clip(np.searchsorted(edges, ctx, side="right") - 1, 0, len(edges) - 2)
        out = []
        for b in range(len(edges) - 1):
            sel = ms[which == b]
            if sel.size:
                # the bin holds the whole lengths in [edges[b], edges[b + 1]): its label too
                lo_b, hi_b = int(np.ceil(edges[b])), int(np.ceil(edges[b + 1])) - 1
                out.append(TimeBin(lo_b, hi_b, float(np.median(sel)), sel.size))
        return out

    def ms_per_1k_context(self) -> float | None:
        """Least-squares slope of decode time against context length, in ms per 1,000
        tokens: the part of a step that grows with the history attention scans."""
        ctx, ms = self.decode_times()
        if ctx.size < 3 or ctx.min() == ctx.max():
            return None
        slope = np.polyfit(ctx.astype(np.float64), ms, 1)[0]
        return float(slope * 1000.0)

    def slope_r2(self) -> float | None:
        """R² of that line: 1 when the step times lie on it, near 0 when the spread is noise
        (other work on the machine) rather than the growing history."""
        ctx, ms = self.decode_times()
        if ctx.size < 3 or ctx.min() == ctx.max():
            return None
        x = ctx.astype(np.float64)
        fit = np.polyval(np.polyfit(x, ms, 1), x)
        total = float(np.sum((ms - ms.mean()) ** 2))
        return 1.0 - float(np.sum((ms - fit) ** 2)) / total if total > 0 else 1.0

    def snapshot(self, n_bins: int = 8) -> WorkSnapshot:
        ctx, w, wo = self.series()
        dctx, ms = self.decode_times()
        return WorkSnapshot(
            self.with_cache,
            self.without_cache,
            self.ratio,
            ctx,
            w,
            wo,
            dctx,
            ms,
            tuple(self.decode_time_bins(n_bins)),
            self.ms_per_1k_context(),
            self.slope_r2(),
        )
