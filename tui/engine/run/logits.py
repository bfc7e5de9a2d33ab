"""Logits: the row of n_vocab scores a decode call leaves for each token that asked for one.

``llama_get_logits_ith`` points into the context's output buffer, which the next decode
overwrites, so every row is copied out. A record keeps the top candidates and the entropy of
the full distribution; the rows themselves are remembered by context length, so a rewind finds
the logits of the new last position without recomputing them.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict

import llama_cpp
import numpy as np

from ..model.errors import TokenstepError
from ..model.tokens import Vocab
from ..sampler.sampling import top_stats
from .step import Candidate, StepRecord

TOP_N = 10
LOGITS_KEEP = 64  # logits kept for rewinding without recomputation


def read_row(ctx: llama_cpp.llama_context_p, i: int, n_vocab: int) -> np.ndarray:
    """A copy of logits row ``i`` of the last decode (-1: the last row). One memmove into a
    new array (``np.ctypeslib.as_array`` builds a ctypes array type on every call)."""
    ptr = llama_cpp.llama_get_logits_ith(ctx, i)
    if not ptr:
        raise TokenstepError(f"llama.cpp has no logits for row {i}.")
    out = np.empty(n_vocab, dtype=np.float32)
    ctypes.memmove(out.ctypes.data, ptr, out.nbytes)
    return out


def top_candidates(logits: np.ndarray, vocab: Vocab) -> tuple[list[Candidate], float]:
    """The record's top-N candidates and the entropy of the full distribution."""
    top, p, entropy = top_stats(logits, TOP_N)
    piece = vocab.piece
    return [
        Candidate(t, piece(t), float(logits[t]), pt)
        for t, pt in zip(top.tolist(), p.tolist(), strict=True)
    ], entropy


def observe_row(rec: StepRecord, logits: np.ndarray, vocab: Vocab) -> None:
    """A record's views of its logits row: the top candidates and the entropy."""
    rec.note_views(*top_candidates(logits, vocab))


class LogitsMemory:
    """Sequence 0's current logits row, the record that produced it, and the rows of the last
    ``LOGITS_KEEP`` context lengths (the rewind memory)."""

    def __init__(self) -> None:
        self.logits: np.ndarray | None = None
        self.record: int | None = None
        self._by_len: OrderedDict[int, tuple[np.ndarray, int]] = OrderedDict()

    def set(self, logits: np.ndarray, record: int, n_past: int) -> None:
        self.logits = logits
        self.record = record
        self._by_len[n_past] = (logits, record)
        self._by_len.move_to_end(n_past)
        while len(self._by_len) > LOGITS_KEEP:
            self._by_len.popitem(last=False)

    def truncate(self, n_keep: int) -> None:
        """The context now holds ``n_keep`` tokens: forget longer contexts' rows and restore the
        one for ``n_keep`` if it is remembered (else there are no logits until a decode)."""
        for key in [k for k in self._by_len if k > n_keep]:
            del self._by_len[key]
        if n_keep in self._by_len:
            self.logits, self.record = self._by_len[n_keep]
        else:
            self.logits, self.record = None, None

    def shifted(self, n_past: int) -> None:
        """After a context shift: remembered logits belonged to contexts that are gone;
        the current row stays valid for the pick it is used for (llama.cpp also samples before
        it shifts)."""
        self._by_len.clear()
        if self.logits is not None and self.record is not None:
            self._by_len[n_past] = (self.logits, self.record)

    def clear(self) -> None:
        self.logits, self.record = None, None
        self._by_len.clear()
