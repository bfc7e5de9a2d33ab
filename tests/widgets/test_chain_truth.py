"""Issue 24: the logits pane tells the truth about the chain.

- The logit each stage handed on (penalties, DRY, logit bias) is llama.cpp's own penalties
  sampler's output on the same logits and history, and with it "cut by" never contradicts a
  row: every survivor's logit′ is at least every row top-k, top-p or min-p cut.
- With a grammar, the preview names the token the next step picks, over several steps; the
  cut-by column spells the stage out; the chain line counts what the grammar left.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from tests.support.app import SIZE, make_app, run_async, send, wait_for
from tui.engine import SamplerSettings
from tui.engine.sampler.sampling import TOKEN_DATA
from tui.widgets.logits import LogitsPane

YES_NO = 'root ::= "yes" | "no"'


def _oracle_penalties(eng, s: SamplerSettings) -> np.ndarray:
    """llama.cpp's penalties sampler, fed the context's tokens, applied to the raw row."""
    n = eng.info.n_vocab
    smpl = llama_cpp.llama_sampler_init_penalties(
        n, s.repeat_last_n, s.repeat_penalty, s.frequency_penalty, s.presence_penalty
    )
    try:
        for t in eng.tokens:
            llama_cpp.llama_sampler_accept(smpl, t)
        buf = np.zeros(n, dtype=TOKEN_DATA)
        buf["id"], buf["logit"] = np.arange(n), eng.logits
        arr = llama_cpp.llama_token_data_array()
        arr.data = ctypes.cast(buf.ctypes.data, llama_cpp.llama_token_data_p)
        arr.size, arr.selected, arr.sorted = n, -1, False
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
        out = np.empty(n, dtype=np.float32)
        out[buf["id"]] = buf["logit"]
        return out
    finally:
        llama_cpp.llama_sampler_free(smpl)


def _no_contradiction(rows) -> None:
    """Top-k, top-p and min-p keep the highest logits: no row they cut stands above a
    survivor in the column the pane shows."""
    kept = [c.logit_moved for c in rows if c.cut_by is None]
    for c in rows:
        if c.cut_by in ("top-k", "top-p", "min-p"):
            assert c.logit_moved <= min(kept) + 1e-4, (c, min(kept))


@run_async
async def test_logit_handed_on_is_llama_cpps_penalties(make_engine, tmp_path):
    settings = SamplerSettings(
        temp=0.8, seed=5, repeat_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.1
    )
    app = make_app(make_engine, tmp_path, settings)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "The cat sat on the mat. The cat sat on the")
        moved = 0
        for _ in range(4):
            v = app.view
            eng = app.worker.engine
            want = _oracle_penalties(eng, v.settings)
            rows = v.logits.candidates
            assert all(c.logit_moved is not None for c in rows)
            got = np.array([c.logit_moved for c in rows], dtype=np.float32)
            assert np.allclose(got, want[[c.id for c in rows]], atol=1e-5)
            moved += sum(c.logit_moved != c.logit for c in rows)
            _no_contradiction(rows)
            assert any(c.id == v.logits.next_pick for c in rows)  # the ★ stands on a row
            # the pane draws the column
            pane = app.query_one(LogitsPane)
            assert "logit′" in pane.render().plain
            n = v.header.n_records
            await pilot.press("right")
            await wait_for(pilot, lambda n=n: app.view.header.n_records > n, "a step")
        assert moved  # the penalties moved some shown row's logit


@run_async
async def test_grammar_preview_names_the_next_pick(make_engine, tmp_path):
    settings = SamplerSettings(temp=1.0, seed=11, grammar=YES_NO)
    app = make_app(make_engine, tmp_path, settings)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Is the sea salty? Answer yes or no.")
        pane = app.query_one(LogitsPane)
        eng = app.worker.engine
        if app.focused is not None and app.focused.id == "chat":
            await pilot.press("escape")
        row = pane.highlighted  # the top raw candidate: the grammar forbids it
        assert row is not None and row.cut_by == "grammar"
        await pilot.press("f")
        await wait_for(pilot, lambda: "breaks the grammar" in app.view.notice, "the refusal")
        assert f"(id {row.id}) breaks the grammar" in app.view.notice
        assert f"'{row.piece.decode().replace(' ', '␣')}' (id" in app.view.notice
        for _ in range(3):
            v = app.view
            if v.activity != "generating":
                break
            nxt = v.logits.next_pick
            text = pane.render().plain
            line = next(ln for ln in text.splitlines() if ln.startswith("next "))
            assert "∅" not in line
            assert v.logits.next_piece == eng.vocab.piece(nxt)
            assert any(c.id == nxt for c in v.logits.candidates)
            # the chain line: no stage after the grammar keeps more than the grammar left
            counts = v.logits.chain.shown_counts()
            assert v.logits.chain.stages[0].key == "grammar"
            assert max(counts[1:]) <= counts[0]
            chain_text = " ".join(text.splitlines()[1:4])
            assert f"→top-k {counts[0]:,}" not in chain_text or counts[1] <= counts[0]
            # the cut-by column spells the stage out
            cut = [ln for ln in text.splitlines() if "grammar" in ln and "gramma" in ln]
            assert cut and not any(ln.rstrip().endswith("gramma") for ln in text.splitlines())
            n = len(eng.tokens)
            await pilot.press("right")
            await wait_for(
                pilot,
                lambda n=n: len(eng.tokens) > n or app.view.activity != "generating",
                "a step",
            )
            if app.view.activity == "generating" or len(eng.tokens) > n:
                assert eng.tokens[-1] == nxt  # → picked what the preview named


@run_async
async def test_at_a_replys_end_the_pane_shows_the_chain_that_picked_the_end_token(
    make_engine, tmp_path
):
    """The end token is not fed, so its logits row stays on screen: the pane's ★ and p′ are
    that pick's (stage 5's), not a fresh preview on an RNG the pick already advanced. Seed 42
    with this grammar re-previews a ',' that breaks the grammar, so a preview's p′ of the end
    token (1.000 after grammar-first) contradicted the pipeline's 0.241."""
    grammar = 'root ::= " yes" | " no"'
    app = make_app(make_engine, tmp_path, SamplerSettings(seed=42, grammar=grammar), autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Is the sky blue? Answer yes or no.")
        await pilot.press("enter")  # the reply is two tokens: it may end before a poll sees it
        await wait_for(
            pilot, lambda: app.view is not None and app.view.activity == "done", "the reply"
        )
        v = app.view
        pick = v.text.last_pick
        assert pick is not None and pick.eog
        assert v.logits.next_pick == pick.id  # the ★ is the token that ended the reply
        row = next(c for c in v.logits.candidates if c.id == pick.id)
        assert abs(row.p_final - pick.p_final) < 1e-6, (row, pick)
        await pilot.press("escape")
        await pilot.press("t")  # a sampler key on the same logits: a preview again
        await wait_for(pilot, lambda: app.view.logits.chain is not v.logits.chain, "a preview")
