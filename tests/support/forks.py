"""An app with a forked conversation."""

from __future__ import annotations

from tests.support.app import send, wait_for
from tui.app import TokenstepApp

MESSAGE = "Write one sentence about the sea."


STEPS = 5


async def forked_app(pilot, app: TokenstepApp) -> None:
    await send(pilot, app, MESSAGE)
    await pilot.press("right", "right")
    await wait_for(pilot, lambda: app.view.text.reply_tokens == 2, "two steps")
    await pilot.press("F")
    await wait_for(pilot, lambda: app.view.text.fork_at is not None, "the fork")
    for _ in range(STEPS):
        await pilot.press("right")
    await wait_for(
        pilot, lambda: all(len(s.pieces) == STEPS for s in app.view.text.seqs), "the fork's steps"
    )
