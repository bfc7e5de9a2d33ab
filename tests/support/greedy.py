"""An engine that has stepped a greedy reply to a short prompt (the paths tests park it)."""

from __future__ import annotations

from tui.engine import SamplerSettings
from tui.engine.run.session import Engine

PROMPT = "The capital of France is"


def greedy_reply(make_engine, n_seq_max: int, steps: int) -> Engine:
    """The prompt prefilled, then ``steps`` greedy steps."""
    eng = make_engine(SamplerSettings(temp=0.0), n_seq_max=n_seq_max)
    eng.prefill(eng.vocab.tokenize(PROMPT))
    for _ in range(steps):
        eng.step()
    return eng
