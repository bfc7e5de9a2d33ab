"""Regenerate screenshots/tour.svg and tour-zh.svg: the guided tour (tokenstep tour) on the
bundled model, at the quadratic wall's guess, answered. Run by ``make screenshots``.

The numbers are the lab's own, measured on the machine that runs this script."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from tui.engine import EngineConfig
from tui.startup import app_threads
from tui.tour.lab import Lab
from tui.tour.screen import TourApp, TourScreen

OUT = Path(__file__).resolve().parent.parent / "screenshots"
SIZE = (120, 40)


async def shot(lang: str, name: str) -> None:
    config = EngineConfig(n_ctx=512, n_threads=app_threads())
    screen = TourScreen(lang, lab=lambda: Lab(None, config=config, lang=lang))
    app = TourApp(screen)
    async with app.run_test(size=SIZE) as pilot:
        t0 = time.monotonic()
        while not screen.ready:
            if time.monotonic() - t0 > 600:
                raise SystemExit("screenshot_tour: timed out waiting for the lab")
            await pilot.pause(0.1)
        tour = screen.tour
        while tour.name != "wall" or tour.current is None or tour.current.guess is None:
            page = tour.current
            if page is not None and page.guess is not None and not page.guess.choices:
                await pilot.press("enter")  # the typed guess: Enter on the empty box skips it
            else:
                await pilot.press("right")
        guess = tour.current.guess
        await pilot.press(str(guess.answer + 1))
        await pilot.pause(0.3)
        (OUT / name).write_text(app.export_screenshot(title="tokenstep tour"), encoding="utf-8")
        print(f"wrote screenshots/{name}")


def main() -> int:
    OUT.mkdir(exist_ok=True)
    asyncio.run(shot("en", "tour.svg"))
    asyncio.run(shot("zh", "tour-zh.svg"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
