"""Which tokens the logits pane lists, and the logit each one handed on.

The rows are the highest raw logits. When the chain's own survivors are not among them (a
grammar leaves 2 of 49,152; penalties push the pick below the top 16), the last rows give way to
the best survivors by p′, so the ★ always stands on a row, as llama-server's post-sampling
probabilities list what the chain left.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..engine.chain_result import ChainResult


def with_survivors(
    logits: np.ndarray, chain: ChainResult, ids: list[int], p_top: list[float]
) -> tuple[list[int], list[float]]:
    """``ids`` (best raw logit first, p at temperature 1 beside them) with up to half the rows
    given to the chain's best survivors not among them; the pick always gets a row. A new row's
    p is exact arithmetic on the top row's: p_i = p_0 · exp(l_i − l_0)."""
    if not ids:
        return ids, p_top
    shown = set(ids)
    order = np.argsort(-chain.final_p, kind="stable")
    extra = [chain.selected] if chain.selected not in shown else []
    room = max(len(ids) // 2, 1)
    for t in chain.final_ids[order].tolist():
        if len(extra) >= room:
            break
        if t not in shown and t not in extra and chain.cut_by(int(t)) is None:
            extra.append(int(t))
    # they take the places of rows the chain cut, from the lowest up (never the pick's)
    cut = chain.cut_by_many(ids)
    drop = [i for i in range(len(ids) - 1, 0, -1) if cut[i] is not None][: len(extra)]
    if chain.selected not in shown and not drop:
        drop = [len(ids) - 1]  # the pick ranks below 16 survivors: it takes the last row
    extra = extra[: len(drop)]
    if not extra:
        return ids, p_top
    keep = [i for i in range(len(ids)) if i not in set(drop)]
    l0, p0 = float(logits[ids[0]]), p_top[0]
    extra_p = [p0 * float(np.exp(float(logits[t]) - l0)) for t in extra]
    return [ids[i] for i in keep] + extra, [p_top[i] for i in keep] + extra_p


def moved_logits(logits: np.ndarray, chain: ChainResult, ids: list[int]) -> list[float | None]:
    """The logit each row handed on past logit bias, penalties and DRY, or None when no stage
    moved one (the pane then leaves the column out)."""
    if not chain.moved():
        return [None] * len(ids)
    after = chain.handed_on(logits)
    return [float(after[t]) for t in ids]
