"""Issue 24: what the sampler screens say is so.

- ``:`` lists every flag with its current value in llama.cpp's notation (``mirostat 2`` in a
  session started with it, no Python reprs) and fits 80x24; a wrong name gets a short sorted
  suggestion.
- The logits pane grows with the terminal; its chain line is never cut at 120x40.
- A chain-key notice says what the stage did this step (XTC: fired or not).
- The settings line names only the stages the chain has; ``k`` under mirostat says top-k is
  not in the chain instead of claiming a re-run.
- Notices name pieces, not bare ids.
"""

from __future__ import annotations

import re

import numpy as np
from textual.widgets import Static

from tests.support.app import MESSAGE, SIZE, make_app, run_async, send, wait_for
from tui.engine import SamplerSettings
from tui.widgets.logits import LogitsPane


async def _escape_chat(pilot, app) -> None:
    if app.focused is not None and app.focused.id == "chat":
        await pilot.press("escape")


def _values(app) -> str:
    return str(app.screen.query_one("#chain-values", Static).render())


@run_async
async def test_colon_lists_current_values_in_llama_cpp_notation_and_fits_80x24(
    make_engine, tmp_path
):
    settings = SamplerSettings(
        mirostat=2, seed=7, repeat_penalty=1.3, samplers=["top_k", "temperature"]
    )
    app = make_app(make_engine, tmp_path, settings)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, app, MESSAGE)
        await _escape_chat(pilot, app)
        await pilot.press("colon")
        await wait_for(pilot, lambda: app.screen.query("#chain-values"), "the : screen")
        text = _values(app)
        lines = text.splitlines()
        assert re.search(r"\bmirostat +2\b", text)  # the current value, not the default 0
        assert re.search(r"\bseed +7\b", text) and re.search(r"repeat-penalty +1\.3\b", text)
        assert re.search(r"sampling-seq +kt\b", text)  # --sampling-seq letters
        assert "'\\n', ':', '\"', '*'" in text  # the breakers as llama.cpp's help spells them
        assert "['" not in text and "[(" not in text  # no Python reprs
        assert "chain now temperature → mirostat_v2" in text
        box = app.screen.query_one("Vertical")
        assert box.region.height <= 24 and box.region.bottom <= 24
        assert app.screen.query_one("#chain-set").region.bottom <= 23  # the input shows
        assert max(len(ln) for ln in lines) <= 76
        app.screen.query_one("#chain-set").value = "repeat-penalt 1.2"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "no sampler flag" in app.view.notice, "the sentence")
        notice = app.view.notice
        assert len(notice) <= 2 * 78  # two lines of the notice bar at 80 columns
        assert (
            "closest: repeat-penalty" in notice
            or "closest: repeat-last-n, repeat-penalty" in notice
        )
        names = notice.split("closest: ")[1].split(" (")[0].split(", ")
        assert 1 <= len(names) <= 3


@run_async
async def test_logits_pane_grows_and_its_chain_line_is_not_cut(make_engine, tmp_path):
    settings = SamplerSettings(temp=0.8, seed=3, repeat_penalty=1.3)
    app = make_app(make_engine, tmp_path, settings)
    async with app.run_test(size=(220, 50)) as pilot:
        await send(pilot, app, MESSAGE)
        pane = app.query_one(LogitsPane)
        assert pane.size.width >= 100
    app = make_app(make_engine, tmp_path, settings)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        pane = app.query_one(LogitsPane)
        v = app.view
        info = [t.plain for t in pane.info_lines(v, pane.size.width)]
        assert not any(line.endswith("…") for line in info), info
        chain = " ".join(info)
        for st in v.logits.chain.stages:
            assert f"→{st.name} " in chain


@run_async
async def test_chain_key_notice_says_whether_xtc_fired(make_engine, tmp_path):
    settings = SamplerSettings(temp=0.9, seed=3, xtc_probability=1.0, xtc_threshold=0.05)
    app = make_app(make_engine, tmp_path, settings)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await _escape_chat(pilot, app)
        await pilot.press(*["right_square_bracket"] * 7)
        await wait_for(pilot, lambda: app.view.logits.chain_cursor == 7, "the cursor on xtc")
        await wait_for(pilot, lambda: app.view.notice.startswith("Stage 8: xtc"), "the notice")
        st = next(s for s in app.view.logits.chain.stages if s.key == "xtc")
        assert st.note in ("did not fire", f"removed {len(st.removed)} top")
        assert st.note in app.view.notice and "keeps" in app.view.notice
        assert st.removed  # at probability 1 it fires (two or more above the threshold)
        # the top candidates XTC removed keep their rows, marked as its cut
        rows = {c.id: c for c in app.view.logits.candidates}
        top = np.argsort(-app.worker.engine.logits, kind="stable")[:8].tolist()
        for t in st.removed:
            if t in top:
                assert t in rows and rows[t].cut_by == "xtc"


@run_async
async def test_mirostat_header_and_k_say_what_the_chain_has(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, SamplerSettings(mirostat=2, seed=4))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await _escape_chat(pilot, app)
        pane = app.query_one(LogitsPane)
        head = pane.render().plain.split("\n")[0]
        assert "mirostat 2" in head and "temp" in head
        assert not any(k in head for k in ("top-k", "top-p", "min-p"))
        await pilot.press("k")
        await wait_for(pilot, lambda: app.view.settings.top_k == 20, "top-k 20")
        notice = app.view.notice
        assert "not in the chain" in notice and "mirostat 2" in notice
        assert "re-ran on the same logits" not in notice
    # a chain without top-p and min-p: the line names what it has
    settings = SamplerSettings(temp=0.8, samplers=["top_k", "temperature"])
    app = make_app(make_engine, tmp_path, settings)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        head = app.query_one(LogitsPane).render().plain.split("\n")[0]
        assert "top-k 40" in head and "top-p" not in head and "min-p" not in head


@run_async
async def test_notices_name_pieces(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await _escape_chat(pilot, app)
        await pilot.press("down", "down")
        row = app.query_one(LogitsPane).highlighted
        assert row is not None
        await pilot.press("f")
        await wait_for(pilot, lambda: app.view.action == "force", "the forced step")
        shown = row.piece.decode("utf-8").replace(" ", "␣").replace("\n", "↵")
        assert f"Forced token '{shown}' (id {row.id})" in app.view.notice
        await pilot.press("v")
        await wait_for(pilot, lambda: app.view.cache.verify is not None, "the verify")
        res = app.view.cache.verify
        assert f"(id {res.top1_cached})" in app.view.notice
        assert "'" in app.view.notice.split("top-1 ")[1]


@run_async
async def test_the_sample_row_names_mirostat_when_it_picked(make_engine, tmp_path):
    """Mirostat replaces dist as the picker: stage 5 must not say 'dist seed N'."""
    from tui.widgets.pipeline import PipelinePane

    app = make_app(make_engine, tmp_path, SamplerSettings(mirostat=2, seed=7))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        await _escape_chat(pilot, app)
        n = app.view.text.n_past
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.n_past > n, "a step")
        text = app.query_one(PipelinePane).render().plain
        row = next(ln for ln in text.splitlines() if "5 sample" in ln)
        assert "mirostat v2 seed 7" in row, row
        assert "dist seed" not in row, row
