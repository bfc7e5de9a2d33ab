"""Free-running comparison (``--free``): each side generates with its own sampler chain and seed.

Both contexts decode the prompt; then at every step each side's chain (the engine's
:class:`~tui.engine.sampler.sampling.SamplerChain`, the whole chain as a pick runs it, with the prompt
and the side's own picks as history) picks from that side's own logits, and each side is fed its
own pick. Until the texts part the two contexts hold the same tokens, so the KL at a step is
what the configurations change; the first step whose picks differ is ``parted_at``, and that
position's two candidate lists say why. After it each side continues its own text, and the KL
compares the two next-token distributions at the same step of two different texts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from ..engine import SamplerSettings
from ..engine.model.tokens import display_bytes
from ..engine.sampler.sampling import SamplerChain
from .lockstep import LocalSide, Lockstep
from .records import Position, Result, Side


def free_run(
    a: LocalSide,
    b: LocalSide,
    prompt: Sequence[int],
    n: int,
    settings: tuple[SamplerSettings, SamplerSettings],
    sides: Callable[[], tuple[Side, Side]],
    on_position: Callable[[Position], None] | None = None,
) -> Result:
    run = Lockstep(a, b, on_position=on_position)
    chains = [
        SamplerChain(s.n_vocab, st.seed, s.model.vocab, s.context.n_ctx)
        for s, st in zip((a, b), settings, strict=True)
    ]
    texts: list[list[int]] = [list(prompt), list(prompt)]
    try:
        rows = []
        for side, toks in zip((a, b), texts, strict=True):
            side.clear()
            rows.append(side.decode(toks, 0, [j == len(toks) - 1 for j in range(len(toks))])[0])
        parted: int | None = None
        for _ in range(n):
            pos = len(texts[0]) - 1
            picks = [
                chain.run(row, st, commit=True, history=toks).selected
                for chain, row, st, toks in zip(chains, rows, settings, texts, strict=True)
            ]
            span_tokens = (*texts[0], picks[0])
            run.record(span_tokens, pos, rows[0], rows[1], token_b=picks[1])
            if parted is None and picks[0] != picks[1]:
                parted = pos
            done = False
            for i, (side, toks) in enumerate(zip((a, b), texts, strict=True)):
                toks.append(picks[i])
                if side.vocab.is_eog(picks[i]) or len(toks) >= side.context.n_ctx:
                    done = True
            if done:
                break
            rows = [
                side.decode([toks[-1]], len(toks) - 1, [True])[0]
                for side, toks in zip((a, b), texts, strict=True)
            ]
    finally:
        for chain in chains:
            chain.free()
    side_a, side_b = sides()
    result = run.result(texts[0], side_a, side_b)
    va = a.vocab
    summary = dataclasses.replace(
        result.summary,
        mode="free",
        parted_at=parted,
        text_a=display_bytes(b"".join(va.piece(t) for t in texts[0][len(prompt) :])),
        text_b=display_bytes(b"".join(va.piece(t) for t in texts[1][len(prompt) :])),
    )
    return dataclasses.replace(result, summary=summary)
