"""After a fork and after a context shift, the panes show what the engine holds (issue 5):
the text pane's columns, the per-sequence causal mask, the KV grid's forgotten tokens, and a
work counter that a new chat restarts. Driven by Pilot on the real bundled model."""

from __future__ import annotations

import dataclasses

import llama_cpp
import numpy as np
from llama_cpp import Llama
from rich.console import Console

from tests.support.app import SIZE, make_app, reply_of, run_async, send, wait_for
from tests.support.app_cache import cache_text, open_tab, play_to_first_shift, shift_app
from tests.support.forks import MESSAGE, STEPS, forked_app
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.widgets.kvcache import SHIFT_LINES, KVCachePane
from tui.widgets.mask import COLORS, CausalMaskPane, seq_mask_blocks, seq_mask_grid
from tui.widgets.text import ConversationPane
from tui.worker.views import SeqView


def rendered(renderable, width: int) -> str:
    con = Console(width=width, record=True, color_system=None)
    con.print(renderable)
    return con.export_text()


def detok(model_path, tokens: list[int]) -> str:
    """llama-cpp-python's own detokenizer: an oracle we did not write."""
    llm = Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    return llm.detokenize(tokens).decode("utf-8")


def causal_mask(cells) -> np.ndarray:
    """The per-sequence mask recomputed from the cells alone: row r sees cell c when they
    share a sequence and c's position is not after r's."""
    pos = np.array([c[1] for c in cells])
    seqs = [set(c[2]) for c in cells]
    share = np.array([[bool(a & b) for b in seqs] for a in seqs])
    return share & (pos[None, :] <= pos[:, None])


@run_async
async def test_text_pane_shows_each_sequence_in_its_own_column(make_engine, model_path, tmp_path):
    app = make_app(make_engine, tmp_path, SamplerSettings(temp=1.0, seed=4))
    eng = app.worker.engine
    async with app.run_test(size=SIZE) as pilot:
        await forked_app(pilot, app)
        pane = app.query_one(ConversationPane)
        await wait_for(pilot, lambda: pane.view is app.view and pane.columns, "the columns")
        v = app.view
        shared = eng.kv.shared(0, 1)
        assert shared == v.text.fork_at
        texts = {}
        for sv in v.text.seqs:
            mine = eng.kv.tokens(sv.seq_id)
            assert len(mine) == shared + STEPS == sv.n_tokens
            texts[sv.seq_id] = detok(model_path, mine[shared:])
            assert pane.columns[sv.seq_id] == texts[sv.seq_id]
            assert f"seq {sv.seq_id} · KV {sv.n_tokens} · generating" in pane.plain
        assert texts[0] != texts[1]  # two samplers, two continuations
        # The shared context is drawn once, above the columns.
        assert pane.plain.count(MESSAGE) == 1
        assert f"the {shared} tokens above are KV cells shared by sequences 0, 1" in pane.plain
        # Side by side: both headers on one line of the drawn pane.
        screen = rendered(pane.render_view(v, pane.build(v)), pane.size.width)
        assert any("seq 0 ·" in line and "seq 1 ·" in line for line in screen.splitlines())

        # A character split across the fork point: the shared text holds its first bytes,
        # each column completes it (as the one-sequence pane completes it at the next token).
        euro = "€".encode()
        pieces = v.text.pieces
        split_text = dataclasses.replace(
            v.text,
            pieces=(*pieces[: shared - 1], pieces[shared - 1] + euro[:2], *pieces[shared:]),
            seqs=tuple(
                SeqView(sv.seq_id, (euro[2:] + b"!", *sv.pieces[1:]), sv.n_tokens, None)
                for sv in v.text.seqs
            ),
        )
        split = dataclasses.replace(v, text=split_text)
        text = pane.build(split)
        pane.render_view(split, text)
        assert "€" not in text.plain and "⋯" in text.plain
        assert all(col.startswith("€!") for col in pane.columns.values())


@run_async
async def test_mask_is_per_sequence_after_a_fork(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, SamplerSettings(temp=1.0, seed=4))
    eng = app.worker.engine
    async with app.run_test(size=SIZE) as pilot:
        await forked_app(pilot, app)
        await open_tab(pilot, app, "5")
        mask = app.query_one(CausalMaskPane)
        await wait_for(pilot, lambda: mask.view is app.view and mask.grid is not None, "the mask")
        v = app.view
        cells = v.kv.kv_cells
        assert mask.n_rows == len(cells) == eng.kv.used
        assert mask.factor == 1 and mask.older == 0, "the test wants a pixel per (query, key)"
        want = causal_mask(cells)
        got = np.array(
            [
                [mask._pixel(r, c).removesuffix("_lit") == "visible" for c in range(len(cells))]
                for r in range(len(cells))
            ]
        )
        assert np.array_equal(got, want)
        # The engine's own mask for the rows of the last decode (one token per sequence).
        batch = [(t.seq_ids[0], t.pos) for t in v.batch.last_records[-1].call.tokens]
        assert np.array_equal(eng.kv.mask(batch), want[-2:])
        # Seq 1's newest token: the shared prefix yes, seq 0's cells after the fork never.
        r = max(i for i, c in enumerate(cells) if c[2] == (1,))
        for c, (_, _, seqs) in enumerate(cells):
            state = mask._pixel(r, c)
            if seqs == (0, 1):
                assert state.startswith("visible")
            elif seqs == (0,):
                assert state.startswith("masked")
        assert mask._pixel(r, r).endswith("_lit")  # the last decode computed this row
        assert_lines_follow_pixels(mask)
        assert "seq 1" in str(mask.border_title) and "own sequence" in str(mask.border_subtitle)
        # More cells than the pane is wide (a fake layout on the real pane): the newest cells
        # keep a column each, the first column stands for the older ones.
        cells = fork_layout(shared=150, steps=120)
        mask.show(
            dataclasses.replace(
                v,
                kv=dataclasses.replace(v.kv, kv_cells=tuple(cells)),
                batch=dataclasses.replace(v.batch, new_cells=(0, 0)),
            )
        )
        await pilot.pause()
        n, w = len(cells), mask.n_cols
        assert mask.factor == 1 and mask.older == n - w + 1 > 0
        assert f"first column: the {mask.older:,} oldest cells" in str(mask.border_subtitle)
        full = causal_mask(cells)
        for r in range(n):
            for j in range(w):
                a, b = (0, mask.older) if j == 0 else (mask.older + j - 1, mask.older + j)
                blk = full[r, a:b]
                want = "visible" if blk.all() else "masked" if not blk.any() else "partial"
                assert mask._pixel(r, j) == want
        assert_lines_follow_pixels(mask)


def assert_lines_follow_pixels(mask: CausalMaskPane) -> None:
    """Each drawn line (runs of one style) says, character by character, what ``_pixel``
    says of its two block rows: masked pixels dark, visible/partial ones coloured."""
    for row in range(mask.count_rows()):
        segs = mask.build_row(row, 200)[3 if mask.per_seq else 1 :]  # after the label
        chars = [(ch, seg.style) for seg in segs for ch in seg.text]
        assert len(chars) == mask.n_cols
        for c, (ch, style) in enumerate(chars):
            up, down = mask._pixel(2 * row, c), mask._pixel(2 * row + 1, c)
            assert (ch == " ") == (up == "none")
            assert (style.color is None) == (up == "none")
            assert (style.bgcolor is None) == (down == "none")
            for state, color in ((up, style.color), (down, style.bgcolor)):
                if state.startswith("masked") or state.endswith("_lit"):
                    assert color == COLORS[state]


def fork_layout(shared: int, steps: int, seed: int = 1) -> list[tuple[int, int, tuple]]:
    """Cells as a fork leaves them: a shared prefix, then each step one cell per sequence
    (sometimes only one of them)."""
    rng = np.random.default_rng(seed)
    cells = [(0, p, (0, 1)) for p in range(shared)]
    for j in range(steps):
        for s in (0, 1):
            if rng.random() < 0.8:
                cells.append((0, shared + j, (s,)))
    return cells


def test_downsampled_mask_blocks_match_the_full_mask():
    """Pure rule (a fake layout of cells): when one pane cell stands for f×f (query, key)
    pairs, it is visible only if all are, masked only if none is."""
    rng = np.random.default_rng(1)
    shared = 37
    pos = list(range(shared))
    seqs = [(0, 1)] * shared
    for j in range(50):
        for s in (0, 1):
            if rng.random() < 0.8:
                pos.append(shared + j)
                seqs.append((s,))
    cells = [(0, p, s) for p, s in zip(pos, seqs, strict=True)]
    full = causal_mask(cells)
    bits = np.array([sum(1 << q for q in s) for s in seqs])
    for f in (1, 2, 5, 9):
        grid = seq_mask_grid(np.array(pos), bits, f)
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                blk = full[i * f : (i + 1) * f, j * f : (j + 1) * f]
                assert grid[i, j] == (2 if blk.all() else 0 if not blk.any() else 1)
    # The pane's layout after a fork when the cells outnumber its columns: the first column
    # stands for the oldest cells, the newest have a column each.
    n = len(pos)
    cols = np.concatenate(([0], np.arange(n - 30, n)))
    grid = seq_mask_blocks(np.array(pos), bits, np.arange(n), cols)
    ends = [*cols[1:], n]
    for r in range(n):
        for j, (a, b) in enumerate(zip(cols, ends, strict=True)):
            blk = full[r, a:b]
            assert grid[r, j] == (2 if blk.all() else 0 if not blk.any() else 1)


@run_async
async def test_kv_grid_and_text_mark_the_forgotten_tokens(make_engine, model_path, tmp_path):
    app = shift_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await play_to_first_shift(pilot, app)
        await wait_for(pilot, lambda: app.view.mode == "step", "the pause")
        await open_tab(pilot, app, "4")
        kv = app.query_one(KVCachePane)
        await wait_for(pilot, lambda: kv.view is app.view, "the KV pane")
        v = app.view
        ev = v.cache.shifts[-1]
        n_gone = sum(len(e.forgotten) for e in v.cache.shifts)
        assert n_gone == sum(e.n_discard for e in v.cache.shifts)  # one sequence: the whole window
        assert kv.legend_rows == 1 + min(len(v.cache.shifts), SHIFT_LINES)
        head = "".join(s.text for s in kv.build_row(0, 120))
        assert f"{n_gone} tokens forgotten · {len(v.cache.shifts)} shift" in head
        line = "".join(s.text for s in kv.build_row(kv.legend_rows - 1, 120))
        gone = detok(model_path, [f.token for f in ev.forgotten])
        assert f"shift {ev.index + 1}: forgot {ev.n_discard} after cell {ev.n_keep}" in line
        assert gone.replace("\n", "↵")[:30] in line
        # The seam: the cell now at position n_keep is drawn as the gap's edge, and only it.
        grid = "".join(
            s.text
            for r in range(kv.legend_rows, kv.count_rows())
            for s in kv.build_row(r, 120)
            if not s.text.strip().isdigit()
        )
        seam_cells = [i for i, c in enumerate(v.kv.kv_cells) if c[1] == ev.n_keep]
        assert len(seam_cells) == 1 and grid.count("▐") == 1
        # The text pane: the kept tokens, the gap, then the rest.
        pane = app.query_one(ConversationPane)
        await wait_for(pilot, lambda: pane.view is app.view, "the text pane")
        before, marker, after = pane.plain.partition(" ⟪")
        assert marker and f"{n_gone} tokens forgotten" in after
        assert before == detok(model_path, list(v.text.tokens[: ev.n_keep]))
        rest = detok(model_path, list(v.text.tokens[ev.n_keep :]))
        assert after.split("⟫ ", 1)[1].startswith(rest[:20])
        # One sequence: the plain triangle, drawn in runs.
        await open_tab(pilot, app, "5")
        mask = app.query_one(CausalMaskPane)
        await wait_for(pilot, lambda: mask.view is app.view, "the mask")
        assert not mask.per_seq and mask.n_rows == v.text.n_past
        assert_lines_follow_pixels(mask)


@run_async
async def test_new_chat_restarts_the_work_counter(make_engine, model, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await reply_of(pilot, app, 3)
        assert app.view.cache.work.with_cache > 0
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: app.view.action == "new", "the new chat")
        assert app.view.cache.work.with_cache == app.view.cache.work.without_cache == 0
        await open_tab(pilot, app, "0")
        await wait_for(pilot, lambda: "token-forward passes" in cache_text(app), "the counter")
        assert "           0 token-forward passes" in cache_text(app)
        await send(pilot, app, "Hi")
        n = app.view.text.n_past  # the new prompt, computed from scratch
        await wait_for(pilot, lambda: f"{n:>12,} token-forward" in cache_text(app), "the prefill")
        assert app.view.cache.work.with_cache == n


@run_async
async def test_forked_shift_in_the_app_keeps_both_sequences(make_engine, model_path, tmp_path):
    """-c 64 --context-full shift, then a fork: when the context fills, one shift makes room
    in both sequences; the KV grid counts what each forgot and llama.cpp agrees per seq."""
    engine = make_engine(
        SamplerSettings(temp=1.0, seed=3), n_ctx=64, context_full="shift", n_keep=4
    )
    app = TokenstepApp(
        engine, raw=True, autoplay=False, autosave_dir=tmp_path / "a", close_engine=False
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Here is a long list of random English words, one per line:", "enter")
        await wait_for(
            pilot, lambda: app.view is not None and app.view.activity == "generating", "the prefill"
        )
        if app.focused is not None and app.focused.id == "chat":
            await pilot.press("escape")
        await pilot.press("F")
        await wait_for(pilot, lambda: app.view.text.fork_at is not None, "the fork")
        while not app.view.cache.shifts and app.view.activity == "generating":
            n = app.view.header.n_records
            await pilot.press("right")
            await wait_for(
                pilot,
                lambda n=n: app.view.header.n_records > n or app.view.activity != "generating",
                "a step",
            )
        v = app.view
        assert v.cache.shifts, f"no shift: {v.stop_reason}"
        ev = v.cache.shifts[0]
        assert set(ev.by_seq) == {0, 1} and not v.kv.kv_problems
        assert "Context full: shifted" in v.notice and f"forgot {ev.n_discard}" in v.notice
        live = [sv for sv in v.text.seqs if sv.stop_reason is None]
        assert live and all(sv.n_tokens == 64 - ev.n_discard + 1 for sv in live)  # fed after
        mem = llama_cpp.llama_get_memory(engine.ctx)
        for sv in v.text.seqs:
            pos = engine.kv.positions(sv.seq_id)
            assert pos == list(range(sv.n_tokens))
            assert llama_cpp.llama_memory_seq_pos_max(mem, sv.seq_id) == pos[-1]
        await open_tab(pilot, app, "4")
        kv = app.query_one(KVCachePane)
        await wait_for(pilot, lambda: kv.view is app.view, "the KV pane")
        line = "".join(s.text for s in kv.build_row(1, 120))
        assert (
            f"forgot {len(ev.by_seq[0])}, seq 1: {len(ev.by_seq[1])} after cell {ev.n_keep}" in line
        )
        # The text pane: each column strikes what the shift took from it, then the rest.
        pane = app.query_one(ConversationPane)
        await wait_for(pilot, lambda: pane.view is app.view and pane.columns, "the columns")
        shared = engine.kv.shared(0, 1)
        for sv in v.text.seqs:
            gone = len(sv.pieces) - (sv.n_tokens - shared)
            col = pane.columns[sv.seq_id]
            assert (f" ⟪{gone} forgotten⟫ " in col) == (gone > 0)
            assert col.endswith(detok(model_path, engine.kv.tokens(sv.seq_id)[shared:]))
        # The fork came before the window: the live columns lost tokens too.
        assert all(len(sv.pieces) > sv.n_tokens - shared for sv in live)
