"""--spec-type, step mode: `.` replays the last round's stages (draft, verify batch, accept, cut)
from its record without decoding again, and the KV grid marks the cells the verify wrote and
llama_memory_seq_rm cut."""

from __future__ import annotations

import pytest

from tests.support.app import run_async
from tests.support.spec import LIST_X4
from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.model.tokens import quoted
from tui.engine.speculative.spec_draft import DraftSimple
from tui.engine.speculative.spec_ngram import NgramSimple
from tui.engine.speculative.spec_verify import NgramDrafter, Speculator
from tui.worker import commands as c
from tui.worker.spec_run import SpecRun
from tui.worker.stages import BATCH, DECODE, DETOKENIZE, FEED_BACK, LOGITS, SAMPLE
from tui.worker.thread import Worker


def make_worker(model, drafter):
    eng = Engine(model, EngineConfig(n_ctx=1024, n_threads=2), SamplerSettings(greedy=True))
    w = Worker(eng, raw=True, autoplay=False, autosave_dir=None, close_engine=False)
    w.spec = SpecRun(Speculator(drafter))
    return w, eng


@pytest.fixture
def worker(model):
    w, eng = make_worker(model, NgramDrafter(NgramSimple(3, 8)))
    yield w
    w.stop()
    eng.close()


def step_to_a_rejection(w: Worker, limit: int = 16):
    """Step rounds until one rejected part of its draft; its record and the cells before it."""
    w.handle(c.Send(LIST_X4))
    for _ in range(limit):
        before = w.engine.kv.used
        w.handle(c.Step())
        rec = w.state.last_records[-1]
        sp = rec.spec
        if sp is not None and sp.draft and sp.accepted < len(sp.draft):
            return rec, before
    pytest.fail("no round rejected part of its draft")


def test_the_stages_replay_the_round_in_order_without_a_decode(worker):
    w = worker
    rec, _ = step_to_a_rejection(w)
    sp = rec.spec
    piece = w.engine.vocab.piece
    records, tokens = len(w.engine.records), list(w.engine.tokens)
    notices, lit = [], []
    for _ in range(5):
        w.handle(c.SpecStage())
        notices.append(w.state.notice)
        lit.append(w.state.lit)
    assert len(w.engine.records) == records and w.engine.tokens == tokens  # nothing decoded
    assert [n.split(" · ")[0] for n in notices] == [
        "Round stage 1/4",
        "Round stage 2/4",
        "Round stage 3/4",
        "Round stage 4/4",
        "Round stage 1/4",  # after the fourth, the first again
    ]
    draft, verify, accept, cut = notices[:4]
    # 1 the draft: its tokens, copied from the context where ngram-simple found them
    assert sp.source is not None
    assert w.engine.tokens[sp.source : sp.source + len(sp.draft)] == sp.draft
    assert f"{len(sp.draft)} token(s) {quoted(piece(sp.draft[0]), sp.draft[0])}" in draft
    assert f"context tokens {sp.source}–{sp.source + len(sp.draft) - 1}" in draft
    # 2 the verify batch: k + 1 rows, logits on all of them, the decode's own ms
    toks = rec.call.tokens
    assert len(toks) == len(sp.draft) + 1
    assert f"ONE llama_decode of {len(toks)} tokens" in verify
    assert f"logits on {len(toks)} of {len(toks)} rows, {rec.decode_ms:.2f} ms" in verify
    assert f"pos {toks[0].pos}–{toks[-1].pos}" in verify
    # 3 the accept: row by row up to the first mismatch
    a = sp.accepted
    for i in range(a):
        assert f"row {i} picks {quoted(piece(sp.picks[i]), sp.picks[i])} = draft ✓" in accept
    assert (
        f"row {a} picks {quoted(piece(sp.picks[a]), sp.picks[a])} ≠ draft "
        f"{quoted(piece(sp.draft[a]), sp.draft[a])} ✗ first mismatch"
    ) in accept
    assert f"row {a + 1} " not in accept
    # 4 the cut: the rejected rows' positions, as many cells as the record says were removed
    gone = toks[len(sp.picks) :]
    assert sp.removed == len(gone) > 0
    assert f"llama_memory_seq_rm(seq 0, {gone[0].pos}, -1) removed {sp.removed} cell(s)" in cut
    assert "ngram-simple has no cache of its own" in cut
    assert w.engine.kv.last_pos(0) == gone[0].pos - 1  # the cache ends right before them
    # the pipeline pane lights each stage's part of the loop
    assert lit[:4] == [(), (BATCH, DECODE, LOGITS), (SAMPLE, DETOKENIZE), (FEED_BACK,)]
    # a new round starts the replay over
    w.handle(c.Step())
    w.handle(c.SpecStage())
    assert w.state.notice.startswith("Round stage 1/4") or "drafted nothing" in w.state.notice


def test_the_view_after_a_round_carries_the_cut_cells(worker):
    w = worker
    rec, before = step_to_a_rejection(w)
    v = w.build_view()
    used = w.engine.kv.used
    assert v.batch.new_cells == (before, used)
    assert v.batch.cut_cells == (used, used + rec.spec.removed)
    assert used + rec.spec.removed == before + len(rec.call.tokens)  # the verify wrote k + 1
    w.handle(c.SpecStage())  # a replay keeps them
    assert w.build_view().batch.cut_cells == (used, used + rec.spec.removed)
    w.handle(c.Verify("batched"))  # the next command that decodes forgets them
    assert w.build_view().batch.cut_cells == (0, 0)


def test_without_a_round_the_key_says_so(worker):
    w = worker
    w.handle(c.SpecStage())
    assert w.state.notice.startswith("No round yet")


def test_the_draft_models_stages_say_what_it_decoded_and_cut(worker, draft_model_path):
    """draft-simple: stage 1 counts the draft model's own decodes, stage 4 the cells its cache
    cut to follow the target (k - 1 drafted tokens were fed there, a + 1 of the round kept)."""
    w = worker
    spec = Speculator(DraftSimple(w.engine, draft_model_path, n_max=3))
    w.spec = SpecRun(spec)
    try:
        rec, _ = step_to_a_rejection(w, limit=40)
        sp = rec.spec
        w.handle(c.SpecStage())
        draft = w.state.notice
        for _ in range(3):
            w.handle(c.SpecStage())
        cut = w.state.notice
        assert sp.source is None and sp.draft_decodes > 0
        assert f"draft model in {sp.draft_decodes} llama_decode call(s)" in draft
        assert f"{sp.draft_ms:.2f} ms" in draft
        assert spec.drafter.engine.kv.used == w.engine.n_past  # the draft cache followed
        if len(sp.draft) == 3:  # the draft ran to n_max: its first k - 1 tokens were fed
            assert sp.draft_removed == len(sp.draft) - 1 - sp.accepted
        assert f"the draft model's cache cut {sp.draft_removed} cell(s)" in cut
    finally:
        spec.close()


@run_async
async def test_the_app_replays_a_round_and_marks_the_cut_cells(make_engine, tmp_path):
    """In the app: `.` puts each stage in the notice; the KV grid draws ✕ on the cut cells
    with a legend line counting them."""
    from tests.support.app import SIZE, make_app, send, wait_for
    from tui.widgets.kvcache import KVCachePane

    app = make_app(make_engine, tmp_path, raw=True)
    app.worker.spec = SpecRun(Speculator(NgramDrafter(NgramSimple(3, 8))))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, LIST_X4)
        await pilot.press("4")
        grid = app.query_one(KVCachePane)
        for _ in range(16):
            n = len(app.worker.engine.records)
            await pilot.press("right")
            await wait_for(
                pilot,
                lambda n=n: (
                    grid.view is not None
                    and len(grid.view.batch.last_records) == 1
                    and grid.view.batch.last_records[0].index == n
                ),
                "a round drawn",
            )
            a, b = grid.view.batch.cut_cells
            if b > a:
                break
        else:
            pytest.fail("no round cut a cell")
        legend = "".join(s.text for s in grid.build_row(grid.legend_rows - 1, 80))
        new = grid.view.batch.new_cells
        assert f"verify wrote {new[1] - new[0] + b - a} cells: {new[1] - new[0]} kept" in legend
        assert f"{b - a} rejected, cut by llama_memory_seq_rm" in legend
        drawn = "".join(
            "".join(s.text for s in grid.build_row(r, 80)[1:])
            for r in range(grid.legend_rows, grid.count_rows())
        )
        assert drawn[a:b] == "✕" * (b - a) and drawn[b] == "·" and drawn[a - 1] != "✕"
        from tui.widgets.keybar import KeyBar

        await pilot.press("escape")  # the controls' bar (the chat box has its own)
        bar = app.query_one(KeyBar)
        await wait_for(pilot, lambda: ". stages" in str(bar.render()), "the . chip on the bar")
        await pilot.press("full_stop")
        await wait_for(
            pilot,
            lambda: app.worker.state.notice.startswith("Round stage 1/4 · draft"),
            "stage 1 in the notice",
        )
        await pilot.press("full_stop")
        await wait_for(
            pilot,
            lambda: app.worker.state.notice.startswith("Round stage 2/4 · verify batch"),
            "stage 2 in the notice",
        )
