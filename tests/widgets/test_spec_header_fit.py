"""--spec-type draft-simple: the header's spec figure fits whole at 100 and 140 columns (issue
#30's walk: "draft 7237 ms vs…" lost the verify figure at 140). Lower-priority parts go first."""

from __future__ import annotations

import re

import pytest

from tests.support.app import make_app, run_async, send, wait_for
from tests.support.compare_records import screen_text
from tui.engine.speculative.spec_draft import DraftSimple
from tui.engine.speculative.spec_verify import Speculator
from tui.widgets.header import SHEDS, StatusHeader
from tui.worker.spec_run import SpecRun

# the comparison in either wording: "draft 83 ms vs verify 78 ms" or "draft 83 vs verify 78 ms"
VS = re.compile(r"draft (\d+)(?: ms)? vs verify (\d+) ms")


@pytest.mark.parametrize("cols", [100, 140])
@run_async
async def test_the_spec_comparison_survives_whole(make_engine, model_path, tmp_path, cols):
    """The bundled model drafts for itself (greedy), so no plain decode runs and the header
    compares the draft model's decode time with the verify's; it is read off the screen."""
    app = make_app(make_engine, tmp_path, autoplay=True)
    spec = Speculator(DraftSimple(app.worker.engine, model_path, n_max=3))
    app.worker.spec = SpecRun(spec)
    try:
        async with app.run_test(size=(cols, 30)) as pilot:
            await send(pilot, app, "What is 2+2?")
            await wait_for(pilot, lambda: app.view.activity == "done", "the reply's end")
            await pilot.pause()
            full = app.view.header.spec
            assert full is not None and VS.search(full), full  # the case the walk met
            top = screen_text(app).splitlines()[0]
            got = VS.search(top)
            assert got is not None, top
            st = spec.stats
            assert got.groups() == (f"{st.draft_ms:.0f}", f"{st.verify_ms:.0f}")
            assert f"ctx {app.view.header.n_past:,}/" in top  # the context length stays too
            assert len(top.rstrip()) <= cols
            header = app.query_one(StatusHeader)
            if cols == 140:  # wide enough for the long words once the lowest parts go
                assert full in top or (app.view.header.spec_short or "") in top
            assert header.size.width == cols
    finally:
        spec.close()


def test_the_sheds_keep_the_spec_figure_and_the_context_length():
    assert "spec" not in SHEDS and "ctx" not in SHEDS
    assert SHEDS[0] == "where"  # what the walk saw cut first is not the spec figure
