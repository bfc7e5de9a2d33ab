"""Benchmark 4: one frame of the KV grid, the causal mask and the attention heatmap with a
long context, at several context lengths, to show the cost follows the cells drawn, not n².

A frame is every visible line through the pane's own ``render_line`` (what Textual calls when it
paints), after the pane has taken the new state (``show`` / ``update_from``). The KV and mask
panes get a View built by the app's controller (see ``_views``).
The heatmap needs captured attention rows for every token; capturing 8,192 of them takes
minutes, so each row is made the way a decode step leaves it: one array (n_head, 1, keys) per
step, causal, summing to 1 (one random row repeated over the 9 heads as a broadcast view, so
the mean over heads reads 9 heads' worth of data). The ContextAttention is built by the same
function ``context_attention`` uses (one lookup per row), timed as "build"; the first frame
after it lays out the visible rows ("first frame"), later frames reuse them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np
from textual.app import App, ComposeResult

from tui.engine import Engine, EngineConfig, Model
from tui.engine.observe.attention_capture import RowSource
from tui.engine.observe.attention_map import ContextAttention, rows_from_sources
from tui.widgets.attention import AttentionPane
from tui.widgets.kvcache import KVCachePane
from tui.widgets.mask import CausalMaskPane
from tui.worker import View, Worker

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
    ctl = Worker(eng, raw=True, autoplay=False, close_engine=True)
    prompt = prompt_of(model, LENGTHS[-1])
    out = {}
    try:
        for n in LENGTHS:
            for pos in range(eng.n_past, n):
                eng.kv.add(prompt[pos], pos, (0,), 0)
            ctl.state.new_cells = (n - 1, n)  # as after a decode step: the newest cell is lit
            out[n] = ctl.build_view()
    finally:
        eng.close()
    return out


N_HEAD = 9  # SmolLM2's query heads


def _sources(n: int) -> tuple[dict[int, RowSource], np.ndarray]:
    """kv_id -> row source, as AttentionCapture keeps them after n decode steps, and the key
    rows (pos, cell, kv_id, token): each step's key ids are the start of one id buffer."""
    rng = np.random.default_rng(0)
    keys = np.stack([np.arange(n), np.arange(n), np.arange(n), np.zeros(n, dtype=np.int64)])
    out: dict[int, RowSource] = {}
    for i in range(n):
        r = rng.random(i + 1, dtype=np.float32)
        w = np.broadcast_to((r / r.sum())[None, None, :], (N_HEAD, 1, i + 1))
        out[i] = (w, 0, keys[2, : i + 1])
    return out, keys


def _attention(
    n: int, src: tuple[dict[int, RowSource], np.ndarray]
) -> tuple[ContextAttention, float]:
    """The heatmap's data for the first n tokens, and the ms it took to build."""
    rows, keys = src
    t0 = time.perf_counter()
    att = rows_from_sources(0, keys[:, :n], rows, n)
    ms = (time.perf_counter() - t0) * 1000.0
    assert att is not None
    return att, ms


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
    res: dict[str, dict[int, float]] = {
        "kv": {},
        "mask": {},
        "att": {},
        "att_update": {},
        "att_first": {},
        "att_first_best": {},
    }
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
                    pane.update_from(atts[n], views[n].text.pieces, n_layer=30)  # type: ignore[attr-defined]
                    res["att_update"][n] = (time.perf_counter() - t0) * 1000.0
                else:
                    pane.show(views[n])  # type: ignore[attr-defined]
                await pilot.pause()
                res[name][n] = _frame_ms(pane, h)
            if name == "att":
                # The first frame after new data lays out the visible rows (Textual drew
                # them already, so the pane's row caches are dropped first). Lengths take
                # turns, so a busy neighbour slows them alike.
                firsts: dict[int, list[float]] = {n: [] for n in views}
                for _ in range(9):
                    for n in views:
                        pane.update_from(atts[n], views[n].text.pieces, n_layer=30)  # type: ignore[attr-defined]
                        await pilot.pause()
                        pane._recompute()  # type: ignore[attr-defined]
                        firsts[n].append(_frame_ms(pane, h, reps=1))
                res["att_first"] = {n: median(v) for n, v in firsts.items()}
                res["att_first_best"] = {n: min(v) for n, v in firsts.items()}
            pane.display = False
    return res


def run(model: Model) -> list[Row]:
    views = _views(model)
    src = _sources(LENGTHS[-1])
    built = {n: _attention(n, src) for n in LENGTHS}
    atts = {n: a for n, (a, _) in built.items()}
    res = asyncio.run(_measure(views, atts))
    rows = []
    big = LENGTHS[-1]
    names = {"kv": "KV grid", "mask": "causal mask", "att": "attention heatmap"}
    for key, label in names.items():
        t = res[key]
        growth = t[big] / t[LENGTHS[0]] if t[LENGTHS[0]] > 0 else float("nan")
        series = ", ".join(f"{n}: {t[n]:.2f}" for n in LENGTHS)
        detail = f"ms by context {series}; x{growth:.1f} for x{big // LENGTHS[0]} tokens"
        met = t[big] < 10.0 and growth < 2.0
        if key == "att":
            first = res["att_first"]
            build = {n: ms for n, (_, ms) in built.items()}
            detail += (
                "; data build (a lookup per row) "
                + ", ".join(f"{n}: {build[n]:.1f}" for n in LENGTHS)
                + " ms; first frame after new data (lays out the visible rows), median (best) "
                + ", ".join(
                    f"{n}: {first[n]:.1f} ({res['att_first_best'][n]:.1f})" for n in LENGTHS
                )
                + f" ms; update_from at {big}: {res['att_update'][big]:.2f} ms"
            )
            met = met and first[big] < 10.0
        rows.append(
            Row(
                f"4. {label} frame, {big} tokens",
                f"{t[big]:.2f} ms",
                "< 10 ms, ~flat in n",
                met,
                detail,
            )
        )
    return rows


if __name__ == "__main__":
    for row in run(Model()):
        print(row)
