"""The llama_context: the parameters it is made with and what llama.cpp said while making it.

:class:`EngineConfig` holds the flags (-c, -b, -ub, -t, -fa, -ctk, -ctv, --keep ...) and refuses
a combination llama.cpp would refuse, in the same words (see ``rules.py``). :func:`create`
fills ``llama_context_params``, lets the decode observers set their callback, and reads back
from llama.cpp's log what ``-fa auto`` became and the KV caches it allocated.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import llama_cpp

from . import budget, checks, ggml, interrupt, llama_log, rules
from .checks import Namer
from .errors import TokenstepError
from .kvcache import KVLogReport, parse_kv_log

if TYPE_CHECKING:
    from .model import Model

FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
CONTEXT_FULL = ("stop", "shift")
CONFIG_FLAGS = {
    "n_ctx": "-c/--ctx-size",
    "n_batch": "-b/--batch-size",
    "n_ubatch": "-ub/--ubatch-size",
    "n_threads": "-t/--threads",
    "flash_attn": "-fa",
    "cache_type_k": "-ctk",
    "cache_type_v": "-ctv",
    "n_seq_max": "-np/--parallel (n_seq_max)",
    "context_full": "--context-full",
    "n_keep": "--keep",
    "swa_full": "swa_full",
}


class Configures(Protocol):
    """A decode observer, as the context sees it: it may set ``cb_eval`` before the context
    exists."""

    def configure(self, params: llama_cpp.llama_context_params) -> None: ...


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
    offload_kqv: bool = True  # --no-kv-offload: keep the KV cache in system memory

    def validate(self, name: Namer | None = None) -> None:
        """Types, then llama.cpp's limits; ``name`` as in :meth:`SamplerSettings.validate`."""
        n = name or CONFIG_FLAGS.__getitem__
        for key in ("n_ctx", "n_batch", "n_ubatch", "n_threads", "n_seq_max", "n_keep"):
            checks.whole(getattr(self, key), n(key))
        for key in ("flash_attn", "cache_type_k", "cache_type_v", "context_full"):
            checks.text(getattr(self, key), n(key))
        checks.flag(self.swa_full, n("swa_full"))
        if self.n_ctx < 8:
            raise TokenstepError(f"{n('n_ctx')} must be at least 8 tokens, not {self.n_ctx}.")
        if self.n_ctx > 1 << 20:
            raise TokenstepError(f"{n('n_ctx')} {self.n_ctx} is larger than tokenstep supports.")
        if self.n_batch < 1 or self.n_ubatch < 1:
            raise TokenstepError(f"{n('n_batch')} and {n('n_ubatch')} must be at least 1.")
        if self.n_batch < self.n_ubatch:
            raise TokenstepError(
                f"{n('n_batch')} ({self.n_batch}) must not be smaller than "
                f"{n('n_ubatch')} ({self.n_ubatch})."
            )
        too_small = rules.batch_holds_sequences(self.n_batch, self.n_seq_max)
        if too_small:  # the rule names the flag; a session file's field is named as well
            named = n("n_batch")
            if named != CONFIG_FLAGS["n_batch"]:
                too_small = f"{named} is {self.n_batch}, and {too_small}"
            raise TokenstepError(too_small)
        if self.flash_attn not in FLASH_ATTN:
            raise TokenstepError(
                f"{n('flash_attn')} must be on, off or auto, not {self.flash_attn!r}."
            )
        if not 1 <= self.n_seq_max <= 64:
            raise TokenstepError(
                f"{n('n_seq_max')} must be between 1 and 64, not {self.n_seq_max}."
            )
        if self.context_full not in CONTEXT_FULL:
            raise TokenstepError(
                f"{n('context_full')} must be stop or shift, not {self.context_full!r}."
            )
        if self.n_keep < -1:
            raise TokenstepError(
                f"{n('n_keep')} must be -1 (the whole prompt) or more, not {self.n_keep}."
            )
        if self.n_threads < 0:
            raise TokenstepError(
                f"{n('n_threads')} must be 0 (auto) or more, not {self.n_threads}."
            )
        for key in ("cache_type_k", "cache_type_v"):
            try:
                ggml.parse_cache_type(getattr(self, key))
            except TokenstepError as exc:
                raise TokenstepError(f"{n(key)}: {exc}") from None
        if rules.v_cache_needs_flash_attn(self.cache_type_v) and self.flash_attn == "off":
            raise TokenstepError(
                f"a quantized V cache ({self.cache_type_v}) needs flash attention; "
                f"use {n('flash_attn')} on or auto."
            )

    @property
    def threads(self) -> int:
        return self.n_threads or max(1, min(os.cpu_count() or 1, 8))


def context_budget(
    model: Model, config: EngineConfig, *, flash_attn_on: bool, model_bytes: int | None = None
) -> budget.ContextBudget:
    """What a context with ``config`` will allocate for ``model`` (see ``budget.py``)."""
    i = model.info
    if model_bytes is None:
        try:
            model_bytes = os.path.getsize(model.path)
        except OSError:
            model_bytes = 0
    return budget.estimate(
        n_ctx=config.n_ctx,
        n_ubatch=config.n_ubatch,
        n_seq_max=config.n_seq_max,
        n_layer=i.n_layer,
        n_head=i.n_head,
        n_vocab=i.n_vocab,
        n_embd_k_gqa=i.n_embd_k_gqa,
        n_embd_v_gqa=i.n_embd_v_gqa,
        cache_type_k=config.cache_type_k,
        cache_type_v=config.cache_type_v,
        flash_attn_on=flash_attn_on,
        model_bytes=model_bytes,
    )


def check_memory(model: Model, config: EngineConfig, *, flash_attn_on: bool) -> None:
    """Refuse, in one sentence, a context that would not fit in the memory available
    (llama.cpp allocates and clears the whole KV cache at once; see ``budget.py``)."""
    est = context_budget(model, config, flash_attn_on=flash_attn_on)
    why = budget.refusal(est, budget.available_bytes())
    if why:
        raise TokenstepError(why)


def init_context(
    model: Model, params: llama_cpp.llama_context_params, what: str = "a context"
) -> tuple[llama_cpp.llama_context_p, list[str]]:
    """``llama_init_from_model``, with llama.cpp's own reason when it refuses; returns the
    context and the log lines llama.cpp wrote while making it."""
    mark = llama_log.mark()
    ctx = llama_cpp.llama_init_from_model(model.ptr, params)
    if not ctx:
        reason = llama_log.last_error(mark) or "llama.cpp refused the settings"
        raise TokenstepError(f"cannot create {what}: {reason.strip()}")
    try:
        interrupt.check()  # a Ctrl-C recorded inside the log callback while it was made
    except KeyboardInterrupt:
        llama_cpp.llama_free(ctx)
        raise
    return ctx, llama_log.since(mark)


class Context:
    """The engine's ``llama_context`` and what llama.cpp logged when it made it."""

    def __init__(
        self, model: Model, config: EngineConfig, observers: Sequence[Configures] = ()
    ) -> None:
        self.config = config
        self.type_k = ggml.parse_cache_type(config.cache_type_k)
        self.type_v = ggml.parse_cache_type(config.cache_type_v)
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = config.n_ctx
        p.n_batch = config.n_batch
        p.n_ubatch = config.n_ubatch
        p.n_seq_max = config.n_seq_max
        p.n_threads = p.n_threads_batch = config.threads
        p.flash_attn_type = FLASH_ATTN[config.flash_attn]
        p.type_k, p.type_v = self.type_k, self.type_v
        p.kv_unified = True
        p.swa_full = config.swa_full
        p.offload_kqv = config.offload_kqv
        p.no_perf = True
        for obs in observers:
            obs.configure(p)
        check_memory(model, config, flash_attn_on=p.flash_attn_type != 0)
        self.ctx, self.log_lines = init_context(model, p, "a context")
        self.kv_reports: list[KVLogReport] = parse_kv_log(self.log_lines)
        self.flash_attn_resolved = self._resolved_flash_attn()
        # llama.cpp rounds the cache up (to 256 cells); tokenstep holds the context to -c exactly.
        self.n_cells = llama_cpp.llama_n_ctx(self.ctx)
        self.n_ctx = min(config.n_ctx, self.n_cells)

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

    def free(self) -> None:
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None  # type: ignore[assignment]
