"""The Attention and Anatomy tabs ask the view's capabilities, never the backend's type: when
the backend cannot give attention weights or the compute graph, the tab says so in the words
``Capabilities.missing`` returns, instead of what it drew before. Pure widget tests on
hand-made views (no model)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

import numpy as np
from textual.app import App, ComposeResult

from tui.engine import ModelInfo
from tui.engine.observe.attention_map import ContextAttention
from tui.engine.run.backend import LOCAL, Capabilities
from tui.widgets.attention_tabs import AnatomyTab, AttentionTab

PIECES = (b"The", b" cat", b" sat", b" because", b" it")
REMOTE = Capabilities("llama-server at http://127.0.0.1:8080", attention=False, graph=False)
CENSUS = {
    "n_nodes": 150,
    "n_graphs": 1,
    "n_layers": 4,
    "prologue": ["embd:GET_ROWS"],
    "layer_chain": ["attn_norm", "kq_soft_max", "ffn_inp", "ffn_out", "l_out"],
    "same_chain_every_layer": True,
    "nodes_per_layer": [36, 36, 36, 36],
    "epilogue": ["result_norm:MUL", "result_output:MUL_MAT"],
    "ops": {"MUL_MAT": 40},
}


def run_async(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


def _info() -> ModelInfo:
    """Widget-test data only (a made-up 4-layer model)."""
    return ModelInfo(
        path="x.gguf", arch="llama", name="Tiny", desc="", quant="Q8_0", size_bytes=1,
        n_params=1, n_vocab=1000, n_layer=4, n_head=2, n_head_kv=2, n_embd=256,
        head_dim_k=32, head_dim_v=32, n_ff=704, n_ctx_train=2048, n_swa=0, vocab_type="BPE",
        bos=1, eos=2, eot=0,
    )  # fmt: skip


def _att(n: int = 5, n_head: int = 2) -> ContextAttention:
    """Widget-test data only: causal rows that sum to 1."""
    w = np.zeros((n_head, n, n), dtype=np.float32)
    for q in range(n):
        w[:, q, : q + 1] = 1.0 / (q + 1)
    return ContextAttention(2, list(range(n)), list(range(n)), w, np.ones(n, dtype=bool))


def _view(caps: Capabilities) -> Any:
    """A stand-in for the worker's View: only what the two tabs read."""
    attention = SimpleNamespace(
        on=True, installed=True, layer=2, head=None, n_layer=4, info=_info(), att=_att(),
        census=CENSUS, profile=None, status="layer 2",
    )  # fmt: skip
    return SimpleNamespace(
        capabilities=caps, text=SimpleNamespace(pieces=PIECES), attention=attention
    )


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield AttentionTab(id="attention")
        yield AnatomyTab(id="anatomy")


def _text(pane: Any) -> str:
    return "\n".join(pane.render_line(y).text for y in range(pane.size.height))


@run_async
async def test_tabs_say_what_the_backend_cannot_give_instead_of_stale_data():
    app = Host()
    async with app.run_test(size=(100, 40)) as pilot:
        att, anatomy = app.query_one(AttentionTab), app.query_one(AnatomyTab)
        # A local backend: the heatmap and the census are drawn.
        att.show(_view(LOCAL))
        anatomy.show(_view(LOCAL))
        await pilot.pause()
        assert att.att is not None and att.n_rows == 5
        assert "␣cat" in _text(att)  # the row labels of the heatmap
        assert "150 graph nodes" in str(anatomy.border_subtitle)
        assert any("kq_soft_max" in "".join(s.text for s in line) for line in anatomy.lines)

        # The same (now stale) data from a backend without attention or graph.
        att.show(_view(REMOTE))
        anatomy.show(_view(REMOTE))
        await pilot.pause()
        want_att = REMOTE.missing("attention")
        want_graph = REMOTE.missing("graph")
        assert want_att and "llama-server" in want_att and want_graph
        assert att.att is None and att.n_rows == 0 and att.ranked() == []
        assert att.render_line(0).text.strip() == want_att
        assert want_att in str(att.border_subtitle)
        assert "␣cat" not in _text(att)
        assert anatomy.info is None and anatomy.census is None and anatomy.profile is None
        assert ["".join(s.text for s in line) for line in anatomy.lines] == [want_graph]
        assert anatomy.render_line(0).text.strip() == want_graph
        assert anatomy.border_subtitle == want_graph and "150" not in str(anatomy.border_subtitle)

        # Back on a local backend, both draw again.
        att.show(_view(LOCAL))
        anatomy.show(_view(LOCAL))
        await pilot.pause()
        assert att.n_rows == 5 and "150 graph nodes" in str(anatomy.border_subtitle)
