"""Ctrl+S suggests a path in the autosave folder, not in the directory the app started in."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input

from tests.support.app import SIZE, make_app, run_async
from tui.widgets.save_dialog import default_save_path


def test_default_save_path() -> None:
    assert Path(default_save_path("/x/sessions")).parent == Path("/x/sessions")
    assert "/" not in default_save_path(None)  # no folder (autosave off): just the name


@run_async
async def test_ctrl_s_suggests_the_autosave_folder(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        box = app.screen.query_one("#save-path", Input)
        suggested = Path(box.value)
        assert suggested.is_absolute() and suggested.parent == tmp_path / "autosave"
        assert suggested.name.startswith("tokenstep-session-") and suggested.suffix == ".jsonl"
        await pilot.press("escape")
