"""Batch: every token that goes into ``llama_decode`` with its ``pos``, ``seq_id`` and logits flag.

A prompt longer than ``n_batch`` is cut into several decode calls. Inside one call, llama.cpp
cuts the batch again into micro-batches (ubatches) of at most ``n_ubatch`` tokens, which is the
unit the compute graph is actually built and run for. The plan records both levels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import llama_cpp


@dataclass(frozen=True)
class BatchToken:
    id: int
    pos: int
    seq_ids: tuple[int, ...]
    logits: bool


@dataclass
class DecodeCall:
    """One ``llama_decode`` call: its tokens and the ubatch chunks llama.cpp splits it into."""

    tokens: list[BatchToken]
    ubatches: list[tuple[int, int]] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


def ubatch_chunks(n_tokens: int, n_ubatch: int) -> list[tuple[int, int]]:
    """[start, end) of each ubatch: llama.cpp's simple split for a single sequence."""
    return [(i, min(i + n_ubatch, n_tokens)) for i in range(0, n_tokens, n_ubatch)]


def plan_prompt(
    tokens: list[int],
    start_pos: int,
    seq_ids: tuple[int, ...],
    n_batch: int,
    n_ubatch: int,
    *,
    all_logits: bool = False,
) -> list[DecodeCall]:
    """Split a prompt into decode calls of at most ``n_batch`` tokens. Only the prompt's last
    token asks for logits: that is the one row the next token is sampled from. With
    ``all_logits`` every token asks for its row (llama.cpp's perplexity tool does this to score
    each prompt token given the ones before it)."""
    calls: list[DecodeCall] = []
    n = len(tokens)
    for start in range(0, n, n_batch):
        chunk = tokens[start : start + n_batch]
        bts = [
            BatchToken(t, start_pos + start + i, seq_ids, all_logits or start + i == n - 1)
            for i, t in enumerate(chunk)
        ]
        calls.append(DecodeCall(bts, ubatch_chunks(len(bts), n_ubatch)))
    return calls


class LlamaBatch:
    """A ``llama_batch`` from ``llama_batch_init``, filled by hand so pos/seq_id are explicit."""

    def __init__(self, capacity: int, n_seq_max: int) -> None:
        self.capacity = capacity
        self.n_seq_max = n_seq_max
        self.batch = llama_cpp.llama_batch_init(capacity, 0, n_seq_max)

    def fill(self, call: DecodeCall) -> llama_cpp.llama_batch:
        b = self.batch
        if call.n_tokens > self.capacity:
            raise ValueError(f"batch of {call.n_tokens} tokens exceeds capacity {self.capacity}")
        for i, t in enumerate(call.tokens):
            b.token[i] = t.id
            b.pos[i] = t.pos
            b.n_seq_id[i] = len(t.seq_ids)
            for j, s in enumerate(t.seq_ids):
                b.seq_id[i][j] = s
            b.logits[i] = 1 if t.logits else 0
        b.n_tokens = call.n_tokens
        return b

    def free(self) -> None:
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
            self.batch = None
