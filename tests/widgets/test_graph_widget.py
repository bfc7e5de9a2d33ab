"""The decode-anatomy pane: a pure widget test on hand-made numbers, and one on the real model."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from textual.app import App, ComposeResult

from tui.engine import Engine, EngineConfig, ModelInfo, SamplerSettings
from tui.engine.observe.graph_tap import GraphTap
from tui.widgets.anatomy import AnatomyPane


def run_async(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


def _info(**kw: Any) -> ModelInfo:
    """Widget-test data only (a made-up 4-layer model)."""
    base: dict[str, Any] = dict(
        path="x.gguf", arch="llama", name="Tiny", desc="", quant="Q8_0", size_bytes=1,
        n_params=1, n_vocab=1000, n_layer=4, n_head=8, n_head_kv=2, n_embd=256,
        head_dim_k=32, head_dim_v=32, n_ff=704, n_ctx_train=2048, n_swa=0, vocab_type="BPE",
        bos=1, eos=2, eot=0,
    )  # fmt: skip
    base.update(kw)
    return ModelInfo(**base)


CENSUS = {
    "n_nodes": 150,
    "n_graphs": 2,
    "n_layers": 4,
    "prologue": ["embd:GET_ROWS"],
    "layer_chain": [
        "attn_norm",
        "Qcur",
        "kq",
        "kq_soft_max",
        "kqv",
        "attn_out",
        "ffn_inp",
        "ffn_norm",
        "ffn_up",
        "ffn_out",
        "l_out",
    ],  # fmt: skip
    "same_chain_every_layer": True,
    "nodes_per_layer": [36, 36, 36, 38],
    "epilogue": ["norm:RMS_NORM", "result_norm:MUL", "result_output:MUL_MAT"],
    "ops": {"MUL_MAT": 40, "VIEW": 20},
}
PROFILE = {
    "note": "profile mode: slower",
    "total_ms": 10.0,
    "prologue_ms": 0.5,
    "attention_ms": [1.0, 1.0, 1.0, 1.0],
    "ffn_ms": [1.0, 1.0, 1.0, 0.5],
    "epilogue_ms": {"norm": 0.1, "result_norm": 0.1, "result_output": 1.8},
    "by_op_ms": {"MUL_MAT": 8.0},
    "slowest": [["result_output", "MUL_MAT", 1.8]],
    "other_graphs_ms": 0.0,
}


class Host(App):
    def compose(self) -> ComposeResult:
        yield AnatomyPane()


def _all_lines(pane: AnatomyPane) -> str:
    return "\n".join("".join(s.text for s in line) for line in pane.lines)


@run_async
async def test_anatomy_shows_sizes_chain_and_profile():
    app = Host()
    async with app.run_test(size=(100, 20)) as pilot:
        pane = app.query_one(AnatomyPane)
        pane.update_from(_info(), CENSUS, PROFILE)
        await pilot.pause()
        text = _all_lines(pane)
        assert "one llama_decode = 150 graph nodes (2 ubatch graphs)" in text
        assert "1,000 × 256" in text  # the embedding table
        assert "4 × block" in text and "36 nodes per layer" in text
        assert "8 query heads, 2 KV heads × 32" in text and "4 query heads share" in text
        assert "attn_norm → Qcur → kq → kq_soft_max → kqv → attn_out → ffn_inp" in text
        assert "ffn_norm → ffn_up → ffn_out → l_out" in text
        assert "256 → 704 → 256" in text and "256 → 1,000" in text
        assert "PROFILE" in text and "attention 40% · FFN 35% · norm+lm_head 20%" in text
        assert "layer   3" in text and "1.00+0.50 ms" in text
        assert "PROFILE MODE: slower" in pane.border_subtitle
        assert "Tiny" in pane.border_title
        # Only the visible part is drawn, and it scrolls.
        assert len(pane.lines) > pane.size.height
        first = pane.render_line(0).text
        pane.scroll_to(y=len(pane.lines), animate=False, immediate=True)
        await pilot.pause()
        assert pane.render_line(0).text != first


@run_async
async def test_anatomy_without_census_uses_model_sizes_only():
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        pane = app.query_one(AnatomyPane)
        pane.update_from(_info(n_head_kv=8), None, None, status="press G for the census")
        await pilot.pause()
        text = _all_lines(pane)
        assert "graph census off" in text and "GQA" not in text and "PROFILE" not in text
        assert "press G for the census" in pane.border_subtitle


@run_async
async def test_anatomy_from_the_real_census(model):
    tap = GraphTap(census=True, n_layer=model.info.n_layer)
    eng = Engine(model, EngineConfig(n_ctx=256, n_threads=2, flash_attn="off"),
                 SamplerSettings(temp=0.0), [tap])  # fmt: skip
    try:
        rec = eng.prefill(eng.vocab.tokenize("Hello there"))[-1]
    finally:
        eng.close()
    app = Host()
    async with app.run_test(size=(130, 30)) as pilot:
        pane = app.query_one(AnatomyPane)
        pane.update_from(model.info, rec.extras["graph"])
        await pilot.pause()
        text = _all_lines(pane)
        assert f"one llama_decode = {rec.extras['graph']['n_nodes']:,} graph nodes" in text
        assert "30 × block" in text and "9 query heads, 3 KV heads × 64" in text
        assert "kq → kq_soft_max → kqv" in text and "576 → 1,536 → 576" in text
        assert "576 → 49,152" in text
