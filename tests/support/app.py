"""The app under ``App.run_test()``: building it on the shared model and driving it."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from typing import Any

from tui.app import TokenstepApp
from tui.engine import SamplerSettings
from tui.engine.model.chat_template import Message, chat_tokens

SIZE = (120, 40)


MESSAGE = "Write one sentence about the sea."


def run_async(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body in its own event loop (no pytest plugin needed)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


async def wait_for(pilot, pred: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """Poll (letting the app run) until ``pred`` holds; the worker decodes meanwhile."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        await pilot.pause(0.02)
        if pred():
            await pilot.pause()
            return
    raise AssertionError(f"timed out waiting for {what}")


def make_app(make_engine, tmp_path, settings: SamplerSettings | None = None, **kw) -> TokenstepApp:
    engine = make_engine(settings or SamplerSettings(temp=0.0))
    kw.setdefault("autoplay", False)
    return TokenstepApp(engine, autosave_dir=tmp_path / "autosave", close_engine=False, **kw)


def prompt_for(model, text: str) -> list[int]:
    """The chat prompt, tokenized on this thread before the app's worker owns anything."""
    from tui.engine.model.tokens import Vocab

    vocab = Vocab(model.vocab, model.info.n_vocab)
    return chat_tokens(
        vocab, model.info.chat_template, [Message("user", text)], add_bos=model.info.add_bos
    ).tokens


async def send(pilot, app: TokenstepApp, text: str) -> None:
    """Type ``text``, press Enter and wait until its turn has begun: generating, or (a short
    reply with autoplay on can end between two polls) already done past the context before."""
    before = app.view.text.n_past if app.view is not None else 0
    await pilot.press(*text)
    await pilot.press("enter")

    def begun() -> bool:
        v = app.view
        return v is not None and (
            v.activity == "generating" or (v.activity == "done" and v.text.n_past > before)
        )

    await wait_for(pilot, begun, "the prefill")


async def reply_of(pilot, app: TokenstepApp, n: int) -> None:
    """Press → ``n`` times after a send and wait until the reply holds ``n`` tokens."""
    for _ in range(n):
        await pilot.press("right")
    await wait_for(pilot, lambda: app.view.text.reply_tokens == n, "the steps")


async def chat(pilot, app, text: str) -> None:
    n = app.worker.commands
    await pilot.press("i")
    app.query_one("#chat").value = text
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.view.commands > n and app.worker.queue_empty(), text)
    await wait_for(pilot, lambda: app.view.commands == app.worker.commands, "its view")
