"""The surprise map's control: which scale the text pane colours tokens by.

Off by default. Any other scale asks the engine to decode the next prompts with logits on
every row (``Engine.score_prompt``), so prompt tokens get a p too; what that costs is one
logits row of n_vocab floats per prompt token, and the output head's n_embd x n_vocab
multiply-adds for each of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .thread import Worker

SCALES = ("off", "p", "p'", "entropy")
WHAT = {
    "p": "p: each token's probability under the raw logits (temperature 1)",
    "p'": "p': each token's probability after the sampler chain (sampled tokens only)",
    "entropy": "entropy: bits of uncertainty of the step that produced each token",
}


def cycle(w: Worker) -> None:
    s, eng = w.state, w.engine
    s.surprise_scale = SCALES[(SCALES.index(s.surprise_scale) + 1) % len(SCALES)]
    eng.score_prompt = s.surprise_scale != "off"
    if s.surprise_scale == "off":
        s.note("Surprise map off; prompts are decoded with one logits row again.")
        return
    scored = sum(1 for v in eng.surprise.along(eng.tokens) if v is not None and v.prompt)
    tail = (
        ""
        if scored
        else " The prompt already in the cache was decoded without its rows: the next"
        " prompt is scored."
    )
    s.note(f"Surprise map: {WHAT[s.surprise_scale]}.{tail}")
