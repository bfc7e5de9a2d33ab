"""Prompts for speculative decoding, and a worker that drafts with ngram-simple."""

from __future__ import annotations

import pytest

from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.speculative.spec_ngram import NgramSimple
from tui.engine.speculative.spec_verify import NgramDrafter, Speculator
from tui.worker.spec_run import SpecRun
from tui.worker.thread import Worker

CHAT = (
    "<|im_start|>user\nWrite a short story about a cat who learns to cook.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


LIST = "Colors: " + ", ".join(["red", "green", "blue", "yellow"] * 8)  # a period of 8 tokens


# ngram-simple finds the LATEST earlier occurrence, one period back, and drafts only when at
# least size_n tokens follow it: with the default 12 it needs a period longer than 12.
COUNT = "Count: " + ", ".join(str(i) for i in range(1, 31)) + "\nAgain: 1, 2, 3"


# Four times round: the model continues the list, with a few rounds that reject a draft.
LIST_X4 = "Colors: " + ", ".join(["red", "green", "blue", "yellow"] * 4)


@pytest.fixture
def spec_worker(model):
    """A raw, greedy worker on the shared model drafting with ngram-simple (n 3, m 8)."""
    eng = Engine(model, EngineConfig(n_ctx=1024, n_threads=2), SamplerSettings(greedy=True))
    w = Worker(eng, raw=True, autoplay=False, autosave_dir=None, close_engine=False)
    w.spec = SpecRun(Speculator(NgramDrafter(NgramSimple(3, 8))))
    yield w
    w.stop()
    eng.close()
