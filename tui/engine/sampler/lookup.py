"""Where one token stands at this step: its logit, p and rank in llama.cpp's logits row.

The logits pane lists 16 candidates; ``/p TEXT`` asks for any token. The rank is counted on
the whole row (``llama_get_logits_ith``, one float per vocabulary entry: 49,152 for SmolLM2),
1-based: 1 + the number of tokens with a strictly higher logit, so tied tokens share a rank.
p is the softmax of the raw row at temperature 1, the logits pane's p column. A remote server
sends only its top K as log-probabilities (``n_probs``): a token among them gets its log p and
rank within them; one outside them is only known to be below the K-th (:func:`standing_top_k`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .sampling import softmax


@dataclass(frozen=True)
class Standing:
    token: int
    rank: int | None  # 1-based; None: outside the top K a remote server sent
    ties: int  # other tokens with exactly this logit (they share the rank)
    logit: float | None  # the raw logit (None over HTTP: only log p is known)
    p: float | None  # softmax at T=1 (None: outside the known top K)
    n_vocab: int
    top_k: int | None = None  # the known top K over HTTP (None: the full row)
    below: float | None = None  # outside the top K: p is below this (the K-th's p)


def standing(logits: np.ndarray, token: int) -> Standing:
    """``token``'s logit, p and rank over the full logits row."""
    row = np.asarray(logits, dtype=np.float32)
    x = row[token]
    rank = int(np.count_nonzero(row > x)) + 1
    ties = int(np.count_nonzero(row == x)) - 1
    return Standing(token, rank, ties, float(x), float(softmax(row)[token]), int(row.size))


def standing_top_k(row: np.ndarray, known: np.ndarray, token: int) -> Standing:
    """The same over HTTP: ``row`` holds log p for the ``known`` ids (the server's top K) and a
    filler below them elsewhere, so only a token in ``known`` has a p and a rank."""
    lp = np.asarray(row, dtype=np.float64)
    ids = np.asarray(known, dtype=np.int64)
    k = int(ids.size)
    if token in set(ids.tolist()):
        x = lp[token]
        top = lp[ids]
        rank = int(np.count_nonzero(top > x)) + 1
        ties = int(np.count_nonzero(top == x)) - 1
        return Standing(token, rank, ties, None, float(np.exp(x)), int(lp.size), k)
    below = float(np.exp(lp[ids].min())) if k else None
    return Standing(token, None, 0, None, None, int(lp.size), k, below)
