"""The surprise map's control: which scale the text pane colours tokens by.

Off by default. Any other scale asks the engine to decode the next prompts with logits on
every row (``Engine.score_prompt``), so prompt tokens get a p too; what that costs is one
logits row of n_vocab floats per prompt token, and the output head's n_embd x n_vocab
multiply-adds for each of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.surprise import perplexity

if TYPE_CHECKING:
    from .parts import WorkerParts

SCALES = ("off", "p", "p'", "entropy")
WHAT = {
    "p": "p: each token's probability under the raw logits (temperature 1)",
    "p'": "p': each token's probability after the sampler chain (sampled tokens only)",
    "entropy": "entropy: bits of uncertainty of the step that produced each token",
}


def keep(w: WorkerParts) -> str:
    """After the state was made anew (a new chat) or the engine replaced (the lens's rebuild):
    the engine scores prompts exactly while the map shows a scale. Returns a sentence for
    the notice saying the map is still on (empty when it is off)."""
    w.engine.score_prompt = w.state.surprise_scale != "off" or w.lens.grid  # the grid too
    if w.state.surprise_scale == "off":
        return ""
    return (
        f" The surprise map stays on ({WHAT[w.state.surprise_scale].split(':')[0]}): the next "
        "prompt is scored; u cycles it, then off."
    )


def cycle(w: WorkerParts) -> None:
    s, eng = w.state, w.engine
    s.surprise_scale = SCALES[(SCALES.index(s.surprise_scale) + 1) % len(SCALES)]
    eng.score_prompt = s.surprise_scale != "off" or w.lens.grid
    if s.surprise_scale == "off":
        rows = (
            "the lens grid still decodes prompts with logits on every row"
            if w.lens.grid
            else "prompts are decoded with one logits row again"
        )
        s.note(f"Surprise map off; {rows}.")
        return
    scored = sum(1 for v in eng.surprise.along(eng.tokens) if v is not None and v.prompt)
    tail = (
        ""
        if scored
        else " The prompt already in the cache was decoded without its rows: the next"
        " prompt is scored."
    )
    s.note(f"Surprise map: {WHAT[s.surprise_scale]}.{tail}")


@dataclass(frozen=True)
class SurpriseView:
    """What the surprise map and the run-over-time chart draw, copied out of the engine."""

    scale: str  # "off", "p", "p'" or "entropy"
    # per context token of sequence 0: (p, p', entropy), p' None for a prompt token; None
    # where nothing is known (the first token, a prompt decoded with the map off)
    values: tuple[tuple[float, float | None, float] | None, ...] = ()
    prompt_ppl: float | None = None  # over the scored prompt tokens of the context
    prompt_scored: int = 0  # prompt tokens with a p
    prompt_tokens: int = 0  # prompt tokens in the context (before the reply)
    scored_rows: int = 0  # extra logits rows this chat's prefills asked for
    n_vocab: int = 0
    n_embd: int = 0

    @property
    def extra_bytes(self) -> int:
        """The extra rows in llama.cpp's output buffer (float32 logits)."""
        return self.scored_rows * self.n_vocab * 4

    @property
    def extra_macs(self) -> int:
        """The output head's multiply-adds for the extra rows (n_embd x n_vocab each)."""
        return self.scored_rows * self.n_embd * self.n_vocab


def surprise_view(w: WorkerParts, tokens: Sequence[int]) -> SurpriseView:
    s, eng = w.state, w.engine
    vals = tuple(
        None if v is None else (v.p, v.p_final, v.entropy) for v in eng.surprise.along(tokens)
    )
    start = s.reply_start if s.reply_start is not None else len(tokens)
    prompt = [v[0] for v in vals[:start] if v is not None]
    turns = eng.turns[s.turns_from :]
    return SurpriseView(
        s.surprise_scale,
        vals,
        perplexity(prompt),
        len(prompt),
        start,
        sum(t.scored_rows for t in turns),
        eng.info.n_vocab,
        eng.info.n_embd,
    )
