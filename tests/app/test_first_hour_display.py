"""The small display faults a new user met: each drawn, then read back as the user reads it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from rich.console import Console

from tests.support.app import make_app, run_async, wait_for
from tests.support.forks import forked_app
from tui.app import TokenstepApp
from tui.engine.model.errors import TokenstepError
from tui.widgets.pipeline import PipelinePane
from tui.widgets.tokens import TokensPane


def rendered(renderable, width: int) -> list[str]:
    con = Console(width=width, record=True, color_system=None)
    con.print(renderable)
    return con.export_text().splitlines()


def test_a_bad_flag_points_to_the_help_with_one_space():
    from tui.args import parse

    with pytest.raises(TokenstepError) as exc:
        parse(["--no-such-flag"])
    assert "(see 'tokenstep --help')" in str(exc.value)
    with pytest.raises(TokenstepError) as exc:
        parse(["info", "--no-such-flag"])
    assert "(see 'tokenstep info --help')" in str(exc.value)


def test_heads_are_written_from_0_like_their_numbers():
    from tui.widgets.attention_text import titles

    att = SimpleNamespace(positions=[0, 1, 2], n_head=9)
    title, _ = titles(
        att, layer=3, n_layer=30, head=8, keys_per_cell=1, scale="row", rows=(0, 3), status=""
    )
    assert "head 8 of 0–8" in title and "8/9" not in title


def test_help_rows_wrap_under_their_own_text():
    from tui.widgets.help import help_text
    from tui.widgets.keys import KEYS

    lines = rendered(help_text(None), 60)
    long = next(k for k in KEYS if len(k.help) > 60)
    first = next(i for i, ln in enumerate(lines) if ln.strip().startswith(long.label + " "))
    start = lines[first].index(long.help.split()[0])
    cont = lines[first + 1]
    assert cont[:start].strip() == "" and cont[start : start + 1].strip()  # hanging indent


@run_async
async def test_small_screen_faults(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.view is not None, "the first view")
        # The tokens hint wraps between words.
        pane = app.query_one(TokensPane)
        lines = ["".join(s.text for s in line).strip() for line in pane.flow.lines]
        hint = "No tokens yet. Each piece of the prompt and the reply appears here."
        assert len(lines) > 1 and " ".join(lines) == hint, lines
        # A long notice is shown whole, on more than one row.
        long = "A long notice: " + "every word of it must be readable on the screen " * 3
        app._say(long.strip())
        await pilot.pause()
        notice = app.query_one("#notice")
        assert notice.size.height > 1
        from textual.geometry import Region

        strips = notice.render_lines(Region(0, 0, notice.size.width, notice.size.height))
        shown = " ".join(s.text.strip() for s in strips if s.text.strip())
        assert shown == long.strip()


@run_async
async def test_after_a_fork_the_batch_line_names_one_position(make_engine, tmp_path):
    app: TokenstepApp = make_app(make_engine, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await forked_app(pilot, app)
        line = app.query_one(PipelinePane).facts(app.view)[1]
        pos = app.view.batch.last_records[-1].call.tokens[0].pos
        assert f"pos {pos} in each sequence" in line and f"{pos}–{pos}" not in line
        # The logits pane names the sequence whose row it shows; stage 5 names its pick.
        from tui.widgets.logits import LogitsPane

        assert "seq 0's row (of seqs 0, 1)" in str(app.query_one(LogitsPane).border_title)
        pick = app.view.text.last_pick
        assert pick is not None
        assert pick.id == app.view.batch.last_records[-1].rows[0].token
        facts = app.query_one(PipelinePane).facts(app.view)
        assert facts[4] and f"id {pick.id}" in facts[4]
        from tests.support.app_cache import cache_text, open_tab

        await open_tab(pilot, app, "0")
        await wait_for(pilot, lambda: "When the context fills" in cache_text(app), "tab 0")
        assert "Context full" not in cache_text(app)
