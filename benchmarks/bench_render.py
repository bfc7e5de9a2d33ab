"""Benchmark 4: one frame of the KV grid, the causal mask and the attention heatmap with a
long context, at several context lengths, to show the cost follows the cells drawn, not n².

A frame is every visible line through the pane's own ``render_line`` (what Textual calls when it
paints), after the pane has taken the new state (``show`` / ``update_from``). The KV and mask
panes get a View built by the app's controller (see ``_views``).
The heatmap needs captured attention rows for every token; a capture of 8,192 rows would be a
dense (n_head, n, n) array, so the pane is fed a one-head ContextAttention of the right shape
with causal rows (each row sums to 1): the drawing cost depends on the shape only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np
from textual.app import App, ComposeResult

from tui.controller import Controller, View
from tui.engine import Engine, EngineConfig, Model
from tui.engine.attention import ContextAttention
from tui.widgets.attention import AttentionPane
from tui.widgets.kvcache import KVCachePane
from tui.widgets.mask import CausalMaskPane

from .common import THREADS, Row, median, prompt_of

SIZE = (120, 40)
LENGTHS = (1024, 2048, 4096, 8192)


class _Host(App[None]):
    def compose(self) -> ComposeResult:
        yield KVCachePane(id="kv")
        yield CausalMaskPane(id="mask")
        yield AttentionPane(id="att")

    CSS = "KVCachePane, CausalMaskPane, AttentionPane { height: 1fr; display: none; }"


def _views(model: Model) -> dict[int, View]:
    """Views of a controller whose engine holds n cells, for each n in LENGTHS.

    A real prefill of 8,192 tokens takes minutes on two busy cores, so the KV mirror is filled
    the way ``llama_decode`` would leave it (token, position, sequence 0) without decoding: the
    panes draw from the mirror and the View only, so the drawing cost is the same."""
    eng = Engine(model, EngineConfig(n_ctx=LENGTHS[-1] + 8, n_threads=THREADS))
    ctl = Controller(eng, raw=True, autoplay=False, close_engine=True)
    prompt = prompt_of(model, LENGTHS[-1])
    out = {}
    try:
        for n in LENGTHS:
            for pos in range(eng.n_past, n):
                eng.kv.add(prompt[pos], pos, (0,), 0)
            ctl.s.new_cells = (n - 1, n)  # as after a decode step: the newest cell is lit
            out[n] = ctl._build()
    finally:
        eng.close()
    return out


def _attention(n: int) -> ContextAttention:
    rng = np.random.default_rng(0)
    w = np.zeros((1, n, n), dtype=np.float32)
    for i in range(n):
        r = rng.random(i + 1, dtype=np.float32)
        w[0, i, : i + 1] = r / r.sum()
    return ContextAttention(0, list(range(n)), [0] * n, w, np.ones(n, dtype=bool))


def _frame_ms(pane: object, height: int, reps: int = 7) -> float:
    render: Callable[[int], object] = pane.render_line  # type: ignore[attr-defined]
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for y in range(height):
            render(y)
        out.append((time.perf_counter() - t0) * 1000.0)
    return median(out)


async def _measure(views: dict[int, View], atts: dict[int, ContextAttention]) -> dict:
    res: dict[str, dict[int, float]] = {"kv": {}, "mask": {}, "att": {}, "att_update": {}}
    app = _Host()
    async with app.run_test(size=SIZE) as pilot:
        for name in ("kv", "mask", "att"):
            pane = app.query_one(f"#{name}")
            pane.display = True
            await pilot.pause()
            h = pane.size.height
            for n in views:
                if name == "att":
                    t0 = time.perf_counter()
                    pane.update_from(atts[n], views[n].pieces, n_layer=30)  # type: ignore[attr-defined]
                    res["att_update"][n] = (time.perf_counter() - t0) * 1000.0
                else:
                    pane.show(views[n])  # type: ignore[attr-defined]
                await pilot.pause()
                res[name][n] = _frame_ms(pane, h)
            pane.display = False
    return res


def run(model: Model) -> list[Row]:
    views = _views(model)
    atts = {n: _attention(n) for n in LENGTHS}
    res = asyncio.run(_measure(views, atts))
    rows = []
    big = LENGTHS[-1]
    names = {"kv": "KV grid", "mask": "causal mask", "att": "attention heatmap"}
    for key, label in names.items():
        t = res[key]
        growth = t[big] / t[LENGTHS[0]] if t[LENGTHS[0]] > 0 else float("nan")
        series = ", ".join(f"{n}: {t[n]:.2f}" for n in LENGTHS)
        detail = f"ms by context {series}; x{growth:.1f} for x{big // LENGTHS[0]} tokens"
        if key == "att":
            detail += (
                f"; update_from (mean over heads, O(n²)) at {big}: {res['att_update'][big]:.0f} ms"
            )
        rows.append(
            Row(
                f"4. {label} frame, {big} tokens",
                f"{t[big]:.2f} ms",
                "< 10 ms, ~flat in n",
                t[big] < 10.0 and growth < 2.0,
                detail,
            )
        )
    return rows


if __name__ == "__main__":
    for row in run(Model()):
        print(row)
