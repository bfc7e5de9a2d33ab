"""Snapshot tests (pytest-textual-snapshot) of the real app on the bundled model.

Greedy sampling makes the tokens deterministic on one build; the pictures that print the
model's probabilities are kept per kernel family (tests/support/kernel_class.py). Measured times are
hidden (``show_timings`` off) so the pictures do not depend on the machine's speed; autosave
is off so no temporary path appears. Update with ``pytest tests/app/test_app_snapshots.py
--snapshot-update`` and look at the SVGs before committing them; the update deletes the other
kernel families' pictures as unused, so take those back from git (``git checkout --`` them)."""

from __future__ import annotations

from textual.widgets import Input

from tests.support.kernel_class import need_picture, per_kernels
from tests.support.snapshot_app import make_app, steady_cursor, wait_for
from tui.app import TokenstepApp
from tui.engine import SamplerSettings


@per_kernels
def test_main_screen_after_a_chat_turn(snap_compare, make_engine, request, kernels):
    need_picture(request, "test_app_snapshots", kernels)
    app = make_app(make_engine, autoplay=True)

    async def run_before(pilot) -> None:
        steady_cursor(app)
        await pilot.press(*"Hi", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.activity == "done")

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_help_screen(snap_compare, make_engine):
    app = make_app(make_engine)

    async def run_before(pilot) -> None:
        steady_cursor(app)

    assert snap_compare(app, press=["f1"], terminal_size=(120, 40), run_before=run_before)


@per_kernels
def test_compact_step_mode_at_80x24(snap_compare, make_engine, request, kernels):
    need_picture(request, "test_app_snapshots", kernels)
    app = make_app(make_engine, autoplay=False)

    async def run_before(pilot) -> None:
        steady_cursor(app)
        await pilot.press(*"Hi", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.activity == "generating")
        await pilot.press("right", "right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 2)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_too_small_says_so(snap_compare, make_engine):
    assert snap_compare(make_app(make_engine), terminal_size=(60, 20))


def test_chain_screen_lists_current_values_at_80x24(snap_compare, make_engine):
    """``:`` at 80x24 in a session started with --mirostat 2 --repeat-penalty 1.3: every flag
    with its current value, the unused ones dim, the chain as it runs, all on one screen."""
    settings = SamplerSettings(mirostat=2, repeat_penalty=1.3, seed=7)
    app = TokenstepApp(
        make_engine(settings), autosave_dir=None, show_timings=False, close_engine=False
    )

    async def run_before(pilot) -> None:
        steady_cursor(app)
        await pilot.press("escape", "colon")
        await wait_for(pilot, lambda: bool(app.screen.query("#chain-values")))
        app.screen.query_one("#chain-set", Input).cursor_blink = False

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
