"""Tab 0's slope line: a least-squares slope of step time against context length is printed
as a finding only when the fit means something; noisy or falling times say so instead."""

from __future__ import annotations

import numpy as np

from tui.engine.model.work import WorkCounter
from tui.widgets.quadratic import slope_line


def _counter(times_ms: list[float], start: int = 36) -> WorkCounter:
    w = WorkCounter()
    w.add(0, start - 1, [start - 1], 100.0, "prefill")
    for i, ms in enumerate(times_ms):
        w.add(i + 1, 1, [start + i], ms, "decode")
    return w


def test_noisy_falling_times_print_no_negative_slope():
    """The walk's case: 34 steps whose times fall with noise (a shared machine)."""
    rng = np.random.default_rng(0)
    times = list(200.0 - 0.85 * np.arange(34) + rng.normal(0, 40, 34))
    w = _counter(times)
    snap = w.snapshot()
    assert snap.ms_per_1k is not None and snap.ms_per_1k < 0
    line = slope_line(snap)
    assert "no slope shown" in line and "-" not in line.split("(")[0]
    assert f"{snap.ms_per_1k:+.2f}" not in line


def test_a_clean_growth_is_a_finding_with_its_r2():
    times = [10.0 + 0.05 * i for i in range(34)]  # 50 ms per 1,000 tokens, exactly
    snap = _counter(times).snapshot()
    assert snap.slope_r2 is not None and snap.slope_r2 > 0.999
    line = slope_line(snap)
    assert "slope +50.00 ms per 1,000 tokens" in line and "R² 1.00" in line


def test_too_few_steps_say_so():
    line = slope_line(_counter([10.0, 11.0, 12.0, 13.0]).snapshot())
    assert line.startswith("  no slope shown (4 steps)")


def test_r2_is_the_share_of_spread_the_line_explains():
    """R² against its definition, 1 − SS_res / SS_tot, on numbers worked by hand."""
    w = _counter([1.0, 3.0, 2.0])  # x 36, 37, 38: fit 1.5 + 0.5(x-36), residuals -.5, 1, -.5
    assert abs((w.slope_r2() or 0) - (1 - 1.5 / 2.0)) < 1e-12
