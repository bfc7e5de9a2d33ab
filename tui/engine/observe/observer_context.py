"""An observer's own ``llama_context``: looking never changes the run.

Attention, the logit lens, its grid and the scored prompt need an eval callback, flash
attention off or logits on rows the run did not ask for, and llama.cpp fixes the callback and
the kernel when a context is made. So :class:`ObserverContext` makes a second context from the
same model (same sizes and cache types, its callback, flash attention off for attention) and
runs the engine's ``llama_decode`` calls and memory edits again from its
:class:`~tui.engine.run.replay.ReplayLog`: with the same kernel every row is bit for bit the
engine's; through the other kernel the pane says so. It catches up lazily
(:meth:`ObserverContext.catch_up`) on the engine's thread, telling a caller how far it is
(:class:`ReplayProgress`, its own counts); its memory (one more KV cache and compute buffer) is
checked before it is made.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.errors import TokenstepError
from ..model.rules import v_cache_needs_flash_attn
from ..record.surprise import Surprise, score_rows
from ..run import replay
from ..run.batch import BatchToken, DecodeCall
from ..run.decode import decode
from ..run.replay import DecodeOp, MemoryOp, ReplayLog
from ..run.session import Engine
from .attention_capture import AttentionCapture
from .lens_capture import AttentionLensCapture, LensCapture
from .lens_grid import GRID_MAX

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..model.lens import LensHead
    from ..run.backend import LocalSession
    from ..run.step import StepRecord

LENS_TAIL = 2  # decodes at the end of a catch-up that get the lens: the two the pane shows
MAP_KEEP = 1024  # engine record -> observer record entries kept (the panes look back less)


@dataclass(frozen=True)
class Wants:
    """What the panes ask of the observer context."""

    layers: tuple[int, ...] = ()  # attention layers captured (empty: no attention)
    lens: bool = False
    grid: bool = False
    census: bool = False
    score: bool = False  # prompts decoded with logits on every row (surprise map)

    @property
    def any(self) -> bool:
        return bool(self.layers or self.lens or self.grid or self.score or self.census)


@dataclass(frozen=True)
class ReplayProgress:
    """How far a catch-up is: operations (decodes and memory edits) and the decodes' tokens
    run here, of those it set out to run."""

    ops: int
    ops_total: int
    tokens: int
    tokens_total: int

    @property
    def done(self) -> bool:
        return self.ops == self.ops_total

    def describe(self) -> str:
        return (
            f"{self.ops:,} of {self.ops_total:,} operation(s), "
            f"{self.tokens:,} of {self.tokens_total:,} token(s)"
        )


class ObserverEngine(Engine):
    """The observer's session on its own context: it only runs the engine's calls again."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replay = ReplayLog(on=False)

    def set_seq_logits(self, seq: int, logits: np.ndarray, record: int) -> None:
        if seq == 0:  # a fork's rows are read by the engine, not here
            super().set_seq_logits(seq, logits, record)


def _capture(main: LocalSession, wants: Wants) -> LensCapture | AttentionCapture | None:
    n_layer = main.info.n_layer
    lens = wants.lens or wants.grid
    if wants.layers:
        return AttentionLensCapture(
            n_layer=n_layer, layers=list(wants.layers), census=wants.census, lens=lens
        )
    if lens or wants.census:
        return LensCapture(n_layer=n_layer, census=wants.census, lens=lens)
    return None


class ObserverContext:
    """A context of its own that replays the engine's decode calls (worker thread only)."""

    def __init__(
        self,
        main: LocalSession,
        wants: Wants,
        head: LensHead | None = None,
        head_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.main = main
        self.wants = wants
        fa = "off" if wants.layers else main.config.flash_attn
        # llama.cpp refuses a quantized V cache without flash attention: the capture's own
        # context then holds V in f16 (K keeps the run's type: the weights are softmax(QKᵀ))
        type_v = main.config.cache_type_v
        if wants.layers and v_cache_needs_flash_attn(type_v):
            type_v = "f16"
        config = dataclasses.replace(
            main.config, flash_attn=fa, cache_type_v=type_v, context_full="stop"
        )
        cap = _capture(main, wants)
        self.capture = cap
        self.engine = ObserverEngine(main.model, config, main.settings, [cap] if cap else [])
        self.cursor: tuple[int, int] | None = None  # the engine's log up to here has run
        self.by_main: dict[int, int] = {}  # engine record index -> observer record index
        self.replayed = 0  # decodes run here so far
        self.replay_ms = 0.0
        self.scored_rows = 0  # extra logits rows asked for to score prompts
        self.problem: str | None = None
        self.lens_from: int | None = None  # the lens also for engine records from here on
        # engine records replayed with logits on every row (to score or for the grid): their
        # last row went through other output shapes, so it may differ in the last bits
        self.widened: set[int] = set()
        if isinstance(cap, LensCapture) and (wants.lens or wants.grid):
            if head is not None:
                cap.use_head(head)
            # the one-time head read, before any decode is timed (progress: bytes read of all)
            cap.lens_head(self.engine, head_progress)

    @property
    def head(self) -> LensHead | None:
        """The lens's head as float32, once read (kept when the context is made anew)."""
        return self.capture.head if isinstance(self.capture, LensCapture) else None

    # -- what it is ----------------------------------------------------------------------------
    @property
    def kernel(self) -> str:
        """Its attention kernel, beside the engine's."""
        mine, theirs = self.engine.flash_attn_resolved, self.main.flash_attn_resolved
        v_mine, v_theirs = self.engine.config.cache_type_v, self.main.config.cache_type_v
        if mine == theirs and v_mine == v_theirs:
            return f"flash attention {mine} as the run's (its rows are the run's, bit for bit)"
        if v_mine == v_theirs:
            return f"flash attention {mine}, the run's {theirs} (the same batches, the other kernel)"
        return (
            f"flash attention {mine} with an {v_mine} V cache, the run's {theirs} with "
            f"{v_theirs} (the same batches, the other kernel and V type)"
        )

    @property
    def kv_bytes(self) -> int:
        return self.engine.kv_bytes_allocated

    def describe(self) -> str:
        """One line for the panes: what this context is and what it holds."""
        mib = self.kv_bytes / (1 << 20)
        return (
            f"observer context of its own, replaying the run's decodes: {self.kernel}; "
            f"KV {mib:.0f} MiB"
        )

    def brief(self) -> str:
        """The same in a few words (a pane's border)."""
        mib = self.kv_bytes / (1 << 20)
        return f"own context: flash attn {self.engine.flash_attn_resolved}, KV {mib:.0f} MiB"

    # -- catching up ---------------------------------------------------------------------------
    def pending(self) -> int:
        """Operations of the engine not run here yet."""
        cleared, ops = self.main.replay.since(self.cursor)
        return len(ops) + (1 if cleared and self.cursor is not None else 0)

    def catch_up(self, progress: Callable[[ReplayProgress], None] | None = None) -> int:
        """Run the engine's operations since the last catch-up; returns the decodes run.
        ``progress`` is told the counts before the first operation and after each one (the
        caller paces what it shows)."""
        if self.problem is not None:
            return 0
        cleared, ops = self.main.replay.since(self.cursor)
        tokens_total = sum(op.call.n_tokens for op in ops if isinstance(op, DecodeOp))
        tokens = 0
        if progress is not None:
            progress(ReplayProgress(0, len(ops), 0, tokens_total))
        if cleared:
            self.engine.reset()
            self.by_main.clear()
        self.cursor = self.main.replay.end
        decodes = [i for i, op in enumerate(ops) if isinstance(op, DecodeOp)]
        lens_from = decodes[-LENS_TAIL] if len(decodes) > LENS_TAIL else 0
        grid_pos = self._grid_from()
        n = 0
        try:
            for i, op in enumerate(ops):
                if isinstance(op, MemoryOp):
                    self._memory(op)
                else:
                    nxt = ops[i + 1] if i + 1 < len(ops) else None
                    lens = i >= lens_from or (
                        self.lens_from is not None and op.index >= self.lens_from
                    )
                    self._decode(op, lens=lens, grid_pos=grid_pos, nxt=nxt)
                    n += 1
                    tokens += op.call.n_tokens
                if progress is not None:
                    progress(ReplayProgress(i + 1, len(ops), tokens, tokens_total))
        except TokenstepError as exc:
            self.problem = f"the observer context stopped: {exc}"
        return n

    def _grid_from(self) -> int | None:
        """The grid covers the newest GRID_MAX positions of the engine's context."""
        if not self.wants.grid:
            return None
        pos = self.main.kv.positions(0)
        return pos[max(0, len(pos) - GRID_MAX)] if pos else None

    def _memory(self, op: MemoryOp) -> None:
        if not replay.apply(self.engine.ctx, op):
            raise TokenstepError(f"llama.cpp refused {op.name}{op.args} in the observer context")
        kv = self.engine.kv
        if op.name == "seq_rm":
            seq, p0, p1 = op.args
            kv.seq_rm(seq, p0, p1)
            if seq == 0:
                self.engine.logits_memory.truncate(kv.count(0))
        elif op.name == "seq_cp":
            kv.seq_cp(*op.args)
        else:
            kv.seq_add(*op.args)

    def _decode(
        self, op: DecodeOp, *, lens: bool, grid_pos: int | None, nxt: Any
    ) -> None:
        cap, eng = self.capture, self.engine
        call = op.call
        grid = grid_pos is not None and any(t.pos >= grid_pos for t in call.tokens)
        if isinstance(cap, LensCapture):
            cap.set_grid(grid)
            cap.set_lens(grid or (lens and self.wants.lens))
        # Logits on every prompt row: to score it, or so every row's l_out reaches the last
        # layer for the grid (llama.cpp keeps only rows with logits there).
        prompt = op.purpose == "prompt" and not op.seqs
        score = self.wants.score and prompt
        if (score or grid) and prompt and call.n_tokens > 1:
            self.widened.add(op.index)
            call = DecodeCall(
                [BatchToken(t.id, t.pos, t.seq_ids, True) for t in call.tokens], call.ubatches
            )
        first = self._first_score(call) if score else None
        n_past = eng.n_past
        seq_rows = [(s, call.tokens[i].id) for i, s in enumerate(op.seqs)]
        rec = decode(
            eng,
            call,
            phase=op.purpose,
            has_logits=op.has_logits,
            seq_rows=seq_rows,
            all_rows=op.all_rows,
            purpose=op.purpose,
        )
        self.replayed += 1
        self.replay_ms += rec.decode_ms
        self.by_main[op.index] = rec.index
        if len(self.by_main) > 2 * MAP_KEEP:
            keep = sorted(self.by_main)[-MAP_KEEP:]
            self.by_main = {k: self.by_main[k] for k in keep}
        if first is not None:
            self._note(n_past, first)
        if score and call.n_tokens > 1:
            self._score(call, n_past, nxt)

    # -- the scored prompt (surprise map) ------------------------------------------------------
    def _first_score(self, call: DecodeCall) -> Surprise | None:
        """The chunk's first token, from the row the context holds for the position before."""
        logits = self.engine.logits
        if logits is None or self.engine.n_past == 0:
            return None
        from ..sampler.sampling import entropy_bits, softmax

        t = call.tokens[0].id
        p = softmax(logits)
        return Surprise(t, float(p[t]), None, entropy_bits(p), True)

    def _score(self, call: DecodeCall, n_past: int, nxt: Any) -> None:
        n = call.n_tokens
        targets: list[int | None] = [call.tokens[j + 1].id for j in range(n - 1)]
        follows = (
            isinstance(nxt, DecodeOp)
            and nxt.purpose == "prompt"
            and nxt.call.tokens[0].pos == call.tokens[-1].pos + 1
        )
        targets.append(nxt.call.tokens[0].id if follows else None)
        self.scored_rows += n - 1
        for j, got in enumerate(score_rows(self.engine.ctx, n, targets, self.engine.info.n_vocab)):
            t = targets[j]
            if got is not None and t is not None:
                self._note(n_past + j + 1, Surprise(t, got[0], None, got[1], True))

    def _note(self, index: int, value: Surprise) -> None:
        """A prompt token's p goes to the engine's surprise map, unless the token was picked
        there (its p and p' came with the pick)."""
        main = self.main
        toks = main.tokens
        if index < len(toks) and toks[index] == value.token and main.run.pick_at(index, value.token) is None:
            main.surprise.note(index, value)

    # -- reading it ----------------------------------------------------------------------------
    def record_for(self, main_index: int | None) -> StepRecord | None:
        """The observer's record of the engine's record ``main_index`` (None: not replayed)."""
        if main_index is None:
            return None
        idx = self.by_main.get(main_index)
        return self.engine.records.get(idx) if idx is not None else None

    def close(self) -> None:
        self.engine.close()
