"""The Attention tab in the app, driven by Pilot on the real bundled model.

The oracle for the weights is a second engine with its own capture that prefills the same
tokens: the pane must show exactly what llama.cpp's ``kq_soft_max`` node held there."""

from __future__ import annotations

import numpy as np

from tests.support.app import SIZE, make_app, run_async, wait_for
from tui.args import build_parsers
from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.observe.attention_capture import AttentionCapture, find_capture
from tui.trace_cli import engine_from_args
from tui.widgets.attention_tabs import AnatomyTab, AttentionTab
from tui.worker.session_store import read_session

SENTENCE = "The cat sat on the mat because it was tired."


def _oracle(model, tokens: list[int], layer: int) -> np.ndarray:
    """(n_head, n, n) weights of ``layer`` from a fresh engine that prefills ``tokens``."""
    cap = AttentionCapture(model.info.n_layer, [layer])
    with Engine(model, EngineConfig(n_ctx=512), SamplerSettings(temp=0.0), [cap]) as eng:
        recs = eng.prefill(tokens)
        assert len(recs) == 1
        return np.asarray(recs[0].extras["attention"][layer])


@run_async
async def test_attention_tab_shows_real_rows_and_follows_layer_and_head(
    make_engine, model, tmp_path
):
    app = make_app(make_engine, tmp_path, raw=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*SENTENCE, "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.n_past > 0, "prefill")
        pane = app.query_one(AttentionTab)
        fa = app.worker.engine.flash_attn_resolved
        await pilot.press("a")  # an observer context of its own replays the run
        await wait_for(pilot, lambda: pane.att is not None, "the attention matrix")
        assert app.worker.observers.engine.flash_attn_resolved == "off"
        assert app.view.header.flash_attn == app.worker.engine.flash_attn_resolved == fa
        tokens = list(app.view.text.tokens)
        att = pane.att
        assert att is not None and att.layer == 0 and pane.head is None
        assert att.captured.all() and len(att.positions) == len(tokens)
        mean = att.head(None)
        np.testing.assert_allclose(np.nansum(mean, axis=1), 1.0, atol=1e-3)
        np.testing.assert_allclose(att.weights, _oracle(model, tokens, 0), atol=1e-5)
        assert np.all(np.triu(mean, 1) == 0)  # the causal mask, in the data itself

        # ] asks for layer 1: the worker prefills the same tokens again to capture it.
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: pane.att is not None and pane.att.layer == 1, "layer 1")
        w1 = pane.att.weights
        np.testing.assert_allclose(w1, _oracle(model, tokens, 1), atol=1e-5)
        assert not np.allclose(w1, att.weights, atol=1e-3)

        # → picks head 0 (from the mean): the drawn matrix becomes that head's weights.
        await pilot.press("right")
        await wait_for(pilot, lambda: pane.head == 0, "head 0")
        drawn = np.stack([pane.row_weights(i) for i in range(pane.n_rows)])
        np.testing.assert_allclose(drawn, w1[0])
        assert not np.allclose(drawn, w1.mean(axis=0), atol=1e-3)

        # The cursor on " it": the ranked list is that row of head 0, highest first.
        it = next(i for i, p in enumerate(app.view.text.pieces) if p == b" it")
        pane.move_cursor(it)
        ranked = pane.ranked(5)
        order = np.argsort(-w1[0, it, : it + 1], kind="stable")[:5]
        assert [k for k, _, _ in ranked] == [int(i) for i in order]
        assert ranked[0][2] == float(w1[0, it, order[0]])

        await wait_for(pilot, lambda: app.worker.attention.head == 0, "head sent")
        path = tmp_path / "s.jsonl"
        app.worker.save(str(path))
        await wait_for(pilot, lambda: path.exists(), "the save")
    header, _ = read_session(path)
    assert header["attention"] == {"on": True, "layer": 1, "head": 0}

    # --resume starts the capture on that layer, in its own context, and restores the head;
    # the run's context is made as the saved run's was.
    from tui.app import TokenstepApp
    from tui.startup import start_observers
    from tui.worker.resume import apply_to_args, load_header, restore

    args = build_parsers()["app"].parse_args(["--resume", str(path)])
    saved = load_header(path)
    apply_to_args(args, saved)
    engine = engine_from_args(args, observers=False)
    resumed = TokenstepApp(engine, raw=args.raw, autoplay=False, autosave_dir=None)
    try:
        start_observers(resumed, engine, args)
        restore(resumed.worker, saved, path)
        a = resumed.worker.attention
        assert (a.on, a.layer, a.head) == (True, 1, 0)
        assert engine.flash_attn_resolved == fa and not engine.observers
        obs = resumed.worker.observers
        assert find_capture(obs.engine).layers == [1]  # type: ignore[arg-type,union-attr]
        obs.ready()  # what a pane reading it does: the resumed prefill is replayed there
        view = resumed.worker.attention.view()
        assert "attention" in obs.engine.records[-1].extras
        assert "attention" not in engine.records[-1].extras
        assert view.on and view.installed
    finally:
        resumed.worker.stop()


@run_async
async def test_toggle_off_keeps_the_callback_idle_and_is_saved(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, raw=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Hello there", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.n_past > 0, "prefill")
        await pilot.press("a")
        await wait_for(pilot, lambda: app.view.attention.on, "attention on")
        await pilot.press("a")
        await wait_for(pilot, lambda: not app.view.attention.on, "attention off")
        assert not app.view.attention.installed  # nothing else looks: its context is freed
        assert "off" in app.view.notice
        assert find_capture(app.worker.engine) is None
        assert app.worker.observers.ctx is None
        n = len(app.worker.engine.records)
        await pilot.press("n")  # one step (→ is "next head" in this tab) with nothing looking
        await wait_for(pilot, lambda: len(app.worker.engine.records) > n, "a step")
        assert "attention" not in app.worker.engine.records[-1].extras
        # Tab 7 turns the graph census on, in an observer context with the run's kernel: the
        # newest step's graph is counted and named there.
        await pilot.press("7", "n")
        anatomy = app.query_one(AnatomyTab)
        await wait_for(pilot, lambda: anatomy.census is not None, "the census")
        obs = app.worker.observers.engine
        last = next(r.extras["graph"] for r in reversed(obs.records) if "graph" in r.extras)
        assert anatomy.census == last and last["n_nodes"] > 0
        assert obs.flash_attn_resolved == app.worker.engine.flash_attn_resolved
        fa_off = obs.flash_attn_resolved == "off"
        assert ("kq_soft_max" in last["layer_chain"]) == fa_off  # the run's own kernel
        assert last["n_layers"] == app.worker.engine.info.n_layer
        assert "graph" not in app.worker.engine.records[-1].extras
        path = tmp_path / "off.jsonl"
        app.worker.save(str(path))
        await wait_for(pilot, lambda: path.exists(), "the save")
    header, _ = read_session(path)
    assert header["attention"]["on"] is False


@run_async
async def test_attention_flag_starts_with_capture_on(tmp_path):
    args = build_parsers()["app"].parse_args(["--attention", "13", "-c", "256"])
    engine = engine_from_args(args, observers=False)  # as the app's start-up makes it
    assert find_capture(engine) is None and not engine.observers
    from tui.app import TokenstepApp

    app = TokenstepApp(engine, raw=True, autoplay=False, autosave_dir=None)
    app.worker.attention.start([13])  # what start-up does with --attention 13
    cap = find_capture(app.worker.observers.engine)
    assert cap is not None and cap.layers == [13]
    assert app.worker.observers.engine.flash_attn_resolved == "off"
    assert engine.flash_attn_resolved != "off" or engine.config.flash_attn == "off"
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view is not None, "the first view")
        assert app.view.attention.on and app.view.attention.layer == 13
        await pilot.press(*SENTENCE, "enter")
        await wait_for(pilot, lambda: app.view.text.n_past > 0, "prefill")
        await pilot.press("6")
        pane = app.query_one(AttentionTab)
        await wait_for(pilot, lambda: pane.att is not None, "the matrix")
        assert pane.att.layer == 13 and pane.att.captured.all()


@run_async
async def test_autoplay_runs_with_attention_on(model, tmp_path):
    """A whole reply plays with the capture on and tab 6 showing; at the end every token's
    row is there, captured, and sums to 1."""
    from tui.app import TokenstepApp

    engine = Engine(model, EngineConfig(n_ctx=512), SamplerSettings(temp=0.0))
    app = TokenstepApp(engine, autoplay=True, autosave_dir=None, close_engine=False)
    app.worker.attention.start([13])
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("escape", "6", "i")  # tab 6 first: a short reply can end fast
            assert app._tab == "attention"
            await pilot.press(*"Name three colors.", "enter")
            await wait_for(pilot, lambda: app.view.activity == "done", "the reply", timeout=300)
            assert app.view.text.reply_tokens >= 5 and app.view.attention.on
            pane = app.query_one(AttentionTab)
            await wait_for(pilot, lambda: pane.n_rows == app.view.text.n_past, "every row")
            assert pane.att is not None and pane.att.layer == 13 and pane.att.captured.all()
            sums = np.nansum(pane.att.head(None), axis=1)
            np.testing.assert_allclose(sums, 1.0, atol=1e-3)
    finally:
        engine.close()
