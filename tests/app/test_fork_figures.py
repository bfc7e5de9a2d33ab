"""After a fork, every context figure names what it counts (issue #30's walk at 100x30): the
header and tab 0 said "69 of 4,096 tokens in use" (sequence 0's length) beside the footer's
"KV 70" (the cells in use). Each now says which it is, and each is checked against llama.cpp."""

from __future__ import annotations

from tests.support.app import make_app, run_async, wait_for
from tests.support.app_cache import cache_text, open_tab
from tests.support.compare_records import screen_text
from tests.support.forks import forked_app
from tui.engine import SamplerSettings
from tui.widgets.cache import CacheTab


@run_async
async def test_after_a_fork_the_header_and_tab_0_name_cells_and_tokens(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, SamplerSettings(temp=1.0, seed=4))
    eng = app.worker.engine
    async with app.run_test(size=(100, 30)) as pilot:
        await forked_app(pilot, app)
        await open_tab(pilot, app, "0")
        tab = app.query_one(CacheTab)
        await wait_for(pilot, lambda: "KV cells in use" in cache_text(app), "tab 0")
        with app.worker.lane.lock:  # the worker is idle: read llama.cpp's own counts
            used, seq0 = eng.kv.used, eng.kv.count(0)
        assert used > seq0  # the two sequences' own cells beside the shared ones
        n_ctx = app.view.text.n_ctx
        top = screen_text(app).splitlines()[0]
        assert f"seq 0 ctx {seq0:,}/{n_ctx:,} · KV {used:,} cells" in top, top
        body = " ".join(cache_text(app).split())
        said = f"{used:,} of {n_ctx:,} KV cells in use now; sequence 0 holds {seq0:,} tokens"
        assert said in body, body
        assert f"{seq0:,} of {n_ctx:,} tokens in use" not in body  # the old contradiction
        assert str(tab.border_subtitle).startswith(f"KV {used:,}/{n_ctx:,}")


@run_async
async def test_one_sequence_keeps_the_short_header(make_engine, tmp_path):
    """Without a fork the cells are sequence 0's tokens: one figure, "ctx N/n_ctx"."""
    from tests.support.app import send

    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await send(pilot, app, "Hi")
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "a step")
        await pilot.pause()
        top = screen_text(app).splitlines()[0]
        n = app.worker.engine.kv.used
        assert f"│ ctx {n:,}/{app.view.text.n_ctx:,} " in top and "seq 0" not in top, top
