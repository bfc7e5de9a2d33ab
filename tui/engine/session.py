"""The stepping engine: one ``llama_context`` driven one ``llama_decode`` at a time.

Each call to :meth:`Engine.prefill` or :meth:`Engine.step` runs the seven stages of the loop
(tokenize, batch, decode, logits, sample, end/detokenize, feed back) and leaves a
:class:`StepRecord` per ``llama_decode`` call. Nothing here knows about a screen: the TUI, the
``trace`` command and tests all read the same records.

Not thread-safe by design: exactly one thread may own an Engine (the TUI's decode worker).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

import llama_cpp
import numpy as np

from . import ggml, llama_log
from .batch import BatchToken, DecodeCall, LlamaBatch, plan_prompt, ubatch_chunks
from .errors import ContextFullError, TokenstepError
from .kvcache import KVLayout, KVLogReport, KVMirror, parse_kv_log
from .model import Model
from .sampling import (
    ChainResult,
    SamplerChain,
    SamplerSettings,
    entropy_bits,
    softmax,
    top_k_by_logit,
)
from .tokens import Vocab

FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
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
    n_seq_max: int = 1

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
        self.n_ctx = llama_cpp.llama_n_ctx(ctx)
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
        self.records: list[StepRecord] = []
        self.logits: np.ndarray | None = None
        self._logits_record: int | None = None
        self._logits_by_len: OrderedDict[int, tuple[np.ndarray, int]] = OrderedDict()
        self.stop_reason: str | None = None

    def _resolved_flash_attn(self) -> str:
        """What ``-fa auto`` became: llama.cpp logs it when it reserves the graph."""
        for line in self.log_lines:
            if "Flash Attention enabled" in line:
                return "on"
            if "Flash Attention disabled" in line:
                return "off"
        return self.config.flash_attn

    # -- state ---------------------------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        """The tokens in the context (sequence 0), oldest first."""
        return self.kv.tokens(0)

    @property
    def n_past(self) -> int:
        return len(self.kv.tokens(0))

    @property
    def kv_bytes_used(self) -> int:
        return self.kv.used * self.layout.bytes_per_token

    @property
    def kv_bytes_allocated(self) -> int:
        return self.n_ctx * self.layout.bytes_per_token

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
        for t in call.tokens:
            self.kv.add(t.id, t.pos, t.seq_ids)
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
            top = top_k_by_logit(logits, TOP_N)
            p = softmax(logits)
            rec.top = [
                Candidate(int(t), self.vocab.piece(int(t)), float(logits[t]), float(p[t]))
                for t in top
            ]
            rec.entropy = entropy_bits(p)
        self.records.append(rec)
        return rec

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
        return self.prefill(tokens[common:], reused=common)

    def truncate(self, n_keep: int) -> None:
        """Keep the first ``n_keep`` tokens of sequence 0 (``llama_memory_seq_rm``)."""
        if n_keep >= self.n_past:
            return
        mem = llama_cpp.llama_get_memory(self.ctx)
        positions = self.kv.positions(0)
        p0 = positions[n_keep] if n_keep < len(positions) else 0
        if n_keep == 0:
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
        prev = self.records[self._logits_record]
        if force is not None:
            if not 0 <= force < self.info.n_vocab:
                raise TokenstepError(f"token id {force} is outside the vocabulary.")
            token, chain = force, self.preview()
        else:
            token, chain = self.pick()
        prev.sampled, prev.forced, prev.chain = token, force is not None, chain
        prev.settings = self.settings.copy()
        prev.eog = self.vocab.is_eog(token)
        if prev.eog:
            self.stop_reason = "end of generation"
        return token

    def feed(self, token: int) -> StepRecord | None:
        """Stage 7: decode one token at the next position; its K/V become one new cell."""
        if self.n_past + 1 > self.n_ctx:
            self.stop_reason = "context full"
            return None
        pos = self.kv.positions(0)[-1] + 1 if self.n_past else 0
        call = DecodeCall(
            [BatchToken(token, pos, (0,), True)], ubatch_chunks(1, self.config.n_ubatch)
        )
        ms, extras = self._decode(call)
        rec = StepRecord(len(self.records), "decode", call, ms, has_logits=True, extras=extras)
        return self._finish_record(rec)

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
        self.kv.clear()
        self.logits, self._logits_record = None, None
        self._logits_by_len.clear()
        self.chain.reseed(self.settings.seed)
        self.stop_reason = None

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
            self.batch.free()
            self.chain.free()
            llama_cpp.llama_free(self.ctx)
            self.ctx = None  # type: ignore[assignment]

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
