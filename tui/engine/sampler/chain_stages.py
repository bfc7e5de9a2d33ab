"""The stages of llama.cpp's sampler chain as data, and the samplers that keep state.

Every stage is llama.cpp's own ``llama_sampler``, built as ``common_sampler_init`` builds it.
Stateless ones (top-k, top-p, min-p, typical, top-n-sigma, temperature, logit bias) are built
for one apply. History ones (penalties, DRY): :class:`HistorySampler` follows the token
history as llama-server accepts it, and resets and feeds the window again when the history is
not an extension of what it saw. Random ones (XTC, mirostat): :class:`RngSampler` keeps the
state before each pick by history length, so a rewind and re-step applies what a fresh run
would have there.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import llama_cpp

from ..model.errors import TokenstepError
from .sampler_settings import SamplerSettings

MIROSTAT_M = 100  # common_sampler_init's m for mirostat 1
_SNAPSHOTS = 512  # states kept for rewinds, per random sampler


@dataclass(frozen=True)
class Env:
    """What some samplers need besides the settings."""

    n_vocab: int
    vocab: Any = None  # llama_vocab_p (DRY)
    n_ctx: int = 4096  # -1 windows mean the context size, as llama-server sets them


@dataclass(frozen=True)
class StageDef:
    """One stage of the chain as data: llama.cpp's name, the label shown, the parameters
    (for the pane and the trace), how it builds its ``llama_sampler``, and whether it does
    anything at these settings (a neutral stage is left out, as it changes nothing)."""

    name: str
    label: str
    param: Callable[[SamplerSettings], str]
    params: Callable[[SamplerSettings], dict[str, Any]]
    build: Callable[[SamplerSettings, Env], llama_cpp.llama_sampler_p]
    active: Callable[[SamplerSettings], bool] = lambda _s: True
    kind: str = "stateless"  # or "history" / "rng"
    needs_vocab: str = ""  # the flag of a stage that reads llama_vocab's pieces (DRY), else ""


def _window(n: int, env: Env) -> int:
    """A window sees at most the context (and is a ring buffer of that many tokens)."""
    return env.n_ctx if n == -1 else min(n, env.n_ctx)


def _penalties(s: SamplerSettings, env: Env) -> llama_cpp.llama_sampler_p:
    return llama_cpp.llama_sampler_init_penalties(
        env.n_vocab,
        _window(s.repeat_last_n, env),
        s.repeat_penalty,
        s.frequency_penalty,
        s.presence_penalty,
    )


def _dry(s: SamplerSettings, env: Env) -> llama_cpp.llama_sampler_p:
    if env.vocab is None:  # llama_sampler_init_dry reads the vocabulary: a NULL one segfaults
        raise TokenstepError(vocab_refusal("DRY (--dry-multiplier)", "this chain has none"))
    raw = [b.encode("utf-8") for b in s.dry_sequence_breakers]
    arr = (ctypes.c_char_p * max(len(raw), 1))(*raw)
    return llama_cpp.llama_sampler_init_dry(
        env.vocab,
        s.dry_multiplier,
        s.dry_base,
        s.dry_allowed_length,
        _window(s.dry_penalty_last_n, env),
        arr,
        len(raw),
    )


def logit_bias_sampler(s: SamplerSettings, env: Env) -> llama_cpp.llama_sampler_p:
    arr = (llama_cpp.llama_logit_bias * max(len(s.logit_bias), 1))()
    for i, (tok, bias) in enumerate(s.logit_bias):
        arr[i].token, arr[i].bias = tok, bias  # type: ignore[assignment]
    return llama_cpp.llama_sampler_init_logit_bias(env.n_vocab, len(s.logit_bias), arr)


def _xtc(s: SamplerSettings, env: Env) -> llama_cpp.llama_sampler_p:
    return llama_cpp.llama_sampler_init_xtc(s.xtc_probability, s.xtc_threshold, 1, s.seed)


def mirostat_sampler(s: SamplerSettings, env: Env) -> llama_cpp.llama_sampler_p:
    if s.mirostat == 1:
        return llama_cpp.llama_sampler_init_mirostat(
            env.n_vocab, s.seed, s.mirostat_tau, s.mirostat_eta, MIROSTAT_M
        )
    return llama_cpp.llama_sampler_init_mirostat_v2(s.seed, s.mirostat_tau, s.mirostat_eta)


def _penalties_on(s: SamplerSettings) -> bool:
    neutral = s.repeat_penalty == 1.0 and s.frequency_penalty == 0 and s.presence_penalty == 0
    return s.repeat_last_n != 0 and not neutral


# llama.cpp's names (common_sampler_type), in the default order.
STAGES: dict[str, StageDef] = {
    sdef.name: sdef
    for sdef in (
        StageDef(
            "penalties",
            "penalties",
            lambda s: (
                f"×{s.repeat_penalty:g} f{s.frequency_penalty:g} p{s.presence_penalty:g} "
                f"last {s.repeat_last_n}"
            ),
            lambda s: {
                "repeat_penalty": s.repeat_penalty,
                "frequency_penalty": s.frequency_penalty,
                "presence_penalty": s.presence_penalty,
                "repeat_last_n": s.repeat_last_n,
            },
            _penalties,
            _penalties_on,
            "history",
        ),
        StageDef(
            "dry",
            "dry",
            lambda s: f"×{s.dry_multiplier:g} b{s.dry_base:g} len{s.dry_allowed_length}",
            lambda s: {
                "dry_multiplier": s.dry_multiplier,
                "dry_base": s.dry_base,
                "dry_allowed_length": s.dry_allowed_length,
                "dry_penalty_last_n": s.dry_penalty_last_n,
                "dry_sequence_breakers": list(s.dry_sequence_breakers),
            },
            _dry,
            lambda s: s.dry_multiplier > 0 and s.dry_base >= 1 and s.dry_penalty_last_n != 0,
            "history",
            "DRY (--dry-multiplier)",
        ),
        StageDef(
            "top_n_sigma",
            "top-n-sigma",
            lambda s: f"{s.top_n_sigma:g}",
            lambda s: {"top_n_sigma": s.top_n_sigma},
            lambda s, _e: llama_cpp.llama_sampler_init_top_n_sigma(s.top_n_sigma),
            lambda s: s.top_n_sigma > 0,
        ),
        StageDef(
            "top_k",
            "top-k",
            lambda s: str(s.top_k),
            lambda s: {"top_k": s.top_k},
            lambda s, _e: llama_cpp.llama_sampler_init_top_k(s.top_k),
        ),
        StageDef(
            "typ_p",
            "typical",
            lambda s: f"{s.typical_p:.2f}",
            lambda s: {"typical_p": s.typical_p},
            lambda s, _e: llama_cpp.llama_sampler_init_typical(s.typical_p, 1),
            lambda s: s.typical_p < 1.0,
        ),
        StageDef(
            "top_p",
            "top-p",
            lambda s: f"{s.top_p:.2f}",
            lambda s: {"top_p": s.top_p},
            lambda s, _e: llama_cpp.llama_sampler_init_top_p(s.top_p, 1),
        ),
        StageDef(
            "min_p",
            "min-p",
            lambda s: f"{s.min_p:.2f}",
            lambda s: {"min_p": s.min_p},
            lambda s, _e: llama_cpp.llama_sampler_init_min_p(s.min_p, 1),
        ),
        StageDef(
            "xtc",
            "xtc",
            lambda s: f"p{s.xtc_probability:g} t{s.xtc_threshold:g}",
            lambda s: {"xtc_probability": s.xtc_probability, "xtc_threshold": s.xtc_threshold},
            _xtc,
            lambda s: s.xtc_probability > 0 and s.xtc_threshold <= 0.5,
            "rng",
        ),
        StageDef(
            "temperature",
            "temp",
            lambda s: (
                f"{s.temp:.2f}"
                if s.dynatemp_range <= 0
                else f"{s.temp:.2f}±{s.dynatemp_range:g}^{s.dynatemp_exponent:g}"
            ),
            lambda s: {
                "temp": s.temp,
                "dynatemp_range": s.dynatemp_range,
                "dynatemp_exponent": s.dynatemp_exponent,
            },
            lambda s, _e: llama_cpp.llama_sampler_init_temp_ext(
                s.temp, s.dynatemp_range, s.dynatemp_exponent
            ),
        ),
    )
}
LOGIT_BIAS = StageDef(
    "logit_bias",
    "logit-bias",
    lambda s: f"{len(s.logit_bias)} token(s)",
    lambda s: {"logit_bias": [list(x) for x in s.logit_bias]},
    logit_bias_sampler,
    lambda s: bool(s.logit_bias),
)
MIRO_TEMP = StageDef(  # mirostat's chain: temp (plain), then mirostat picks
    "temperature",
    "temp",
    lambda s: f"{s.temp:.2f}",
    lambda s: {"temp": s.temp},
    lambda s, _e: llama_cpp.llama_sampler_init_temp(s.temp),
)


def chain_defs(s: SamplerSettings) -> list[StageDef]:
    """The stages this chain applies, in order, as ``common_sampler_init`` adds them: logit
    bias first, then ``samplers`` (or, with mirostat, temperature only)."""
    out = [LOGIT_BIAS] if LOGIT_BIAS.active(s) else []
    if s.mirostat:
        return out + [MIRO_TEMP]
    for name in s.samplers:
        sdef = STAGES[name]
        if name not in s.off and sdef.active(s):
            out.append(sdef)
    return out


GRAMMAR_FLAGS = "a grammar (--grammar, -j/--json-schema)"


def needs_vocab(s: SamplerSettings) -> str | None:
    """The first part of this chain that reads llama.cpp's vocabulary, or None.

    DRY matches the *text* of tokens (``llama_sampler_init_dry`` tokenizes its sequence
    breakers and reads every token's piece) and a grammar matches each candidate's piece
    against its rules (``llama_sampler_init_grammar`` asserts ``grammar.vocab != nullptr``).
    The other stages read only ids and logits, so they run on any backend's logits."""
    for sdef in chain_defs(s):
        if sdef.needs_vocab:
            return sdef.needs_vocab
    return GRAMMAR_FLAGS if s.grammar else None


def vocab_refusal(what: str, where: str) -> str:
    """One sentence: ``what`` (a stage and its flag) cannot run where there is no vocabulary."""
    return f"{what} needs llama.cpp's vocabulary (the text of each token), and {where}."


class HistorySampler:
    """A penalties or DRY sampler kept in step with a token history."""

    def __init__(self, sdef: StageDef) -> None:
        self.sdef = sdef
        self.smpl: Any = None
        self.key: Any = None
        self.seen: list[int] = []

    def sync(self, s: SamplerSettings, env: Env, history: list[int]) -> Any:
        key = repr(sorted(self.sdef.params(s).items()))
        if key != self.key:
            self.free()
            self.smpl, self.key, self.seen = self.sdef.build(s, env), key, []
        n = len(self.seen)
        if history[:n] == self.seen:
            tail = history[n:]
        else:  # rewound or rewritten: start again from the window, as a fresh run would be
            llama_cpp.llama_sampler_reset(self.smpl)
            tail = history[-max(env.n_ctx, 1) :]
        for t in tail:
            llama_cpp.llama_sampler_accept(self.smpl, t)
        self.seen = list(history)
        return self.smpl

    def free(self) -> None:
        if self.smpl:
            llama_cpp.llama_sampler_free(self.smpl)
        self.smpl = None


class RngSampler:
    """XTC or mirostat: the live sampler plus its state before each pick, by history length."""

    def __init__(self, build: Callable[[SamplerSettings, Env], Any], key: Callable) -> None:
        self.build, self.keyf = build, key
        self.live: Any = None
        self.key: Any = None
        self.at = -1  # the history length the live state is ready for
        self.snaps: dict[int, Any] = {}

    def state(self, s: SamplerSettings, env: Env, n_hist: int, *, commit: bool) -> Any:
        """The sampler to apply at history length ``n_hist``: the live one (commit) or a
        clone (a preview). Committing keeps the state before the pick for a later rewind."""
        key = self.keyf(s)
        if key != self.key:
            self.free()
            self.key = key
        if self.at != n_hist:
            snap = self.snaps.get(n_hist)
            if self.live:
                llama_cpp.llama_sampler_free(self.live)
            self.live = llama_cpp.llama_sampler_clone(snap) if snap else self.build(s, env)
            self.at = n_hist
        if not commit:
            return llama_cpp.llama_sampler_clone(self.live)
        for k in [k for k in self.snaps if k >= n_hist or k < n_hist - _SNAPSHOTS]:
            llama_cpp.llama_sampler_free(self.snaps.pop(k))
        self.snaps[n_hist] = llama_cpp.llama_sampler_clone(self.live)
        self.at = n_hist + 1
        return self.live

    def free(self) -> None:
        for smpl in [self.live, *self.snaps.values()]:
            if smpl:
                llama_cpp.llama_sampler_free(smpl)
        self.live, self.snaps, self.at = None, {}, -1


def mirostat_mu(smpl: Any, s: SamplerSettings) -> float | None:
    """mu from the sampler's own state (llama-sampling.cpp's llama_sampler_mirostat{,_v2}
    structs); None unless tau reads back where the struct puts it."""
    ctx = smpl.contents.ctx
    if not ctx:
        return None
    f = ctypes.cast(ctx, ctypes.POINTER(ctypes.c_float))
    tau_at, mu_at = (3, 6) if s.mirostat == 1 else (2, 4)
    if abs(f[tau_at] - s.mirostat_tau) > 1e-6:
        return None
    return float(f[mu_at])
