"""Issue 30's findings seen on the app's screen: over ``--server`` tab 0, the surprise map and
the run chart say only what holds for that backend (finding 5), and the zoomed timeline's
footer states the scale its ticks use (finding 4's footer)."""

from __future__ import annotations

import html
import re

from tests.support.app import make_app, run_async, send, wait_for
from tests.support.llama_server import llama_server  # noqa: F401
from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.widgets.cache import CacheTab
from tui.widgets.run_chart import RunChart
from tui.widgets.surprise import legend
from tui.widgets.timeline import TimelinePane


def _screen(app: TokenstepApp) -> str:
    """The screen's text as drawn (borders included), from Textual's own screenshot."""
    svg = app.export_screenshot()
    return html.unescape(" ".join(re.findall(r"<text[^>]*>(.*?)</text>", svg))).replace("\xa0", " ")


@run_async
async def test_tab_0_over_a_server_says_only_what_holds_there(llama_server, tmp_path):  # noqa: F811
    """Finding 5: "KV 0/2,048" beside "40 of 2,048 tokens in use"; "F forks it into two" while
    F answers "Fork needs a local model"; "the next prompt is scored" where none ever is."""
    backend = RemoteBackend(llama_server.url, SamplerSettings(temp=0.0), n_probs=20)
    app = TokenstepApp(backend, autosave_dir=tmp_path / "autosave", autoplay=False)
    async with app.run_test(size=(140, 42)) as pilot:
        await send(pilot, app, "Name a colour.")
        await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == 1, "one step")
        await pilot.press("0")
        await wait_for(pilot, lambda: app.query_one(CacheTab).border_subtitle, "tab 0's footer")
        v = app.view
        assert v.text.n_past > 0
        foot = str(app.query_one(CacheTab).border_subtitle)
        assert f"{v.text.n_past:,}/{v.text.n_ctx:,}" in foot, foot  # not "KV 0/2,048"
        seqs = str(app.query_one("#c-seqs").render())
        await pilot.press("F")
        await wait_for(pilot, lambda: "needs a local model" in app.view.notice, "F's refusal")
        assert "F forks" not in seqs and "needs a local model" in seqs, seqs
        await pilot.press("u")
        await wait_for(pilot, lambda: app.view.text.surprise.scale != "off", "the surprise map")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.view.text.surprise is not None, "the run chart")
        sv = app.view.text.surprise
        assert sv.prompt_ppl is None  # nothing scores a prompt over a server
        said = legend(sv).plain + " " + _screen(app)
        assert "the next one is" not in said and "next prompt is decoded" not in said, said
        assert "not scored over llama-server" in legend(sv).plain
        assert app.query_one(RunChart) is not None


@run_async
async def test_the_zoomed_timeline_footer_states_the_ticks_scale(make_engine, tmp_path):
    """The zoomed footer read "1 column = 10 ms" under ticks 2 ms a column apart: the border
    was drawn with the scale of the size before the zoom."""
    app = make_app(make_engine, tmp_path)
    async with app.run_test(size=(140, 42)) as pilot:
        await send(pilot, app, "Hi.")
        for n in range(1, 4):
            await pilot.press("right")
            await wait_for(pilot, lambda n=n: app.view.text.reply_tokens == n, f"step {n}")
        await pilot.press("3")
        pane = app.query_one(TimelinePane)
        for _ in range(3):  # unzoomed, zoomed, back
            await pilot.pause()
            screen = _screen(app)
            shown = re.findall(r"1 column = ([\d.]+) ms", screen)
            ticks = [float(x) for x in re.findall(r"├([\d.]+) ms", screen)]
            assert len(shown) == 1 and len(ticks) >= 2, (shown, ticks)
            step = 20 if pane.size.width >= 60 else 10  # columns between ticks (_ruler)
            assert ticks[0] == step * float(shown[0]), (shown, ticks)
            await pilot.press("z")
