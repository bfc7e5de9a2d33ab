"""The surprise map's control: which scale the text pane colours tokens by.

Off by default. Any other scale asks the worker's observer context (:mod:`.observers`) to
replay the run's prompts with logits on every row, so prompt tokens get a p too; the run's
own context decodes exactly as it would without the map. What that costs is the observer's
replay of every decode, one logits row of n_vocab floats per prompt token, and the output
head's n_embd x n_vocab multiply-adds for each of them. Over llama-server there is no local
context: only the picked tokens have a p (from the server's top K), and the notice says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.record.surprise import along, perplexity

if TYPE_CHECKING:
    from .parts import WorkerParts

SCALES = ("off", "p", "p'", "entropy")
WHAT = {
    "p": "p: each token's probability under the raw logits (temperature 1)",
    "p'": "p': each token's probability after the sampler chain (sampled tokens only)",
    "entropy": "entropy: bits of uncertainty of the step that produced each token",
}


NO_PROMPT = (
    " Over llama-server the prompt is not scored (it needs every row's logits, which only a "
    "local model gives): only picked tokens are coloured."
)


def keep(w: WorkerParts) -> str:
    """After the state was made anew (a new chat): the observer scores prompts exactly while
    the map shows a scale. Returns a sentence for the notice saying the map is still on
    (empty when it is off)."""
    if w.state.surprise_scale == "off":
        return ""
    name = WHAT[w.state.surprise_scale].split(":")[0]
    tail = NO_PROMPT if not w.observers.local else " Prompts are scored in the observer context."
    return f" The surprise map stays on ({name}); u cycles it, then off.{tail}"


def cycle(w: WorkerParts) -> None:
    s = w.state
    s.scale(SCALES[(SCALES.index(s.surprise_scale) + 1) % len(SCALES)])
    on = s.surprise_scale != "off"
    if not w.observers.local:
        s.note(f"Surprise map: {WHAT[s.surprise_scale]}.{NO_PROMPT}" if on else "Surprise map off.")
        return
    if not on:
        w.observers.want(score=False)
        s.note("Surprise map off; the observer context stops scoring prompts.")
        return
    fresh = not w.observers.wants.score
    w.observers.want(score=True)
    if fresh:
        w.observers.fill("Surprise map")
    ctx = w.observers.ctx
    where = f" Prompt rows come from an {ctx.describe()}." if ctx is not None else ""
    s.note(f"Surprise map: {WHAT[s.surprise_scale]}.{where}")


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
    scores_prompts: bool = True  # False over llama-server: a prompt never gets a p there
    # context indices whose pick saw only the server's top K (the record's partial picks):
    # p is the server's, the entropy an upper bound
    partial: frozenset[int] = frozenset()

    @property
    def extra_bytes(self) -> int:
        """The extra rows in llama.cpp's output buffer (float32 logits)."""
        return self.scored_rows * self.n_vocab * 4

    @property
    def extra_macs(self) -> int:
        """The output head's multiply-adds for the extra rows (n_embd x n_vocab each)."""
        return self.scored_rows * self.n_embd * self.n_vocab


def catch_up(w: WorkerParts) -> int:
    """While the map shows, the observer's replay scores the prompts the run decoded;
    returns the prompt rows it scored so far (0: none)."""
    if w.state.surprise_scale != "off" and w.observers.wants.score:
        ctx = w.observers.ready()
        return ctx.scored_rows if ctx is not None else 0
    return 0


def surprise_view(w: WorkerParts, tokens: Sequence[int]) -> SurpriseView:
    s, eng = w.state, w.engine
    catch_up(w)
    vals = tuple(  # a pick's values are the record's; a prompt token's its score
        None if v is None else (v.p, v.p_final, v.entropy) for v in along(eng.run, eng.surprise, tokens)
    )
    picks = eng.run.picks_along(list(tokens))
    partial = frozenset(i for i, pk in enumerate(picks) if pk is not None and pk.partial)
    start = s.reply_start if s.reply_start is not None else len(tokens)
    prompt = [v[0] for v in vals[:start] if v is not None]
    ctx = w.observers.ctx
    return SurpriseView(
        s.surprise_scale,
        vals,
        perplexity(prompt),
        len(prompt),
        start,
        ctx.scored_rows if ctx is not None and w.observers.wants.score else 0,
        eng.info.n_vocab,
        eng.info.n_embd,
        w.observers.local,
        partial,
    )
