"""The stepping engine: one ``llama_context`` driven one ``llama_decode`` at a time.

Each call to :meth:`Engine.prefill` or :meth:`Engine.step` runs the seven stages of the loop
(tokenize, batch, decode, logits, sample, end/detokenize, feed back) and leaves a
:class:`StepRecord` per ``llama_decode`` call. Nothing here knows about a screen: the TUI, the
``trace`` command and tests all read the same records.

Not thread-safe by design: exactly one thread may own an Engine (the TUI's decode worker).
"""

from __future__ import annotations

import functools
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import llama_cpp
import numpy as np

from . import ggml, llama_log
from .backend import LOCAL, Capabilities
from .batch import BatchToken, DecodeCall, LlamaBatch, plan_prompt, ubatch_chunks
from .errors import ContextFullError, TokenstepError
from .kvcache import Forgotten, KVLayout, KVLogReport, KVMirror, parse_kv_log
from .model import Model
from .records import RecordLog
from .sampling import (
    ChainResult,
    SamplerChain,
    SamplerSettings,
    top_stats,
)
from .tokens import Vocab
from .work import WorkCounter

if TYPE_CHECKING:
    from .verify import Verifier, VerifyResult

FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
CONTEXT_FULL = ("stop", "shift")
TOP_N = 10
_LOGITS_KEEP = 64  # logits kept for rewinding without recomputation


@dataclass
class EngineConfig:
    n_ctx: int = 4096
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int = 0  # 0: one per CPU core
    flash_attn: str = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_seq_max: int = 2  # sequences the context can hold: 2 lets the user fork once
    context_full: str = "stop"  # what feed() does when the context is full: stop or shift
    n_keep: int = 0  # like llama.cpp's --keep: tokens a shift never drops (-1: the prompt)
    # Sliding-window layers: a full-size cache (llama_context's default) keeps every token,
    # so rewind, prefix reuse and shifts work; llama.cpp's tools default to a smaller one.
    swa_full: bool = True

    def validate(self) -> None:
        if self.n_ctx < 8:
            raise TokenstepError(f"-c/--ctx-size must be at least 8 tokens, not {self.n_ctx}.")
        if self.n_ctx > 1 << 20:
            raise TokenstepError(f"-c/--ctx-size {self.n_ctx} is larger than tokenstep supports.")
        if self.n_batch < 1 or self.n_ubatch < 1:
            raise TokenstepError("-b and -ub must be at least 1.")
        if self.n_batch < self.n_ubatch:
            raise TokenstepError(
                f"-b/--batch-size ({self.n_batch}) must not be smaller than "
                f"-ub/--ubatch-size ({self.n_ubatch})."
            )
        if self.flash_attn not in FLASH_ATTN:
            raise TokenstepError(f"-fa must be on, off or auto, not {self.flash_attn!r}.")
        if not 1 <= self.n_seq_max <= 64:
            raise TokenstepError(f"n_seq_max must be between 1 and 64, not {self.n_seq_max}.")
        if self.context_full not in CONTEXT_FULL:
            raise TokenstepError(
                f"--context-full must be stop or shift, not {self.context_full!r}."
            )
        if self.n_keep < -1:
            raise TokenstepError(
                f"--keep must be -1 (the whole prompt) or more, not {self.n_keep}."
            )
        if self.n_threads < 0:
            raise TokenstepError(f"-t/--threads must be 0 (auto) or more, not {self.n_threads}.")
        ggml.parse_cache_type(self.cache_type_k)
        ggml.parse_cache_type(self.cache_type_v)
        if self.cache_type_v != "f16" and self.cache_type_v != "f32" and self.flash_attn == "off":
            raise TokenstepError(
                f"a quantized V cache ({self.cache_type_v}) needs flash attention; use -fa on or auto."
            )

    @property
    def threads(self) -> int:
        return self.n_threads or max(1, min(os.cpu_count() or 1, 8))


@dataclass
class Candidate:
    id: int
    piece: bytes
    logit: float
    p: float


@dataclass
class SeqRow:
    """One sequence's row in a decode call that carried several sequences (after a fork)."""

    seq_id: int
    batch_index: int  # the row's index in the llama_batch (llama_get_logits_ith)
    token: int  # the token this row fed
    pos: int
    top: list[Candidate] = field(default_factory=list)
    entropy: float = 0.0
    n_ctx_tokens: int = 0  # the sequence's length after the call
    sampled: int | None = None  # the token sampled from this row's logits
    chain: ChainResult | None = None
    eog: bool = False


@dataclass
class ShiftEvent:
    """A context shift: the first ``n_keep`` tokens stay, the next ``n_discard`` are forgotten,
    the rest slide back ``n_discard`` positions (llama_memory_seq_rm + llama_memory_seq_add)."""

    index: int  # 0, 1, ... (Forgotten.shift)
    before_record: int  # the record decoded right after the shift
    n_past: int  # sequence length before the shift
    n_keep: int
    n_discard: int
    forgotten: list[Forgotten]  # sequence 0's (the main text's) forgotten tokens
    # After a fork, every sequence's forgotten tokens (shared ones appear under each).
    by_seq: dict[int, list[Forgotten]] = field(default_factory=dict)


@dataclass
class PrefillTurn:
    """One ``sync_prompt``: prompt tokens found in the cache against those decoded."""

    reused: int
    computed: int
    prefill_ms: float
    records: tuple[int, int]  # [first, end) record indices of the prefill


@dataclass
class StepRecord:
    """One ``llama_decode`` call and everything the loop learned from it."""

    index: int
    phase: str  # "prefill" or "decode"
    call: DecodeCall
    decode_ms: float
    chunk: tuple[int, int] = (1, 1)  # (i, n) for a prompt split into several calls
    reused: int = 0  # prompt tokens found already in the cache (prefix reuse)
    has_logits: bool = False
    top: list[Candidate] = field(default_factory=list)
    entropy: float = 0.0
    chain: ChainResult | None = None
    sampled: int | None = None
    forced: bool = False
    eog: bool = False
    n_ctx_tokens: int = 0  # tokens in the context after this call
    kv_used: int = 0
    kv_bytes: int = 0
    kv_problems: list[str] = field(default_factory=list)
    settings: SamplerSettings | None = None
    # Data that observers (attention capture, graph census) attach to this decode call.
    extras: dict[str, Any] = field(default_factory=dict)
    # Several sequences in one call (after a fork): one row per sequence, by seq_id.
    rows: dict[int, SeqRow] = field(default_factory=dict)
    shift: ShiftEvent | None = None  # the context shift made just before this call


@dataclass
class Branch:
    """A sequence made by :meth:`Engine.fork`: its own sampler chain (own seeded RNG) and its own
    logits row. Sequence 0 keeps using the engine's own ``chain`` and ``logits``."""

    seq_id: int
    parent: int
    fork_pos: int  # positions below this are cells shared with the parent
    chain: SamplerChain
    logits: np.ndarray | None
    record: int | None  # the record whose row produced ``logits``
    stop_reason: str | None = None

    @property
    def seed(self) -> int:
        return self.chain.seed


class DecodeObserver(Protocol):
    """Something that watches every ``llama_decode`` (e.g. the attention capture).

    ``configure`` runs before the context exists (it may set ``cb_eval``); ``before_decode``
    and ``after_decode`` bracket each call, and ``after_decode`` may put data in ``extras``."""

    def configure(self, params: llama_cpp.llama_context_params) -> None: ...

    def before_decode(self, engine: Engine, call: DecodeCall) -> None: ...

    def after_decode(self, engine: Engine, call: DecodeCall, extras: dict[str, Any]) -> None: ...


class Engine:
    """A model plus one context, stepped by hand."""

    def __init__(
        self,
        model: Model,
        config: EngineConfig | None = None,
        settings: SamplerSettings | None = None,
        observers: list[DecodeObserver] | None = None,
    ) -> None:
        self.model = model
        self.observers = list(observers or [])
        self.info = model.info
        self.config = config or EngineConfig()
        self.config.validate()
        self.settings = settings or SamplerSettings()
        self.settings.validate()
        self.vocab = Vocab(model.vocab, model.info.n_vocab)
        self.type_k = ggml.parse_cache_type(self.config.cache_type_k)
        self.type_v = ggml.parse_cache_type(self.config.cache_type_v)

        p = llama_cpp.llama_context_default_params()
        p.n_ctx = self.config.n_ctx
        p.n_batch = self.config.n_batch
        p.n_ubatch = self.config.n_ubatch
        p.n_seq_max = self.config.n_seq_max
        p.n_threads = p.n_threads_batch = self.config.threads
        p.flash_attn_type = FLASH_ATTN[self.config.flash_attn]
        p.type_k, p.type_v = self.type_k, self.type_v
        p.kv_unified = True
        p.swa_full = self.config.swa_full
        p.no_perf = True
        for obs in self.observers:
            obs.configure(p)
        mark = llama_log.mark()
        ctx = llama_cpp.llama_init_from_model(model.ptr, p)
        if not ctx:
            reason = llama_log.last_error(mark) or "llama.cpp refused the settings"
            raise TokenstepError(f"cannot create a context: {reason.strip()}")
        self.ctx: llama_cpp.llama_context_p = ctx
        self.log_lines = llama_log.since(mark)
        self.kv_reports: list[KVLogReport] = parse_kv_log(self.log_lines)
        self.flash_attn_resolved = self._resolved_flash_attn()
        # llama.cpp rounds the cache up (to 256 cells); tokenstep holds the context to -c exactly.
        self.n_cells = llama_cpp.llama_n_ctx(ctx)
        self.n_ctx = min(self.config.n_ctx, self.n_cells)
        self.batch = LlamaBatch(max(self.config.n_batch, 1), self.config.n_seq_max)
        self.chain = SamplerChain(self.info.n_vocab, self.settings.seed)
        self.kv = KVMirror(self.n_ctx)
        self.layout = KVLayout(
            self.info.n_layer,
            self.info.n_embd_k_gqa,
            self.info.n_embd_v_gqa,
            self.type_k,
            self.type_v,
        )
        self.records = RecordLog(self._record_dict)  # the newest in memory, the rest on disk
        self.logits: np.ndarray | None = None
        self._logits_record: int | None = None
        self._logits_by_len: OrderedDict[int, tuple[np.ndarray, int]] = OrderedDict()
        self.stop_reason: str | None = None
        self.work = WorkCounter()
        self.turns: list[PrefillTurn] = []
        self.shifts: list[ShiftEvent] = []
        self.branches: dict[int, Branch] = {}
        self._n_prompt = 0  # length of the first prompt (for --keep -1)
        self._verifier: Verifier | None = None

    def _record_dict(self, rec: StepRecord) -> dict[str, Any]:
        from .trace import record_to_dict  # trace imports this module

        return record_to_dict(self, rec)

    def adopt_history(self, old: Engine) -> None:
        """Take over ``old``'s step records, prefill turns and context shifts (a context
        rebuilt with other parameters continues the same session)."""
        self.records = old.records
        self.records.to_dict = self._record_dict
        self.turns, self.shifts = list(old.turns), list(old.shifts)

    def _resolved_flash_attn(self) -> str:
        """What ``-fa auto`` became: llama.cpp logs it when it reserves the graph, or (for a
        quantized V cache) when it turns flash attention on by itself."""
        for line in self.log_lines:
            if "Flash Attention enabled" in line:
                return "on"
            if "Flash Attention disabled" in line:
                return "off"
        for line in self.log_lines:
            if "flash_attn" in line and "= enabled" in line:
                return "on"
            if "flash_attn" in line and "= disabled" in line:
                return "off"
        return self.config.flash_attn

    @functools.cached_property
    def flash_attn_note(self) -> str | None:
        """Why flash attention is on when the user did not ask for it, in llama.cpp's words
        (logged once, when the context is created)."""
        for line in self.log_lines:
            if "enabling flash_attn" in line:
                return line.split(": ", 1)[-1].strip()
        return None

    # -- state ---------------------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        """Everything: a local context can show its cells, attention, graph and verify."""
        return LOCAL

    @property
    def tokens(self) -> list[int]:
        """The tokens in the context (sequence 0), oldest first."""
        return self.kv.tokens(0)

    @property
    def n_past(self) -> int:
        return self.kv.count(0)

    @property
    def kv_bytes_used(self) -> int:
        return self.kv.used * self.layout.bytes_per_token

    @property
    def kv_bytes_allocated(self) -> int:
        return self.n_cells * self.layout.bytes_per_token

    # -- the loop ------------------------------------------------------------------------------
    def _decode(self, call: DecodeCall) -> tuple[float, dict[str, Any]]:
        """Run one ``llama_decode``; returns its wall time in ms and the observers' extras."""
        b = self.batch.fill(call)
        for obs in self.observers:
            obs.before_decode(self, call)
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self.ctx, b)
        ms = (time.perf_counter() - t0) * 1000.0
        if rc != 0:
            if rc == 1:
                raise ContextFullError(
                    "llama.cpp found no free KV cells for this batch (context full)."
                )
            raise TokenstepError(f"llama_decode failed with code {rc}.")
        index = len(self.records)
        for t in call.tokens:
            self.kv.add(t.id, t.pos, t.seq_ids, index)
        extras: dict[str, Any] = {}
        for obs in self.observers:
            obs.after_decode(self, call, extras)
        return ms, extras

    def _read_logits(self) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.info.n_vocab,)).copy()

    def _finish_record(self, rec: StepRecord) -> StepRecord:
        rec.n_ctx_tokens = self.n_past
        rec.kv_used = self.kv.used
        rec.kv_bytes = self.kv_bytes_used
        rec.kv_problems = self.kv.check(self.ctx)
        if rec.has_logits:
            logits = self._read_logits()
            self._set_logits(logits, rec.index)
            rec.top, rec.entropy = self._top(logits)
        self.records.append(rec)
        ctx = (rec.n_ctx_tokens,) if rec.has_logits else ()
        self.work.add(rec.index, rec.call.n_tokens, ctx, rec.decode_ms, rec.phase)
        return rec

    def _top(self, logits: np.ndarray) -> tuple[list[Candidate], float]:
        """The record's top-N candidates and the entropy of the full distribution."""
        top, p, entropy = top_stats(logits, TOP_N)
        piece = self.vocab.piece
        return [
            Candidate(t, piece(t), float(logits[t]), pt)
            for t, pt in zip(top.tolist(), p.tolist(), strict=True)
        ], entropy

    def _set_logits(self, logits: np.ndarray, record: int) -> None:
        self.logits = logits
        self._logits_record = record
        n = self.n_past
        self._logits_by_len[n] = (logits, record)
        self._logits_by_len.move_to_end(n)
        while len(self._logits_by_len) > _LOGITS_KEEP:
            self._logits_by_len.popitem(last=False)

    def prefill(self, tokens: list[int], *, reused: int = 0) -> list[StepRecord]:
        """Decode a prompt (after what is already in the context), split into n_batch calls."""
        if not tokens:
            raise TokenstepError("the prompt is empty: there is nothing to decode.")
        if self.n_past + len(tokens) > self.n_ctx:
            raise ContextFullError(
                f"the prompt needs {self.n_past + len(tokens)} tokens but the context holds "
                f"{self.n_ctx}; use a larger -c or a shorter prompt."
            )
        self.stop_reason = None
        if self.n_past == 0:
            self._n_prompt = len(tokens)
        calls = plan_prompt(tokens, self.n_past, (0,), self.config.n_batch, self.config.n_ubatch)
        out = []
        for i, call in enumerate(calls):
            ms, extras = self._decode(call)
            rec = StepRecord(
                index=len(self.records),
                phase="prefill" if call.n_tokens > 1 else "decode",
                call=call,
                decode_ms=ms,
                chunk=(i + 1, len(calls)),
                reused=reused,
                has_logits=i == len(calls) - 1,
                extras=extras,
            )
            out.append(self._finish_record(rec))
        return out

    def sync_prompt(self, tokens: list[int], *, reuse: bool = True) -> list[StepRecord]:
        """Make the context hold exactly ``tokens``, re-using the longest common prefix already
        cached (prompt/prefix caching) and prefilling only the rest."""
        common = 0
        if reuse:
            have = self.tokens
            limit = min(len(have), len(tokens))
            while common < limit and have[common] == tokens[common]:
                common += 1
            # At least one token must be decoded to get logits for the prompt's last position.
            common = min(common, len(tokens) - 1)
        self.truncate(common)
        recs = self.prefill(tokens[common:], reused=common)
        self.turns.append(
            PrefillTurn(
                reused=common,
                computed=len(tokens) - common,
                prefill_ms=sum(r.decode_ms for r in recs),
                records=(recs[0].index, recs[-1].index + 1),
            )
        )
        return recs

    def truncate(self, n_keep: int) -> None:
        """Keep the first ``n_keep`` tokens of sequence 0 (``llama_memory_seq_rm``)."""
        if n_keep >= self.n_past:
            return
        mem = llama_cpp.llama_get_memory(self.ctx)
        positions = self.kv.positions(0)
        p0 = positions[n_keep] if n_keep < len(positions) else 0
        if n_keep == 0 and not self.branches:
            llama_cpp.llama_memory_clear(mem, True)
            self.kv.clear()
        else:
            if not llama_cpp.llama_memory_seq_rm(mem, 0, p0, -1):
                raise TokenstepError("llama.cpp could not remove tokens from the KV cache.")
            self.kv.seq_rm(0, p0, -1)
        for key in [k for k in self._logits_by_len if k > n_keep]:
            del self._logits_by_len[key]
        if n_keep in self._logits_by_len:
            self.logits, self._logits_record = self._logits_by_len[n_keep]
        else:
            self.logits, self._logits_record = None, None

    def preview(self, settings: SamplerSettings | None = None) -> ChainResult:
        """Run the sampler chain on the current logits without advancing the RNG."""
        if self.logits is None:
            raise TokenstepError("there are no logits yet: send a prompt first.")
        return self.chain.run(self.logits, settings or self.settings, commit=False)

    def pick(self) -> tuple[int, ChainResult]:
        """Sample the next token with the current settings (advances the seeded RNG)."""
        if self.logits is None:
            raise TokenstepError("there are no logits yet: send a prompt first.")
        res = self.chain.run(self.logits, self.settings, commit=True)
        return res.selected, res

    def sample_next(self, force: int | None = None) -> int:
        """Stages 5 and 6: sample (or take ``force``) from the current logits, note the pick on
        the record that produced them, and check for an end-of-generation token."""
        if self.logits is None or self._logits_record is None:
            self._ensure_logits()
        assert self._logits_record is not None
        prev = self.records.get(self._logits_record)  # None: already moved to disk
        if force is not None:
            if not 0 <= force < self.info.n_vocab:
                raise TokenstepError(f"token id {force} is outside the vocabulary.")
            token, chain = force, self.preview()
        else:
            token, chain = self.pick()
        eog = self.vocab.is_eog(token)
        if prev is not None:
            prev.sampled, prev.forced, prev.chain = token, force is not None, chain
            prev.settings = self.settings.copy()
            prev.eog = eog
            row = prev.rows.get(0)
            if row is not None:
                row.sampled, row.chain, row.eog = token, chain, eog
        if eog:
            self.stop_reason = "end of generation"
        return token

    def feed(self, token: int) -> StepRecord | None:
        """Stage 7: decode one token at the next position; its K/V become one new cell.

        When the context is full, ``--context-full stop`` ends generation (None, with
        ``stop_reason``) and ``shift`` first forgets the oldest half (see :meth:`context_shift`)."""
        shift = None
        if self.n_past + 1 > self.n_ctx:
            if self.config.context_full != "shift" or self.branches:
                self.stop_reason = "context full"
                return None
            shift = self.context_shift()
            if shift is None:
                return None
        pos = self.kv.last_pos(0) + 1
        call = DecodeCall(
            [BatchToken(token, pos, (0,), True)], ubatch_chunks(1, self.config.n_ubatch)
        )
        ms, extras = self._decode(call)
        rec = StepRecord(
            len(self.records), "decode", call, ms, has_logits=True, extras=extras, shift=shift
        )
        return self._finish_record(rec)

    # -- context full: shift -------------------------------------------------------------------
    def keep_count(self) -> int:
        """Tokens a context shift keeps, as llama.cpp's ``--keep`` counts them: -1 (or more
        than the prompt) keeps the whole first prompt; otherwise N, plus the BOS token."""
        n_keep = self.config.n_keep
        if n_keep < 0 or n_keep > self._n_prompt:
            return self._n_prompt
        if self.info.add_bos and self.n_past and self.tokens[0] == self.info.bos:
            n_keep += 1
        return n_keep

    def context_shift(self) -> ShiftEvent | None:
        """Make room the way llama.cpp's context shift does: keep the first n_keep tokens,
        remove the oldest half of the rest (``llama_memory_seq_rm``) and move the newer half
        back to close the gap (``llama_memory_seq_add``; llama.cpp re-rotates their keys at
        the next decode). None, with ``stop_reason`` set, when it cannot.

        After a fork every sequence in the cache is shifted, with seq_rm + seq_add per seq_id.
        They all drop the SAME positions (half of the longest one's rest): the cells they
        share have one position each, so they can only move if every sequence moves them by
        the same amount (see :meth:`KVMirror.shift_seqs`)."""
        mem = llama_cpp.llama_get_memory(self.ctx)
        seqs = self.seq_ids
        longest = max(seqs, key=self.kv.count)
        n_past = self.kv.count(longest)
        n_keep = self.keep_count()
        n_discard = (n_past - n_keep) // 2
        if not llama_cpp.llama_memory_can_shift(mem):
            self.stop_reason = "context full (this model's cache cannot shift)"
            return None
        if n_discard < 1:
            self.stop_reason = f"context full (--keep {n_keep} leaves nothing to drop)"
            return None
        pos = self.kv.positions(longest)
        p0, p1 = pos[n_keep], pos[n_keep + n_discard]
        gone, moves = self.kv.shift_seqs(seqs, p0, p1)
        for s in seqs:
            if not llama_cpp.llama_memory_seq_rm(mem, s, p0, p1):
                raise TokenstepError("llama.cpp could not remove tokens from the KV cache.")
        for s, lo in moves:
            llama_cpp.llama_memory_seq_add(mem, s, lo, -1, -(p1 - p0))
        for br in self.branches.values():  # where each fork's own cells start, after the move
            if br.fork_pos >= p1:
                br.fork_pos -= p1 - p0
            elif br.fork_pos > p0:
                br.fork_pos = p0
        ev = ShiftEvent(
            len(self.shifts),
            len(self.records),
            n_past,
            n_keep,
            n_discard,
            gone.get(0, []),
            gone if len(seqs) > 1 else {},
        )
        self.shifts.append(ev)
        # Remembered logits belonged to contexts that no longer exist; the current row stays
        # valid for the pick it is used for (llama.cpp also samples before it shifts).
        self._logits_by_len.clear()
        if self.logits is not None and self._logits_record is not None:
            self._logits_by_len[self.n_past] = (self.logits, self._logits_record)
        return ev

    # -- several sequences ---------------------------------------------------------------------
    @property
    def seq_ids(self) -> list[int]:
        """Live sequences: 0 and every fork."""
        return [0, *sorted(self.branches)]

    def seq_logits(self, seq: int) -> np.ndarray | None:
        return self.logits if seq == 0 else self.branches[seq].logits

    def fork(self, src: int = 0) -> int:
        """Copy sequence ``src`` into a new seq_id with ``llama_memory_seq_cp``: the new
        sequence sees the same cells (nothing is recomputed or copied in memory, the cells are
        tagged with both ids) and gets its own sampler chain, seeded with seed + seq_id."""
        if src != 0 and src not in self.branches:
            raise TokenstepError(f"there is no sequence {src} to fork.")
        logits = self.seq_logits(src)
        if logits is None or self.kv.count(src) == 0:
            raise TokenstepError("there is nothing to fork yet: send a prompt first.")
        free = [s for s in range(1, self.config.n_seq_max) if s not in self.branches]
        if not free:
            raise TokenstepError(
                f"this context holds at most {self.config.n_seq_max} sequences (n_seq_max)."
            )
        dst = free[0]
        mem = llama_cpp.llama_get_memory(self.ctx)
        llama_cpp.llama_memory_seq_cp(mem, src, dst, -1, -1)
        self.kv.seq_cp(src, dst)
        record = self._logits_record if src == 0 else self.branches[src].record
        seed = (self.settings.seed + dst) & 0xFFFFFFFF
        self.branches[dst] = Branch(
            dst,
            src,
            self.kv.last_pos(src) + 1,
            SamplerChain(self.info.n_vocab, seed),
            logits,
            record,
        )
        return dst

    def drop_seq(self, seq: int) -> None:
        """Forget a forked sequence: its own cells are freed, shared ones stay for the others."""
        br = self.branches.pop(seq, None)
        if br is None:
            raise TokenstepError(f"there is no forked sequence {seq}.")
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self.ctx), seq, -1, -1)
        self.kv.seq_rm(seq, 0, -1)
        br.chain.free()

    def _sample_seq(self, seq: int, force: int | None) -> int:
        """Stage 5/6 for one sequence with its own chain and logits row."""
        if seq == 0:
            return self.sample_next(force)
        br = self.branches[seq]
        if br.logits is None:
            raise TokenstepError(f"sequence {seq} has no logits.")
        settings = replace(self.settings, seed=br.seed)
        if force is not None:
            if not 0 <= force < self.info.n_vocab:
                raise TokenstepError(f"token id {force} is outside the vocabulary.")
            token, chain = force, br.chain.run(br.logits, settings, commit=False)
        else:
            chain = br.chain.run(br.logits, settings, commit=True)
            token = chain.selected
        eog = self.vocab.is_eog(token)
        rec = self.records.get(br.record) if br.record is not None else None
        if rec is not None:
            row = rec.rows.get(seq)
            if row is not None:
                row.sampled, row.chain, row.eog = token, chain, eog
        if eog:
            br.stop_reason = "end of generation"
        return token

    def step_seqs(self, force: dict[int, int] | None = None) -> StepRecord | None:
        """One turn for every live sequence: each samples from its own logits row with its own
        chain, then ONE ``llama_decode`` carries one token per sequence (each with its own
        seq_id and position, all asking for logits). None when every sequence has stopped."""
        force = force or {}
        picks: list[tuple[int, int]] = []
        for seq in self.seq_ids:
            if self._seq_stopped(seq):
                continue
            token = self._sample_seq(seq, force.get(seq))
            if not self.vocab.is_eog(token):
                picks.append((seq, token))
        if not picks:
            return None
        shift, reason = None, "context full"
        if self._seqs_full(picks) and self.config.context_full == "shift":
            shift = self.context_shift()  # every sequence, one window
            reason = self.stop_reason if shift is None and self.stop_reason else reason
        if self._seqs_full(picks):
            self.stop_reason = reason
            for s, _ in picks:
                if s:
                    self.branches[s].stop_reason = reason
            return None
        tokens = [BatchToken(t, self.kv.last_pos(s) + 1, (s,), True) for s, t in picks]
        call = DecodeCall(tokens, ubatch_chunks(len(tokens), self.config.n_ubatch))
        ms, extras = self._decode(call)
        rec = StepRecord(
            len(self.records), "decode", call, ms, has_logits=True, extras=extras, shift=shift
        )
        contexts = []
        for i, (s, t) in enumerate(picks):
            ptr = llama_cpp.llama_get_logits_ith(self.ctx, i)
            logits = np.ctypeslib.as_array(ptr, shape=(self.info.n_vocab,)).copy()
            row = SeqRow(s, i, t, tokens[i].pos, n_ctx_tokens=self.kv.count(s))
            row.top, row.entropy = self._top(logits)
            rec.rows[s] = row
            contexts.append(row.n_ctx_tokens)
            if s == 0:
                self._set_logits(logits, rec.index)
            else:
                self.branches[s].logits, self.branches[s].record = logits, rec.index
        first = rec.rows[picks[0][0]]
        rec.top, rec.entropy = first.top, first.entropy
        rec.n_ctx_tokens = self.n_past
        rec.kv_used = self.kv.used
        rec.kv_bytes = self.kv_bytes_used
        rec.kv_problems = self.kv.check(self.ctx)
        self.records.append(rec)
        self.work.add(rec.index, call.n_tokens, contexts, ms, rec.phase)
        return rec

    def _seqs_full(self, picks: list[tuple[int, int]]) -> bool:
        """No room for one more token in some sequence (-c) or in the cache's cells."""
        return any(self.kv.count(s) + 1 > self.n_ctx for s, _ in picks) or (
            self.kv.used + len(picks) > self.n_cells
        )

    def _seq_stopped(self, seq: int) -> bool:
        if seq == 0:
            return self.stop_reason is not None
        return self.branches[seq].stop_reason is not None

    # -- exactness -----------------------------------------------------------------------------
    def verify_last(self, mode: str = "batched", seq: int = 0) -> VerifyResult:
        """Recompute the current context of ``seq`` in a separate context that shares no cells
        with this one and compare its last logits row with the cached step's (see verify.py).
        Call it on the thread that owns the engine: it runs llama_decode on a second context."""
        from .verify import Verifier

        if self._verifier is None:
            self._verifier = Verifier(self)
        return self._verifier.check(mode, seq)

    def step(self, force: int | None = None) -> StepRecord | None:
        """One turn of the loop: sample, then decode. None when generation stopped
        (``stop_reason`` says why: end of generation or context full)."""
        token = self.sample_next(force)
        if self.vocab.is_eog(token):
            return None
        return self.feed(token)

    def _ensure_logits(self) -> None:
        """After a rewind past the kept logits, decode the last token again to get them back."""
        if self.n_past == 0:
            raise TokenstepError("the context is empty: send a prompt first.")
        last = self.tokens[-1]
        self.truncate(self.n_past - 1)
        self.prefill([last])

    def rewind(self, n: int = 1) -> int:
        """Remove the last ``n`` tokens from the KV cache; returns how many were removed.
        Logits for the new last position come from memory, so nothing is recomputed."""
        n = max(0, min(n, self.n_past - 1))
        if n:
            self.truncate(self.n_past - n)
            self.stop_reason = None
        return n

    def reset(self) -> None:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        for br in self.branches.values():
            br.chain.free()
        self.branches.clear()
        self.kv.clear()
        self.logits, self._logits_record = None, None
        self._logits_by_len.clear()
        self.chain.reseed(self.settings.seed)
        self.stop_reason = None
        self.work.reset()  # the quadratic-wall counter counts one chat's decode calls

    def generate(self, n: int) -> list[StepRecord]:
        """Sample up to ``n`` tokens after a prefill. Each is decoded except the last, which is
        only sampled (its K/V would be needed only for a token after it)."""
        out: list[StepRecord] = []
        for i in range(n):
            token = self.sample_next()
            if self.vocab.is_eog(token) or i == n - 1:
                break
            rec = self.feed(token)
            if rec is None:
                break
            out.append(rec)
        return out

    def close(self) -> None:
        if getattr(self, "ctx", None):
            if self._verifier is not None:
                self._verifier.close()
                self._verifier = None
            for br in self.branches.values():
                br.chain.free()
            self.branches.clear()
            self.batch.free()
            self.chain.free()
            llama_cpp.llama_free(self.ctx)
            self.ctx = None  # type: ignore[assignment]

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
