"""The confusions a new user met, each resolved on screen: checked on the real model."""

from __future__ import annotations

import numpy as np

from tests.support.app import make_app, run_async, send, wait_for
from tui.engine import SamplerSettings
from tui.widgets.logits import LogitsPane
from tui.widgets.pipeline import PipelinePane

SIZE = (120, 40)


def test_the_top_p_cut_can_be_checked_from_what_top_p_saw(make_engine):
    """p|k is the softmax over top-k's survivors; its running sum crosses top-p exactly where
    llama.cpp's own top-p stage stopped keeping candidates."""
    from tui.worker import Worker
    from tui.worker.commands import Send

    # top-k 16 (the pane's 16 rows): top-p's cut then always lies among the rows shown, on
    # any CPU. With top-k 20, an AVX2 build's slightly flatter logits put it at row 17.
    eng = make_engine(SamplerSettings(temp=0.8, top_k=16, top_p=0.95, min_p=0.0))
    w = Worker(eng, autoplay=False, autosave_dir=None, close_engine=False)
    w.handle(Send("Name a colour."))
    v = w.build_view()
    chain = v.logits.chain
    names = [st.name for st in chain.stages]
    k_left = chain.stages[names.index("top-k")].survivors
    p_left = chain.stages[names.index("top-p")].n
    logits = np.asarray(eng.logits, dtype=np.float64)
    x = logits[k_left]
    want = np.exp(x - x.max()) / np.exp(x - x.max()).sum()  # NumPy, not our code
    got = {c.id: c.p_seen for c in v.logits.candidates}
    for t, p in zip(k_left.tolist(), want.tolist(), strict=True):
        if t in got:
            assert abs(got[t] - p) < 1e-6
    order = np.sort(want)[::-1]
    kept = int(np.searchsorted(np.cumsum(order), 0.95) + 1)  # smallest set reaching 0.95
    assert kept == p_left
    rows = v.logits.candidates
    cum = np.cumsum([c.p_seen for c in rows[:kept]])
    assert cum[-1] >= 0.95 - 1e-6 and (kept == 1 or cum[-2] < 0.95)


@run_async
async def test_top_k_stops_at_1_off_is_past_200_and_the_p_toggle_names_its_columns(
    make_engine, tmp_path
):
    settings = SamplerSettings(temp=0.8, top_k=2, top_p=0.95, min_p=0.05)
    app = make_app(make_engine, tmp_path, settings=settings)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name a colour.")
        if app.focused is not None and app.focused.id == "chat":
            await pilot.press("escape")
        await pilot.press("k", "k", "k")
        await wait_for(pilot, lambda: app.view.settings.top_k == 1, "top-k 1")
        assert app.view.logits.chain.stages[0].n == 1  # still on: one candidate
        for _ in range(12):
            await pilot.press("K")
        await wait_for(pilot, lambda: app.view.settings.top_k == 0, "top-k off")
        await pilot.press("k")
        await wait_for(pilot, lambda: app.view.settings.top_k == 200, "back to 200")
        pane = app.query_one(LogitsPane)
        await pilot.press("percent_sign")
        assert pane.seen and "Σp|k" in pane._head(60).plain
        assert "top-p keeps rows until" in str(pane.border_subtitle)
        await pilot.press("percent_sign")
        assert not pane.seen and "p′" in pane._head(60).plain


@run_async
async def test_pipeline_rows_say_which_step_they_belong_to(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name a colour.")
        if app.focused is not None and app.focused.id == "chat":
            await pilot.press("escape")
        n = app.view.text.n_past
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.n_past == n + 1, "one step")
        facts = app.query_one(PipelinePane).facts(app.view)
        assert facts[4].startswith(f"this step, pos {n} ")
        assert facts[3].startswith(f"for pos {n + 1}, the next step ")


def test_verify_explains_the_case_it_measured(make_engine):
    eng = make_engine()
    eng.prefill(eng.vocab.tokenize("The sea is wide and the sky is", add_special=True))
    for _ in range(3):
        eng.step()
    res = eng.verify_last("batched")
    first, *steps = res.cached_calls
    assert first > 1 and steps and set(steps) == {1} and sum(res.cached_calls) == len(eng.tokens)
    # The words for a nonzero difference (here the batched recomputation may even be exact).
    from dataclasses import replace

    assert f"{len(steps)} of them one-token steps" in replace(res, max_abs_diff=0.448).explain()
    # After the whole context was prefilled again in one batch (as `a` does), no step is blamed.
    eng.sync_prompt(list(eng.tokens), reuse=False)
    res = eng.verify_last("batched")
    assert res.cached_calls == (len(eng.tokens),)
    text = replace(res, max_abs_diff=0.448).explain()
    assert "0 of them one-token steps" in text and "no one-token steps" in text
    assert "one per llama_decode" not in text
