"""Two llama.cpp contexts fed the same tokens in lockstep, compared position by position.

Each side is the engine's building blocks (a :class:`~tui.engine.model.model.Model`, a
:class:`~tui.engine.model.context.Context` from an :class:`EngineConfig`, a
:class:`~tui.engine.run.batch.LlamaBatch`), driven by one thread. A window is decoded by A (in
A's ``-b``), its rows copied, then by B; the rows are compared and dropped, so one window per
side is held. Teacher-forced: both sides get A's tokens. With ``chunks`` the text is scored as
``llama-perplexity --kl-divergence`` does: chunks of ``n_ctx`` tokens, each starting with BOS
(when the model adds one) from an empty cache, only rows ``n_ctx/2`` to ``n_ctx − 2``
compared. Positions are indices in the whole token list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import llama_cpp
import numpy as np

from ..engine import EngineConfig, Model
from ..engine.model.context import Context
from ..engine.model.errors import TokenstepError
from ..engine.model.kvcache import KVLayout
from ..engine.model.tokens import Vocab, display_bytes
from ..engine.run.batch import BatchToken, DecodeCall, LlamaBatch, ubatch_chunks
from ..engine.run.logits import read_row
from . import divergence
from .records import Position, Result, Side, Summary, TopEntry

TOP_K = 10


@dataclass
class SideSpec:
    """One configuration as the flags gave it."""

    label: str
    differs: tuple[str, ...]
    model: str | None
    config: EngineConfig
    repack: bool | None = None
    sampler: str = ""


class LocalSide:
    """A model (shared with the other side when the file and its load flags are the same) and
    a context of this side's own, holding one sequence."""

    def __init__(self, spec: SideSpec, model: Model) -> None:
        self.spec = spec
        self.model = model
        self.config = spec.config
        self.context = Context(model, spec.config)
        self.ctx = self.context.ctx
        self.n_vocab = model.info.n_vocab
        self.vocab = Vocab(model.vocab, self.n_vocab)
        self.batch = LlamaBatch(spec.config.n_batch, 1)
        i = model.info
        layout = KVLayout(
            i.n_layer, i.n_embd_k_gqa, i.n_embd_v_gqa, self.context.type_k, self.context.type_v
        )
        self.kv_bytes = layout.bytes_per_token * self.context.n_cells

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)

    def decode(self, tokens: Sequence[int], pos0: int, want: Sequence[bool]) -> np.ndarray:
        """Decode ``tokens`` at positions ``pos0...`` in calls of this side's ``-b``; returns
        the logits rows of the tokens ``want`` marks, in order (float32, one row each)."""
        rows = np.empty((sum(want), self.n_vocab), dtype=np.float32)
        k = 0
        nb, nu = self.config.n_batch, self.config.n_ubatch
        for s in range(0, len(tokens), nb):
            piece = tokens[s : s + nb]
            bts = [
                BatchToken(t, pos0 + s + i, (0,), bool(want[s + i])) for i, t in enumerate(piece)
            ]
            rc = llama_cpp.llama_decode(
                self.ctx, self.batch.fill(DecodeCall(bts, ubatch_chunks(len(bts), nu)))
            )
            if rc != 0:
                raise TokenstepError(f"llama_decode failed with code {rc} ({self.spec.label}).")
            for i, bt in enumerate(bts):
                if bt.logits:  # llama_get_logits_ith takes the batch index
                    rows[k] = read_row(self.ctx, i, self.n_vocab)
                    k += 1
        return rows

    def describe(self) -> Side:
        c = self.config
        return Side(
            label=self.spec.label,
            differs=self.spec.differs,
            model=str(self.model.path),
            n_ctx=self.context.n_ctx,
            n_batch=c.n_batch,
            n_ubatch=c.n_ubatch,
            flash_attn=self.context.flash_attn_resolved,
            type_k=c.cache_type_k,
            type_v=c.cache_type_v,
            kv_bytes=self.kv_bytes,
            sampler=self.spec.sampler,
        )

    def free(self) -> None:
        self.batch.free()
        self.context.free()


def same_vocab(a: Vocab, b: Vocab) -> str | None:
    """Why B's vocabulary is not A's (another size, or another piece for some id), or None."""
    if a.n_vocab != b.n_vocab:
        return f"its vocabulary has {b.n_vocab:,} tokens and A's has {a.n_vocab:,}"
    for t in range(a.n_vocab):
        if a.piece(t) != b.piece(t):
            return (
                f"token {t} is {display_bytes(b.piece(t))!r} there and "
                f"{display_bytes(a.piece(t))!r} in A's"
            )
    return None


@dataclass(frozen=True)
class DecodeSpan:
    """One decode from an empty cache: ``tokens`` at positions 0..; rows from ``first`` to
    ``len(tokens) − 2`` are compared; ``offset`` maps a row to its index in the whole text."""

    tokens: tuple[int, ...]
    first: int
    offset: int


def spans(
    tokens: Sequence[int], n_ctx: int, *, chunks: bool, bos: int | None, score_from: int = 0
) -> list[DecodeSpan]:
    """The decodes a run makes. With ``chunks``, llama-perplexity's: ``len(tokens) // n_ctx``
    chunks, each with its first token replaced by ``bos`` (when the model adds one), scoring
    from ``n_ctx // 2``. Without, one decode of the whole text (it must fit in ``n_ctx``),
    scoring from ``score_from``."""
    if chunks:
        n_chunk = len(tokens) // n_ctx
        if n_chunk < 1:
            raise TokenstepError(
                f"--chunks needs at least -c ({n_ctx}) tokens; the text has {len(tokens)}."
            )
        out = []
        for i in range(n_chunk):
            chunk = list(tokens[i * n_ctx : (i + 1) * n_ctx])
            if bos is not None:
                chunk[0] = bos
            out.append(DecodeSpan(tuple(chunk), n_ctx // 2, i * n_ctx))
        return out
    if len(tokens) > n_ctx:
        raise TokenstepError(
            f"the text is {len(tokens)} tokens and the context holds {n_ctx}; raise -c or "
            "score it in chunks as llama-perplexity does (--chunks)."
        )
    if len(tokens) < 2:
        raise TokenstepError("the text must be at least 2 tokens: one to predict from, one next.")
    return [DecodeSpan(tuple(tokens), min(max(0, score_from), len(tokens) - 2), 0)]


def n_compared(run: Sequence[DecodeSpan]) -> int:
    """How many positions ``run``'s spans compare: rows ``first`` to ``len − 2`` of each."""
    return sum(len(s.tokens) - 1 - s.first for s in run)


def candidates(ids: np.ndarray, logits: np.ndarray, logp: np.ndarray, vocab: Vocab) -> tuple:
    return tuple(
        TopEntry(
            int(t), display_bytes(vocab.piece(int(t))), float(logits[t]), float(np.exp(logp[t]))
        )
        for t in ids
    )


class RowSource(Protocol):
    """What lockstep reads A's rows from: a context (:class:`LocalSide`) or a stored base
    (:mod:`tui.compare.kld_base`)."""

    config: EngineConfig
    vocab: Vocab

    def clear(self) -> None: ...

    def decode(self, tokens: Sequence[int], pos0: int, want: Sequence[bool]) -> np.ndarray: ...


@dataclass
class Lockstep:
    """Side A and side B over the same spans. ``b`` is ``None`` when B differs from A only in
    its sampler: the logits are A's, shared."""

    a: RowSource
    b: RowSource | None
    top_k: int = TOP_K
    on_position: Callable[[Position], None] | None = None
    positions: list[Position] = field(default_factory=list)

    def windows(self, span: DecodeSpan) -> Iterator[tuple[int, int]]:
        w = max(self.a.config.n_batch, self.b.config.n_batch if self.b else 0)
        for s in range(0, len(span.tokens), w):
            yield s, min(s + w, len(span.tokens))

    def run_span(self, span: DecodeSpan) -> None:
        a, b = self.a, self.b
        a.clear()
        if b is not None:
            b.clear()
        n = len(span.tokens)
        want = [span.first <= j <= n - 2 for j in range(n)]
        for s, e in self.windows(span):
            ra = a.decode(span.tokens[s:e], s, want[s:e])
            rb = b.decode(span.tokens[s:e], s, want[s:e]) if b is not None else ra
            rows = [j for j in range(s, e) if want[j]]
            for r, j in enumerate(rows):
                self.record(span.tokens, j, ra[r], rb[r], offset=span.offset)

    def record(
        self,
        tokens: Sequence[int],
        j: int,
        la: np.ndarray,
        lb: np.ndarray,
        *,
        offset: int = 0,
        token_b: int | None = None,
    ) -> None:
        """Compare the rows of batch position ``j`` (its next token is ``tokens[j + 1]``)."""
        token = tokens[j + 1]
        d = divergence.compare_rows(la, lb, token, self.top_k)
        va = self.a.vocab
        vb = self.b.vocab if self.b is not None else va
        pos = Position(
            position=offset + j,
            token=int(token),
            piece=display_bytes(va.piece(token)),
            kl=d.kl,
            top1_a=d.top1_a,
            top1_b=d.top1_b,
            same_top=d.top1_a == d.top1_b,
            rank_in_b=d.rank_in_b,
            p_a=d.p_a,
            p_b=d.p_b,
            dp=d.p_b - d.p_a,
            max_abs_dlogit=d.max_abs_dlogit,
            top_a=candidates(d.top_a, la, d.logp_a, va),
            top_b=candidates(d.top_b, lb, d.logp_b, va),
            token_b=token_b,
            piece_b=display_bytes(vb.piece(token_b)) if token_b is not None else None,
        )
        self.positions.append(pos)
        if self.on_position is not None:
            self.on_position(pos)

    def result(self, tokens: Sequence[int], side_a: Side, side_b: Side) -> Result:
        ps = self.positions
        st = divergence.stats(
            [p.position for p in ps], [p.kl for p in ps], [p.same_top for p in ps]
        )
        summary = Summary(**vars(st), a=side_a, b=side_b, shared_logits=self.b is None)
        va = self.a.vocab
        return Result(
            tokens=tuple(int(t) for t in tokens),
            pieces=tuple(display_bytes(va.piece(int(t))) for t in tokens),
            positions=tuple(ps),
            summary=summary,
        )


def greedy_continuation(side: LocalSide, prompt: Sequence[int], n: int) -> list[int]:
    """A's own greedy generation: the prompt, then ``n`` argmax picks, one decode each
    (stopping at an end-of-generation token or a full context)."""
    side.clear()
    toks = list(prompt)
    row = side.decode(toks, 0, [j == len(toks) - 1 for j in range(len(toks))])[0]
    for _ in range(n):
        t = int(np.argmax(row))
        if side.vocab.is_eog(t) or len(toks) >= side.context.n_ctx:
            break
        toks.append(t)
        row = side.decode([t], len(toks) - 1, [True])[0]
    return toks
