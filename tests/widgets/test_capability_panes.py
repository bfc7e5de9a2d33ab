"""Panes ask the view's capabilities, never the backend's type (no model needed).

A backend without KV cells (a remote llama-server) gives the KV grid, the causal mask and the
memory tab nothing true to draw, and one without a second context cannot verify: each says so
in a plain sentence instead of drawing. With the local capabilities they draw as always."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from rich.console import Console
from textual.app import App, ComposeResult

from tui.engine.run.backend import LOCAL, Capabilities
from tui.widgets.cache import CacheTab, MemoryTab
from tui.widgets.kvcache import KVCachePane
from tui.widgets.mask import CausalMaskPane
from tui.widgets.memory import MemoryPane

REMOTE = Capabilities("llama-server at http://127.0.0.1:8080", kv_cells=False, verify=False)
SENTENCE = "needs a local model: this one runs on llama-server at http://127.0.0.1:8080"


def fake_view(caps: Capabilities) -> SimpleNamespace:
    """The fields these panes read; a backend without cells reports none in use."""
    return SimpleNamespace(
        seq=1,
        capabilities=caps,
        text=SimpleNamespace(n_ctx=64, n_past=3, seqs=(), fork_at=None),
        kv=SimpleNamespace(
            kv_used=3,
            kv_cells=((1, 0, (0,)), (2, 1, (0,)), (3, 2, (0,))),
            kv_bytes=3 * 1024,
            kv_bytes_allocated=64 * 1024,
            kv_bytes_per_token=1024,
            kv_problems=(),
            kv_report=None,
        ),
        batch=SimpleNamespace(new_cells=(0, 3), cut_cells=(0, 0)),
        cache=SimpleNamespace(
            shifts=(),
            shift_pieces=(),
            memory=None,
            verify=None,
            work=None,
            turns=(),
            context_full="stop",
            n_keep=0,
        ),
    )


class PanesApp(App[None]):
    def compose(self) -> ComposeResult:
        yield KVCachePane(id="kv")
        yield CausalMaskPane(id="mask")
        yield MemoryTab(id="memory")
        yield CacheTab(id="cache")


def lines(pane) -> list[str]:
    return [pane.render_line(y).text.rstrip() for y in range(pane.size.height)]


def shown(widget) -> str:
    con = Console(width=200, record=True, color_system=None)
    con.print(widget.content)
    return con.export_text()


def run(caps: Capabilities) -> dict[str, object]:
    out: dict[str, object] = {}

    async def body() -> None:
        app = PanesApp()
        async with app.run_test(size=(100, 60)) as pilot:
            view = fake_view(caps)
            for pane_id in ("kv", "mask", "memory", "cache"):
                app.query_one(f"#{pane_id}").show(view)
            await pilot.pause()
            out["kv"] = lines(app.query_one(KVCachePane))
            out["mask"] = lines(app.query_one(CausalMaskPane))
            out["memory"] = shown(app.query_one(MemoryPane))
            out["verify"] = shown(app.query_one("#c-verify"))

    asyncio.run(body())
    return out


def test_panes_without_the_capability_say_why():
    out = run(REMOTE)
    for pane in ("kv", "mask"):
        drawn = [line for line in out[pane] if line]
        assert drawn == [SENTENCE], pane  # one sentence, no grid, no triangle
    assert SENTENCE in out["memory"]
    assert f"Verify {SENTENCE}." in out["verify"]


def test_local_capabilities_draw_as_before():
    out = run(LOCAL)
    assert not any(SENTENCE in line for line in out["kv"] + out["mask"])
    assert any("█" in line for line in out["kv"])  # the three used cells
    assert any(line.strip() for line in out["mask"])
    assert "needs a local model" not in out["memory"] + out["verify"]
