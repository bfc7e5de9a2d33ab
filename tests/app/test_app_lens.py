"""Tab 8 in the real app: the lens is computed only while the tab shows, draws what the step
records hold (checked against llama.cpp in tests/engine/observe/test_lens.py), and L switches
between the preview and the last step."""

from __future__ import annotations

from tests.support.app import SIZE, make_app, run_async, wait_for
from tui.engine.observe.lens_capture import find_lens
from tui.widgets.lens import LensPane

CAPITAL = "The capital of France is"


def _text(pane) -> str:
    return "\n".join(pane.render_line(y).text for y in range(pane.size.height))


def _lens_step(app):
    """The lens's step in the newest view (None: no view or no step yet)."""
    lens = app.view.lens if app.view is not None else None
    return lens.step if lens is not None else None


@run_async
async def test_lens_tab_on_the_capital_of_france(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, raw=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*CAPITAL, "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.n_past > 0, "prefill")
        assert find_lens(app.worker.engine) is None  # not showing: no capture installed
        await pilot.press("8")

        await wait_for(pilot, lambda: _lens_step(app) is not None, "the lens")
        s = _lens_step(app)
        assert s.mark_piece == " Paris" and s.mark_what == "llama.cpp's top-1"
        eng = app.worker.engine
        rec = eng.records[s.record]
        seen = app.worker.observers.ctx.record_for(s.record)  # its own context's replay
        assert "lens" not in rec.extras  # the run's record never carries it
        assert s.layers == seen.extras["lens"] and len(s.layers) == eng.info.n_layer
        assert s.layers[-1]["top"][0]["id"] == rec.top[0].id  # llama.cpp's own top-1
        await pilot.pause()
        head = _text(app.query_one("#lens-summary"))
        assert f"top-1 first at layer {s.first_top1}" in head
        assert f"max |Δ| {s.check['max_abs_diff']:.3f}" in head
        rows = app.query_one(LensPane)
        assert rows.size.height == eng.info.n_layer  # one row per layer (they scroll)
        assert rows.render_line(s.first_top1).text.startswith(f"★{s.first_top1:>2}")

        await pilot.press("right")  # step: " Paris" is sampled and fed
        await wait_for(
            pilot, lambda: (_lens_step(app) or s).record > s.record, "a step"
        )
        await pilot.press("L")
        await wait_for(pilot, lambda: app.view.lens.mode == "last", "the last step")
        last = _lens_step(app)
        assert last is not None and last.record == s.record and last.mark_piece == " Paris"
        assert last.mark_what == "the token sampled"

        await pilot.press("1")  # another tab: nothing looks, the observer context is freed
        await wait_for(pilot, lambda: app.worker.observers.ctx is None, "lens off")
        assert find_lens(app.worker.engine) is None
        n = app.view.header.n_records
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.header.n_records > n, "a step")
        assert "lens" not in app.worker.engine.records[-1].extras


async def _to_controls(pilot, app) -> None:
    """Esc until the controls have the keys (the end of a prefill may move the focus)."""
    chat = app.query_one("#chat")
    await pilot.press("escape")
    await wait_for(pilot, lambda: not chat.has_focus and chat.value == "", "the controls")


def _shown_layers(app) -> list[int]:
    from textual.containers import VerticalScroll

    rows = app.query_one("#lens").query_one(VerticalScroll)
    text = _text(app.query_one(LensPane)).splitlines()
    y = round(rows.scroll_y)
    return [int(ln[1:3]) for ln in text[y : y + rows.scrollable_content_region.height]]


async def _deep_layers_by_keys(make_engine, tmp_path, size: tuple[int, int]) -> None:
    app = make_app(make_engine, tmp_path, raw=True)
    async with app.run_test(size=size) as pilot:
        await pilot.press(*CAPITAL, "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.n_past > 0, "prefill")
        await _to_controls(pilot, app)
        await pilot.press("8")

        await wait_for(pilot, lambda: _lens_step(app) is not None, "the lens")
        s = _lens_step(app)
        await wait_for(pilot, lambda: s.first_top5 in _shown_layers(app), "the deep layers")
        assert s.first_top5 >= 20 and len(s.layers) - 1 in _shown_layers(app)
        await pilot.press("home")
        await wait_for(pilot, lambda: _shown_layers(app)[:1] == [0], "layer 0 on top")
        await pilot.press("pagedown")
        await wait_for(pilot, lambda: _shown_layers(app)[0] > 0, "a page down")
        await pilot.press("end")
        await wait_for(pilot, lambda: _shown_layers(app)[-1] == 29, "the last layer")


@run_async
async def test_lens_keys_reach_the_deep_layers(make_engine, tmp_path):
    """Issue 24, fault 2, in the app at 120x40 and 80x24: tab 8 opens where ' Paris' enters
    the top 5 (layer 28 of 30 on SmolLM2), and PgUp/PgDn/Home/End scroll the layers."""
    await _deep_layers_by_keys(make_engine, tmp_path, SIZE)
    await _deep_layers_by_keys(make_engine, tmp_path, (80, 24))


@run_async
async def test_lens_grid_key_shows_every_position(make_engine, tmp_path):
    """The missing piece: G in tab 8 shows the lens over every position of the context (layers
    down, positions across, the top-1 and its p), built from the engine's own grid records;
    a step adds its position; G again goes back to one step."""
    app = make_app(make_engine, tmp_path, raw=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*CAPITAL, "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.n_past > 0, "prefill")
        await _to_controls(pilot, app)
        await pilot.press("G")  # from any tab: the lens goes on, then the grid

        def grid():
            lens = app.view.lens if app.view is not None else None
            return lens.grid if lens is not None else None

        n = len(app.worker.engine.tokens)
        await wait_for(pilot, lambda: grid() is not None and len(grid().columns) == n, "the grid")
        g = grid()
        eng = app.worker.engine
        assert [c.pos for c in g.columns] == list(range(n)) and g.missing == 0
        last = g.columns[-1]
        assert (
            last.pieces[-1] == " Paris"
            and last.top1[-1] == eng.records[eng.logits_record].top[0].id
        )
        assert all(c.max_abs_diff is not None and c.max_abs_diff <= 0.35 for c in g.columns)
        assert not eng.score_prompt  # the run's prompt: as it was (one logits row)
        assert app.worker.observers.wants.grid  # every row had logits in its own context
        await pilot.pause()
        head = _text(app.query_one("#lens-summary"))
        assert f"grid · positions 0–{n - 1} of {n}" in head
        rows = _text(app.query_one(LensPane)).splitlines()
        assert len(rows) == eng.info.n_layer and rows[-1].startswith("29 │")
        assert "␣Par" in rows[-1] and f"{last.p[-1]:.2f}"[1:] in rows[-1]

        await pilot.press("right")  # a step: its position joins the grid
        await wait_for(pilot, lambda: grid() is not None and len(grid().columns) == n + 1, "a step")
        await pilot.press("G")
        await wait_for(pilot, lambda: app.view.lens.grid is None, "one step again")
        assert not eng.score_prompt and not app.worker.observers.wants.grid
