"""Which tokens the logits pane lists, and the logit each one handed on.

The rows are the highest raw logits. A grammar may forbid all of them (it leaves 2 of 49,152):
then the rows it forbids, from the lowest up, give way to the best survivors by p′, as
llama-server's post-sampling probabilities list what the chain left. The pick always gets a
row (penalties can push it below the top 16).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..engine.sampler.chain_result import ChainResult


def with_survivors(
    logits: np.ndarray, chain: ChainResult, ids: list[int], p_top: list[float]
) -> tuple[list[int], list[float]]:
    """``ids`` (best raw logit first, p at temperature 1 beside them) with up to half the rows
    the grammar forbids given to the chain's best survivors; the pick always gets a row. A new
    row's p is exact arithmetic on the top row's: p_i = p_0 · exp(l_i − l_0)."""
    shown = set(ids)
    if not ids or (chain.allowed is None and chain.selected in shown):
        return ids, p_top  # nothing to add: the usual case costs nothing
    order = np.argsort(-chain.final_p, kind="stable")
    extra = [chain.selected] if chain.selected not in shown else []
    room = max(len(ids) // 2, 1)
    for t in chain.final_ids[order].tolist():
        if len(extra) >= room:
            break
        if t not in shown and t not in extra and chain.cut_by(int(t)) is None:
            extra.append(int(t))
    # Survivors take the places of rows the grammar forbids, from the lowest up; no other
    # cut row gives way (the rows XTC or top-k removed are the lesson). The pick always gets
    # a row: the last, if no forbidden row is left.
    cut = chain.cut_by_many(ids)
    drop = [i for i in range(len(ids) - 1, 0, -1) if cut[i] == "grammar"][: len(extra)]
    if chain.selected not in shown and not drop:
        drop = [len(ids) - 1]
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
