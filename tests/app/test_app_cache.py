"""The cache lessons in the app (issue 5), driven by Pilot on the real bundled model: memory,
the quadratic wall, verify, prefix reuse per turn, the context-full shift, and a fork."""

from __future__ import annotations

from tests.support.app import SIZE, make_app, prompt_for, reply_of, run_async, send, wait_for
from tests.support.app_cache import (
    SHIFT_TEXT,
    cache_text,
    open_tab,
    play_to_first_shift,
    shift_app,
    shown,
)
from tui.widgets.batch import BatchPane
from tui.widgets.cache import MemoryTab
from tui.widgets.memory import MemoryPane
from tui.widgets.pipeline import PipelinePane
from tui.widgets.quadratic import QuadraticPane

MESSAGE = "Write one sentence about the sea."


@run_async
async def test_memory_tab_shows_the_engines_bytes(make_engine, model, tmp_path):
    app = make_app(make_engine, tmp_path)
    eng = app.worker.engine
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await pilot.press("9")
        await wait_for(pilot, lambda: app.query_one(MemoryTab).report is not None, "the report")
        rep = app.query_one(MemoryTab).report
        n = len(prompt_for(model, MESSAGE))
        assert rep.used_cells == n
        assert rep.used_bytes == n * eng.layout.bytes_per_token
        assert rep.allocated_bytes == eng.n_cells * eng.layout.bytes_per_token
        assert rep.breakdown.bytes_per_token == eng.layout.bytes_per_token
        text = shown(app.query_one(MemoryPane))
        assert f"{n:,} of {eng.n_ctx:,} tokens" in text
        assert "9 query heads share 3 K/V heads" in text


@run_async
async def test_quadratic_counter_follows_the_run(make_engine, model, tmp_path):
    steps = 6
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        for _ in range(steps):
            await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == steps, "the steps")
        await pilot.press("0")
        p = len(prompt_for(model, MESSAGE))

        def drawn() -> bool:
            snap = app.query_one(QuadraticPane).snapshot
            return (
                snap is not None
                and snap.with_cache >= p + steps
                and "(every step" in cache_text(app)
            )

        await wait_for(pilot, drawn, "the counter for every step")
        snap = app.query_one(QuadraticPane).snapshot
        # With the cache: the prompt once, then one token per step. Without: every logits
        # row recomputes its whole context (p, p+1, ..., p+steps).
        assert snap.with_cache == p + steps
        assert snap.without_cache == sum(range(p, p + steps + 1))
        assert f"{snap.without_cache:,} (every step" in cache_text(app)


@run_async
async def test_verify_key_recomputes_and_top1_agrees(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await reply_of(pilot, app, 3)
        await pilot.press("v")
        await wait_for(pilot, lambda: app.view.cache.verify is not None, "the verify")
        res = app.view.cache.verify
        assert res.n_tokens == app.view.text.n_past
        assert res.top1_agree and res.top1_cached == app.view.logits.next_pick  # greedy: the argmax
        text = cache_text(app)
        assert f"max |Δ| {res.max_abs_diff:.3g}" in text
        assert "top-1 agrees" in text
        assert app.query_one("#tabs").current == "cache"
        # V replays the engine's own decode calls: the same kernels, so bit-identical logits.
        await pilot.press("V")
        await wait_for(pilot, lambda: app.view.cache.verify.mode == "replay", "the replay")
        assert app.view.cache.verify.max_abs_diff == 0.0
        assert "bit-identical" in cache_text(app)


@run_async
async def test_second_turn_reuses_the_prefix(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Say hi.", "enter")  # autoplay: the reply may end before a poll
        await wait_for(pilot, lambda: app.view and app.view.activity == "done", "the first reply")
        first_len = app.view.text.n_past
        await pilot.press(*"Again.", "enter")
        await wait_for(pilot, lambda: len(app.view.cache.turns) == 2, "the second turn")
        t1, t2 = app.view.cache.turns
        assert t1.reused == 0
        # Everything of turn one that the new prompt repeats came from the cache.
        assert 0 < t2.reused <= first_len
        assert t2.reused + t2.computed == app.view.text.reply_start  # the second prompt
        await open_tab(pilot, app, "0")
        # The tab redraws from the next view (heavy panes are throttled): wait for it.
        await wait_for(pilot, lambda: "Prefix reuse per turn" in cache_text(app), "the reuse table")


@run_async
async def test_no_prefix_cache_recomputes_everything(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, autoplay=True, prefix_cache=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Say hi.", "enter")  # autoplay: the reply may end before a poll
        await wait_for(pilot, lambda: app.view and app.view.activity == "done", "the first reply")
        await pilot.press(*"Again.", "enter")
        await wait_for(pilot, lambda: len(app.view.cache.turns) == 2, "the second turn")
        assert [t.reused for t in app.view.cache.turns] == [0, 0]


@run_async
async def test_context_shift_shows_what_was_forgotten(make_engine, model, tmp_path):
    app = shift_app(make_engine, tmp_path)
    engine = app.worker.engine
    async with app.run_test(size=SIZE) as pilot:
        await play_to_first_shift(pilot, app)
        ev = app.view.cache.shifts[0]
        prompt = engine.vocab.tokenize(SHIFT_TEXT, add_special=True)
        keep = 4 + int(engine.info.add_bos)  # --keep 4, plus BOS when the model adds one
        assert ev.n_keep == keep
        assert ev.n_discard == (48 - keep) // 2  # the oldest half of the rest
        # The forgotten tokens are those right after the kept ones, in order.
        assert [f.token for f in ev.forgotten][: len(prompt) - keep] == prompt[keep:]
        assert app.view.text.n_past <= 48
        # The prompt's tail was forgotten, so the reply now starts right after the kept tokens.
        assert app.view.text.reply_start == keep
        assert [sp.role for sp in app.view.text.spans] == ["prompt", "generated"]
        await open_tab(pilot, app, "0")
        await wait_for(pilot, lambda: "shift 1" in cache_text(app), "the shift in the cache tab")
        gone = b"".join(app.view.cache.shift_pieces[0]).decode()
        body = cache_text(app)
        assert "shift 1" in body and f"forgot {ev.n_discard}" in body
        assert gone.strip()[:10] in body


@run_async
async def test_fork_steps_two_sequences_in_one_batch(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        at = app.view.text.n_past
        await pilot.press("F")
        await wait_for(pilot, lambda: app.view.text.fork_at is not None, "the fork")
        for _ in range(3):
            await pilot.press("right")
        await wait_for(
            pilot, lambda: all(len(s.pieces) == 3 for s in app.view.text.seqs), "three fork steps"
        )
        assert [s.seq_id for s in app.view.text.seqs] == [0, 1]
        assert app.view.text.fork_at == at
        rec = app.view.batch.last_records[-1]
        assert sorted(t.seq_ids for t in rec.call.tokens) == [(0,), (1,)]
        # The pipeline reads the batch: one logits row per sequence, not "on the last".
        batch_fact = app.query_one(PipelinePane).facts(app.view)[1]
        assert "seqs 0,1" in batch_fact and "logits on 2 rows" in batch_fact
        # Shared prefix: the prompt's cells carry both seq_ids; each step added one per seq.
        shared = [c for c in app.view.kv.kv_cells if len(c[2]) == 2]
        assert len(shared) == at and len(app.view.kv.kv_cells) == at + 6
        body = cache_text(app)
        assert f"{at} KV cells are shared" in body and "seq 1:" in body
        await pilot.press("2")
        batch = app.query_one(BatchPane).view.batch.last_records[-1]
        assert {t.seq_ids for t in batch.call.tokens} == {(0,), (1,)}
