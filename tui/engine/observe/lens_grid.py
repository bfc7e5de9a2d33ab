"""The logit lens over every position of a decode: a position x layer grid of the top-1 and
its p, as interpretability tools draw it.

The per-step lens (:mod:`tui.engine.observe.lens_capture`) projects the predicted row only;
the grid copies each ``l_out-N`` whole (n_embd x the ubatch's rows). Before the last layer
llama.cpp keeps only the rows with logits (``inp_out_ids``), so ``trace --lens-grid`` and the
app decode prompts with logits on every row (as the surprise map does); a position without
logits gets no last-layer cell (None). Each position costs one per-step lens (n_layer x
n_vocab x n_embd multiply-adds: about 0.85 G on SmolLM2, 100 to 200 ms here), so a decode's
grid covers its last :data:`GRID_MAX` positions and says how many it left out.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.tokens import display_bytes
from ..run.logits import read_row

if TYPE_CHECKING:
    from ..model.lens import LensHead
    from ..model.tokens import Vocab
    from ..run.batch import DecodeCall

GRID_MAX = 64


def hidden_by_token(
    call: DecodeCall, rows: dict[int, dict[int, np.ndarray]], n_layer: int
) -> list[list[np.ndarray | None]]:
    """Per token of ``call``, per layer, its ``l_out`` row (None: the last layer of a token
    without logits). ``rows[layer][ubatch]`` is that ubatch's whole (n_rows, n_embd) copy."""
    out: list[list[np.ndarray | None]] = [[None] * n_layer for _ in call.tokens]
    last = n_layer - 1
    for g, (a, b) in enumerate(call.ubatches or [(0, call.n_tokens)]):
        for layer in range(n_layer):
            m = rows.get(layer, {}).get(g)
            if m is None:
                continue
            if layer < last or m.shape[0] == b - a:
                idx = list(range(a, b))
            else:  # the last layer: the rows with logits, in order
                idx = [j for j in range(a, b) if call.tokens[j].logits]
            for r, j in enumerate(idx[: m.shape[0]]):
                out[j][layer] = m[r]
    return out


def grid_figures(
    head: LensHead,
    call: DecodeCall,
    rows: dict[int, dict[int, np.ndarray]],
    n_layer: int,
    ctx: Any,
    vocab: Vocab,
) -> dict[str, Any]:
    """The grid of one decode: per position its token, and per layer the lens's top-1 id,
    piece and p (temperature 1); per position the last layer's max |Δ| against llama.cpp's
    own logits row and the bound the head's activation rounding puts on it (None without a
    row, or without a bound for the head's type)."""
    n_vocab = vocab.n_vocab
    hidden = hidden_by_token(call, rows, n_layer)
    t0 = time.perf_counter()
    start = max(0, call.n_tokens - GRID_MAX)
    grid: dict[str, Any] = {
        "pos": [],
        "token": [],
        "top1": [],
        "top1_piece": [],
        "p": [],
        "max_abs_diff": [],
        "rounding_bound": [],  # per position, what the head's 8-bit rounding allows
        "left_out": start,
    }
    n_v = min(head.out.shape[0], n_vocab)
    for j in range(start, call.n_tokens):
        present = [(i, h) for i, h in enumerate(hidden[j]) if h is not None]
        if not present:
            continue
        have = [i for i, _ in present]
        logits = head.project(np.stack([h for _, h in present]))[:, :n_v]
        m = logits.max(axis=1)
        z = np.exp(logits - m[:, None], dtype=np.float32).sum(axis=1, dtype=np.float64)
        top = logits.argmax(axis=1)
        ids: list[int | None] = [None] * n_layer
        ps: list[float | None] = [None] * n_layer
        for k, i in enumerate(have):
            ids[i] = int(top[k])
            ps[i] = round(float(1.0 / z[k]), 6)
        diff = bound = None
        if call.tokens[j].logits and n_layer - 1 in have:
            final = read_row(ctx, j, n_vocab)[:n_v]
            diff = round(float(np.abs(logits[have.index(n_layer - 1)] - final).max()), 5)
            last = hidden[j][n_layer - 1]
            bound = None if last is None else head.rounding_bound(last)
        tok = call.tokens[j]
        grid["pos"].append(tok.pos)
        grid["token"].append(tok.id)
        grid["top1"].append(ids)
        grid["top1_piece"].append(
            [None if t is None else display_bytes(vocab.piece(t)) for t in ids]
        )
        grid["p"].append(ps)
        grid["max_abs_diff"].append(diff)
        grid["rounding_bound"].append(None if bound is None else round(bound, 5))
    grid["ms"] = round((time.perf_counter() - t0) * 1000.0, 3)
    return grid
