"""Findings of a tmux walk of the app (issue 30's note), each pinned where the screen said what
is not so: tab 0's step-time bins named lengths they did not hold ("36–39 (5 steps)" held 36 to
40), and after a fork the timeline counted tokens as steps ("decode 37 steps" after 36 calls)."""

from __future__ import annotations

from tui.engine.model.work import WorkCounter
from tui.widgets.timeline import TimelinePane

from .test_app import make_app, run_async, send, wait_for


def test_step_time_bins_name_the_lengths_they_hold():
    """34 steps at context lengths 36..69 in 8 bins: each label's range holds its steps."""
    w = WorkCounter()
    w.add(0, 35, [35], 100.0, "prefill")
    for i, ctx in enumerate(range(36, 70), start=1):
        w.add(i, 1, [ctx], float(ctx), "decode")
    bins = w.decode_time_bins(8)
    assert sum(b.n for b in bins) == 34
    for b in bins:  # each step's length is its ms here, so the median lies in the label's range
        assert b.n == b.ctx_hi - b.ctx_lo + 1, b
        assert b.ctx_lo <= b.median_ms <= b.ctx_hi, b
    assert bins[0].ctx_lo == 36 and bins[-1].ctx_hi == 69
    assert all(a.ctx_hi + 1 == b.ctx_lo for a, b in zip(bins, bins[1:], strict=False))


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
