"""The memory and quadratic-wall panes render engine data, and nothing else."""

from __future__ import annotations

import numpy as np
from rich.console import Console
from textual.app import App, ComposeResult

from tui.engine import SamplerSettings
from tui.engine.observe import memory as mem
from tui.widgets.memory import MemoryPane, render_memory, usage_bar
from tui.widgets.quadratic import QuadraticPane, render_work, spark


def text_of(renderable) -> str:
    con = Console(width=120, record=True, color_system=None)
    con.print(renderable)
    return con.export_text()


def test_spark_scales_to_a_common_top():
    """Pure rendering rule: one scale for both series, nonzero never drawn empty."""
    assert spark(np.array([0, 4, 8]), 8.0) == " ▄█"
    assert spark(np.array([1, 2]), 1000.0) == "▁▁"
    assert len(spark(np.arange(500), 500.0, width=20)) == 20
    assert usage_bar(1, 10_000, 10).plain == "█" + "░" * 9


def test_memory_pane_shows_the_engines_numbers(make_engine):
    eng = make_engine(n_ctx=1024, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
    eng.prefill(eng.vocab.tokenize("Memory is what the cache costs"))
    rep = mem.memory_report(eng)
    out = text_of(render_memory(rep))
    assert f"{rep.breakdown.bytes_per_token:,} B per token" in out
    assert "9 query heads share 3 K/V heads: 3.0× smaller" in out
    assert f"{rep.used_cells:,} of 1,024 tokens" in out
    c = rep.caches[0]
    assert f"= {c.logged_mib:.2f} MiB" in out and "✓ equals our count" in out
    for row in rep.calc:
        assert f"{row.n_ctx:,}" in out
    assert "flash attention" in out  # the quantized-V note


def test_quadratic_pane_shows_the_counters(make_engine):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=256)
    eng.prefill(eng.vocab.tokenize("1, 2, 3, 4, 5,"))
    for _ in range(20):
        eng.step()
    snap = eng.work.snapshot(4)
    out = text_of(render_work(snap))
    assert f"{snap.with_cache:,} token-forward passes" in out
    assert f"{snap.without_cache:,} (every step" in out
    assert f"{snap.ratio:.1f}×" in out
    assert sum(b.n for b in snap.time_bins) == 20
    for b in snap.time_bins:
        assert f"{b.median_ms:.2f} ms ({b.n} steps)" in out


def test_panes_mount_and_update(make_engine):
    eng = make_engine(n_ctx=256)
    eng.prefill(eng.vocab.tokenize("Hello"))
    eng.step()
    rep, snap = mem.memory_report(eng), eng.work.snapshot()

    class Host(App):
        def compose(self) -> ComposeResult:
            yield MemoryPane(id="m")
            yield QuadraticPane(id="q")

    async def run() -> None:
        app = Host()
        async with app.run_test(size=(120, 50)) as pilot:
            app.query_one(MemoryPane).show_report(rep)
            app.query_one(QuadraticPane).show_snapshot(snap)
            await pilot.pause()
            assert app.query_one(MemoryPane).report is rep
            assert "less work" in str(app.query_one(QuadraticPane).border_subtitle)

    import asyncio

    asyncio.run(run())
