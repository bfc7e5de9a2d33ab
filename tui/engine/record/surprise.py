"""The surprise map: how expected each token of the context was when it came.

For a token at context index i (sequence 0), ``p`` is its probability under the logits row of
index i - 1 (softmax at temperature 1 over the whole vocabulary), ``p_final`` its probability
after the sampler chain (a sampled or forced token only: no chain runs for a prompt token) and
``entropy`` the entropy in bits of that row. A reply token's values are its pick in the run's
record (:class:`tui.engine.record.run_record.Pick`, written by
:func:`tui.engine.run.sequences.sample`); a prompt token's are kept here (:class:`SurpriseLog`)
only when the prompt was decoded with logits on every row, as llama.cpp's perplexity tool does
(``Engine.score_prompt``, or an observer's own context). :func:`along` joins the two: what the
surprise map and the run chart draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np

from .run_record import RunRecord

SCORE_CHUNK = 64  # logits rows turned into probabilities at once (64 x n_vocab floats)


@dataclass(frozen=True, slots=True)
class Surprise:
    token: int  # the token these values are about
    p: float
    p_final: float | None  # None for a prompt token
    entropy: float  # bits, of the row it was predicted from
    prompt: bool  # scored from a prompt's logits rows (not picked)


class SurpriseLog:
    """The scored prompt tokens' values by context index of sequence 0 (a picked token's
    values are its pick in the run's record). A value counts only while the token at its
    index is still the one it was computed for (:meth:`get` checks)."""

    def __init__(self) -> None:
        self._at: dict[int, Surprise] = {}

    def __len__(self) -> int:
        return len(self._at)

    def note(self, index: int, value: Surprise) -> None:
        self._at[index] = value

    def get(self, index: int, token: int) -> Surprise | None:
        got = self._at.get(index)
        return got if got is not None and got.token == token else None

    def along(self, tokens: Sequence[int]) -> list[Surprise | None]:
        """One value (or None) per token of ``tokens`` (sequence 0's context, oldest first)."""
        return [self.get(i, t) for i, t in enumerate(tokens)]

    def truncate(self, n_keep: int) -> None:
        """The context now holds ``n_keep`` tokens: later indices are gone."""
        for k in [k for k in self._at if k >= n_keep]:
            del self._at[k]

    def shift(self, n_keep: int, n_discard: int) -> None:
        """A context shift forgot indices [n_keep, n_keep + n_discard); later ones move down."""
        moved: dict[int, Surprise] = {}
        for k, v in self._at.items():
            if k < n_keep:
                moved[k] = v
            elif k >= n_keep + n_discard:
                moved[k - n_discard] = v
        self._at = moved

    def clear(self) -> None:
        self._at.clear()


def along(run: RunRecord, scores: SurpriseLog, tokens: Sequence[int]) -> list[Surprise | None]:
    """Per token of sequence 0's context: its pick in the record, else its prompt score."""
    out: list[Surprise | None] = []
    for i, (pick, t) in enumerate(zip(run.picks_along(list(tokens)), tokens, strict=True)):
        if pick is not None:
            out.append(Surprise(t, pick.p, pick.p_final, pick.entropy, False))
        else:
            out.append(scores.get(i, t))
    return out


def score_rows(
    ctx: llama_cpp.llama_context_p, n_rows: int, targets: Sequence[int | None], n_vocab: int
) -> list[tuple[float, float] | None]:
    """For logits rows 0..n_rows-1 of the last decode, (p of ``targets[j]``, entropy in bits)
    of row j, or None where the target is unknown. Log-softmax in float64 per chunk of rows."""
    out: list[tuple[float, float] | None] = []
    for start in range(0, n_rows, SCORE_CHUNK):
        end = min(start + SCORE_CHUNK, n_rows)
        rows = np.stack(
            [
                np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, j), shape=(n_vocab,))
                for j in range(start, end)
            ]
        ).astype(np.float64)
        rows -= rows.max(axis=1, keepdims=True)
        e = np.exp(rows)
        z = e.sum(axis=1)
        log_z = np.log(z)
        h = (log_z - (e * rows).sum(axis=1) / z) / math.log(2.0)
        for k, j in enumerate(range(start, end)):
            t = targets[j]
            if t is None:
                out.append(None)
            else:
                out.append((math.exp(rows[k, t] - log_z[k]), max(float(h[k]), 0.0)))
    return out


def perplexity(ps: Sequence[float]) -> float | None:
    """exp of the mean negative log probability (llama.cpp's perplexity), None without data."""
    if not ps:
        return None
    return math.exp(-sum(math.log(max(p, 1e-300)) for p in ps) / len(ps))
