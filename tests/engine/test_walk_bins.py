"""A tmux walk's finding in tab 0 (issue 30's note): the step-time bins named lengths they did
not hold, "36–39 (5 steps)" over a bin of 36 to 40 (labels from int() of fractional edges)."""

from __future__ import annotations

from tui.engine.model.work import WorkCounter


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
