"""The app's ``:`` line goes through the same bounds as the flags: a window past any context,
a count past llama.cpp's int32 and a left-recursive grammar are each one sentence in the
notice, and the chain keeps its settings."""

from __future__ import annotations

from tests.support.app import MESSAGE, SIZE, make_app, run_async, send, wait_for
from tui.engine import SamplerSettings


@run_async
async def test_the_chain_line_refuses_what_the_flags_refuse(make_engine, tmp_path):
    app = make_app(make_engine, tmp_path, SamplerSettings(temp=0.0))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, MESSAGE)
        n_records = app.view.header.n_records
        for line, words in [
            ("repeat-last-n 300000000", "--repeat-last-n 300000000 is longer than any context"),
            ("dry-penalty-last-n 99999999999", "does not fit llama.cpp's 32-bit int"),
            ('grammar root ::= root "a" | "a"', "the grammar is left-recursive"),
            ('json-schema {"type": "string", "minLength": 1e8}', "minLength 100,000,000"),
        ]:
            await pilot.press("colon")
            await pilot.pause()
            app.screen.query_one("#chain-set").value = line
            await pilot.press("enter")
            await wait_for(pilot, lambda w=words: w.lower() in app.view.notice.lower(), words)
            assert app.view.settings.repeat_last_n == 64
            assert app.view.settings.dry_penalty_last_n == -1
            assert app.view.settings.grammar == ""
        assert app.view.header.n_records == n_records  # nothing decoded
