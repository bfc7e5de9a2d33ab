"""A tmux walk's finding on the timeline (issue 30's note): after a fork it counted tokens as
steps, "decode 37 steps" after 36 llama_decode calls, one of them stepping two sequences."""

from __future__ import annotations

from tests.support.app import make_app, run_async, send, wait_for
from tui.widgets.timeline import TimelinePane


@run_async
async def test_the_timeline_counts_a_fork_step_as_one_call_of_two_tokens(make_engine, tmp_path):
    """After F, one → decodes both sequences in one llama_decode: one call, two tokens."""
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, app, "Hi.")
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "one step")
        await pilot.press("F")
        await wait_for(pilot, lambda: app.view.text.fork_at is not None, "the fork")
        await pilot.press("right")
        await wait_for(
            pilot, lambda: all(len(s.pieces) == 1 for s in app.view.text.seqs), "a fork step"
        )
        await pilot.press("3")
        tot = app.view.timeline.totals
        assert (tot.decode_calls, tot.decode_tokens) == (2, 3)  # the record's own counts
        said = app.query_one(TimelinePane).stats().plain
        assert "2 calls, 3 tokens" in said and "3 steps" not in said, said
