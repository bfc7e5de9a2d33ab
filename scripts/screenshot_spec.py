"""``make screenshots`` (its speculative part): ``screenshots/spec-round.svg``.

Raw mode, greedy, ``--spec-type ngram-simple --spec-ngram-simple-size-n 3
--spec-ngram-simple-size-m 8`` on a list written four times: stepped round by round until a
round accepts part of its draft and rejects the rest, then drawn with the batch tab showing
that verify batch (logits on every row), the accepted tokens underlined, the rejected one
struck through beside the waiting replacement, and the header's acceptance figure.
"""

from __future__ import annotations

import asyncio

from screenshots import SIZE, save, wait_for
from tui.app import TokenstepApp
from tui.engine import Engine, EngineConfig, Model, SamplerSettings
from tui.engine.speculative.spec_ngram import NgramSimple
from tui.engine.speculative.spec_verify import NgramDrafter, Speculator
from tui.startup import app_threads
from tui.worker.spec_step import SpecRun

LIST = "Colors: " + ", ".join(["red", "green", "blue", "yellow"] * 4)


async def spec_round(model: Model) -> None:
    engine = Engine(model, EngineConfig(n_threads=app_threads()), SamplerSettings(temp=0.0))
    app = TokenstepApp(engine, raw=True, autoplay=False, autosave_dir=None)
    app.worker.spec = SpecRun(Speculator(NgramDrafter(NgramSimple(3, 8))))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*LIST, "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.activity == "generating")
        await pilot.press("escape")  # the keys step, the chat box keeps its text
        for _ in range(20):
            n = len(app.worker.engine.records)
            await pilot.press("right")
            await wait_for(
                pilot,
                lambda n=n: app.view.batch.last_records[-1].index == n,  # type: ignore[union-attr]
            )
            sp = app.view.batch.last_records[-1].spec  # type: ignore[union-attr]
            if sp is not None and 0 < sp.accepted < len(sp.draft):
                break
        await pilot.press("2")
        await pilot.pause(0.3)
        save(app, "spec-round.svg")


if __name__ == "__main__":
    asyncio.run(spec_round(Model()))
