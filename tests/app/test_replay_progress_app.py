"""Turning attention on over a chat of a few turns: while the observer's own context replays
the run, the Attention pane counts the operations and tokens done (the replay's own counts),
rising to all of them, before it shows the weights."""

from __future__ import annotations

import re
from typing import Any

from tests.support.app import chat, make_app, run_async, wait_for
from tui.engine.run.replay import DecodeOp
from tui.widgets.attention_tabs import AttentionTab

FIGURES = re.compile(r"(\d+) of (\d+) operation\(s\), (\d+) of (\d+) token\(s\)")


@run_async
async def test_attention_pane_counts_the_replay_up_to_all_of_it(make_engine, tmp_path, monkeypatch):
    drawn: list[tuple[str, bool]] = []  # every status the pane drew, and whether with weights
    real = AttentionTab.show

    def show(self: AttentionTab, view: Any) -> None:
        real(self, view)
        if not drawn or drawn[-1] != (self.status, self.att is not None):
            drawn.append((self.status, self.att is not None))

    monkeypatch.setattr(AttentionTab, "show", show)
    app = make_app(make_engine, tmp_path, raw=False)
    async with app.run_test(size=(100, 30)) as pilot:
        for text in ("Name three colors.", "And three animals?", "And three fruits?"):
            await chat(pilot, app, text)
            for _ in range(4):  # step mode: each → is one decode
                n = app.view.text.n_past
                await pilot.press("right")
                await wait_for(pilot, lambda n=n: app.view.text.n_past > n, "a step")
        await pilot.press("escape", "6")
        pane = app.query_one(AttentionTab)
        await wait_for(pilot, lambda: "capture off" in pane.status, "the pane before a")
        ops = list(app.worker.engine.local.replay.ops)  # what a new observer context replays
        n_ops = len(ops)
        n_tokens = sum(op.call.n_tokens for op in ops if isinstance(op, DecodeOp))
        await pilot.press("a")
        await wait_for(pilot, lambda: pane.att is not None, "the weights after the replay")
        assert "captured from kq_soft_max-0" in pane.status

    before = drawn[: next(i for i, (_, weights) in enumerate(drawn) if weights)]
    figures = [
        (int(m[1]), int(m[2]), int(m[3]), int(m[4])) for s, _ in before if (m := FIGURES.search(s))
    ]
    done = [f[0] for f in figures]
    assert len(set(done)) >= 2, [s for s, _ in drawn]
    assert done == sorted(done), done
    assert all(f[1] == n_ops and f[3] == n_tokens for f in figures), (n_ops, n_tokens, figures)
    assert figures[-1] == (n_ops, n_ops, n_tokens, n_tokens)
