"""The whole tour driven with ``run_test()`` in both languages, the lab running on the real
model in its own thread; the app's ``l`` key; ``tokenstep tour``'s bad input (issue 34)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support.app import run_async
from tests.support.cli import run_cli
from tui.app import TokenstepApp
from tui.engine import EngineConfig, SamplerSettings
from tui.tour.lab import CHAPTERS, Lab
from tui.tour.screen import TourApp, TourScreen

CONFIG = EngineConfig(n_ctx=512, n_threads=2)


async def wait_for(pilot, pred: Callable[[], bool], timeout: float = 300) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        await pilot.pause(0.05)
        if pred():
            return
    raise AssertionError("timed out")


@pytest.mark.parametrize("lang", ["en", "zh"])
@run_async
async def test_the_whole_tour_with_guesses_and_a_score(lang: str) -> None:
    screen = TourScreen(lang, lab=lambda: Lab(None, config=CONFIG, lang=lang))
    app = TourApp(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: screen.ready)
        tour, asked, right, seen = screen.tour, 0, 0, set()
        while not tour.finished:
            page = tour.current
            assert page is not None
            seen.add(page.chapter)
            text = screen.page_text(page, 77).plain
            assert page.body.split("\n")[0][:10] in text
            if page.guess is not None:
                g = page.guess
                if not g.choices and lang == "zh":  # Enter on the empty box skips the guess
                    at = (tour.chapter, tour.page)
                    await pilot.press("enter")
                    assert (tour.chapter, tour.page) != at and not tour.answers
                    continue
                asked += 1
                if not g.choices:  # the typed guess: the right token, typed
                    await pilot.press(*g.typed.strip())
                    await pilot.press("enter")
                    right += 1
                elif asked % 2:  # every other choice right, the rest wrong
                    await pilot.press(str(g.answer + 1))
                    right += 1
                else:
                    await pilot.press(str((g.answer + 1) % len(g.choices) + 1))
                assert tour.answer is not None
                shown = screen.page_text(page, 77).plain
                assert g.shown_answer in shown and g.why.split("\n")[0][:12] in shown
            await pilot.press("right")
        assert seen == set(CHAPTERS)
        assert tour.score == (right, asked) and asked >= len(CHAPTERS) - 1
        end = screen.page_text(None, 77).plain
        assert f"{right}" in end and f"{asked}" in end
        await pilot.press("left")  # back from the end to the last page
        assert not tour.finished
        await pilot.press("q")
        await pilot.pause(0.1)
    thread = screen._thread
    assert thread is not None
    thread.join(timeout=60)  # the lab's thread ends (and frees its contexts) with the tour
    assert not thread.is_alive()


@run_async
async def test_the_wall_page_shows_the_labs_count() -> None:
    screen = TourScreen("en", lab=lambda: Lab(None, config=CONFIG))
    async with TourApp(screen).run_test(size=(140, 42)) as pilot:
        await wait_for(pilot, lambda: "wall" in screen.tour.pages)
        wall = [p for p in screen.tour.pages["wall"] if "n(n+1)/2" in p.body][0]
        assert "n(n+1)/2 = 136" in wall.body and "136 without" in wall.body
        await pilot.press("q")


@run_async
async def test_the_lens_guess_is_answered_with_the_labs_layer() -> None:
    """Inside one decode: the learner picks the first layer whose top 5 holds llama.cpp's
    top-1, among layer numbers; the lab's layer is the right one, and the next page compares
    the last layer's lens with llama.cpp's logits."""
    screen = TourScreen("zh", lab=lambda: Lab(None, config=CONFIG, lang="zh"))
    async with TourApp(screen).run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "inside" in screen.tour.pages)
        tour = screen.tour
        lens_pages = [p for p in tour.pages["inside"] if p.guess and "lens" in p.pane]
        assert len(lens_pages) == 1
        tour.chapter = CHAPTERS.index("inside")
        tour.page = tour.pages["inside"].index(lens_pages[0])
        screen.draw()
        g = lens_pages[0].guess
        assert g is not None and g.choices[g.answer].isdigit()
        await pilot.press(str(g.answer + 1))
        assert tour.answer == (str(g.answer + 1), True)
        shown = screen.page_text(tour.current, 77).plain
        assert g.shown_answer in shown and g.why[:12] in shown
        await pilot.press("right")
        assert "logits" in (tour.current.body if tour.current else "")
        await pilot.press("q")


@run_async
async def test_l_opens_the_tour_over_the_app_and_leaves_the_chat_alone(make_engine) -> None:
    engine = make_engine(SamplerSettings(temp=0.0))
    app = TokenstepApp(engine, autosave_dir=None, show_timings=False, close_engine=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("escape", "l")  # from the chat box to the controls, then l
        await wait_for(pilot, lambda: isinstance(app.screen, TourScreen))
        tour = app.screen
        assert isinstance(tour, TourScreen)
        mode = app.worker.state.mode
        await pilot.press("space", "t")  # the app's keys do nothing under the tour
        await wait_for(pilot, lambda: "loop" in tour.tour.pages)
        assert tour.tour.pages["loop"][0].body.count("The capital of France is") == 1
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, TourScreen))
        assert engine.n_past == 0 and engine.settings.temp == 0.0  # nothing sent, nothing set
        assert app.worker.state.mode == mode


def test_bad_tour_flags_are_one_sentence() -> None:
    for args in (("tour", "--lang", "fr"), ("tour", "-m", "/no/such/model.gguf")):
        r = run_cli(*args)
        err = r.stderr.decode()
        assert r.returncode != 0 and "Traceback" not in err
        assert err.startswith("tokenstep: ") and err.count("\n") == 1, err
