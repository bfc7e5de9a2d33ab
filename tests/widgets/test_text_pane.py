"""The text pane rebuilds only what changed (tui/widgets/text_flow.py). After every kind of
change, its text must equal what the full Rich builder draws for the same view, and its lines
must equal the lines a fresh pane wraps."""

from __future__ import annotations

from tests.support.app import SIZE, make_app, run_async, send, wait_for
from tests.support.text_pane import check_incremental
from tui.engine import SamplerSettings
from tui.widgets.text import ConversationPane


async def _steps(pilot, app, pane: ConversationPane, n: int) -> None:
    for _ in range(n):
        want = app.view.text.n_past + 1
        await pilot.press("right")
        await wait_for(
            pilot, lambda w=want: pane.view is not None and pane.view.text.n_past == w, "a step"
        )
        check_incremental(pane)


@run_async
async def test_chat_text_is_rebuilt_incrementally(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name three rivers in Europe.")
        pane = app.query_one(ConversationPane)
        check_incremental(pane)
        await _steps(pilot, app, pane, 12)
        want = app.view.text.n_past - 4
        for _ in range(4):
            await pilot.press("left")
        await wait_for(pilot, lambda: pane.view.text.n_past == want, "the rewind")
        check_incremental(pane)
        await pilot.press("b")  # token boundaries on
        check_incremental(pane)
        await _steps(pilot, app, pane, 3)
        await pilot.press("b")
        await pilot.press("i")
        await send(pilot, app, "And one in Asia.")
        await wait_for(pilot, lambda: pane.view is app.view, "the second turn drawn")
        check_incremental(pane)
        await _steps(pilot, app, pane, 3)


@run_async
async def test_raw_text_with_split_characters_and_a_context_shift(make_engine, tmp_path):
    engine = make_engine(SamplerSettings(temp=0.0), n_ctx=48, context_full="shift")
    from tui.app import TokenstepApp

    app = TokenstepApp(
        engine, raw=True, autosave_dir=tmp_path / "a", close_engine=False, autoplay=False
    )
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "日本語のテキスト。東京は")  # pieces split characters' bytes
        pane = app.query_one(ConversationPane)
        check_incremental(pane)
        assert "日本語のテキスト" in pane.plain
        for _ in range(50):  # past the 48-token context: a shift, then a gap marker
            want = app.view.text.n_past + 1 if not app.view.cache.shifts else None
            await pilot.press("right")
            await wait_for(
                pilot,
                lambda w=want: pane.view is app.view and (w is None or pane.view.text.n_past >= w - 30),
                "a step",
            )
            check_incremental(pane)
        assert app.view.cache.shifts and "tokens forgotten" in pane.plain


@run_async
async def test_text_pane_scrolls_to_the_newest_line_without_a_layout_pass(make_engine, tmp_path):
    """The pane grows its virtual size without laying out the screen; the scrollbar must
    still appear and the newest line must stay in view."""
    app = make_app(make_engine, tmp_path, raw=True)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#chat").value = "The river flows. " * 60  # more lines than fit
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.n_past > 150, "prefill")
        pane = app.query_one(ConversationPane)
        await _steps(pilot, app, pane, 3)
        await pilot.pause(0.3)
        rows, height = pane.count_rows(), pane.size.height
        assert rows > height
        assert pane.show_vertical_scrollbar
        # No line runs under the scrollbar: every cell of the text is on screen.
        widest = max(sum(seg.cell_length for seg in line) for line in pane.flow.lines)
        assert widest <= pane.scrollable_content_region.width
        assert pane.virtual_size.height == rows
        top = int(pane.scroll_offset.y)
        assert top <= rows - 1 < top + height  # the newest line is on screen
