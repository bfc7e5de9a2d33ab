"""The sampler settings: every parameter of llama.cpp's chain, with llama.cpp's names and defaults.

The chain order is ``samplers``, in llama.cpp's own names
(``penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature``); ``--sampling-seq``
spells the same thing one letter a stage (``edskypmxt``). Defaults are llama.cpp's
``common_params_sampling``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..model import checks
from ..model.checks import Namer
from ..model.errors import TokenstepError
from .bounds import check_sizes

DEFAULT_SEED = 42
DEFAULT_ORDER = (
    "penalties",
    "dry",
    "top_n_sigma",
    "top_k",
    "typ_p",
    "top_p",
    "min_p",
    "xtc",
    "temperature",
)
DEFAULT_BREAKERS = ("\n", ":", '"', "*")

# common_sampler_type_to_chr: one letter per stage (--sampling-seq).
LETTERS = {
    "e": "penalties",
    "d": "dry",
    "s": "top_n_sigma",
    "k": "top_k",
    "y": "typ_p",
    "p": "top_p",
    "m": "min_p",
    "x": "xtc",
    "t": "temperature",
}
# The other spellings llama.cpp's --samplers accepts (common_sampler_types_from_names).
ALT_NAMES = {
    "top-k": "top_k",
    "top-p": "top_p",
    "nucleus": "top_p",
    "typical-p": "typ_p",
    "typical": "typ_p",
    "typ-p": "typ_p",
    "typ": "typ_p",
    "min-p": "min_p",
    "temp": "temperature",
    "top-n-sigma": "top_n_sigma",
}


def parse_samplers(text: str) -> list[str]:
    """``--samplers``: llama.cpp's names separated by ``;`` (or ``,``)."""
    out = []
    for raw in text.replace(",", ";").split(";"):
        name = raw.strip().lower()
        if not name:
            continue
        name = ALT_NAMES.get(name, name)
        if name not in DEFAULT_ORDER:
            known = ";".join(DEFAULT_ORDER)
            raise TokenstepError(f"--samplers: llama.cpp has no sampler {raw.strip()!r} ({known}).")
        out.append(name)
    return out


def parse_sampling_seq(text: str) -> list[str]:
    """``--sampling-seq``: one letter per stage, as llama.cpp spells it (``edskypmxt``)."""
    out = []
    for ch in text.strip():
        if ch not in LETTERS:
            raise TokenstepError(
                f"--sampling-seq: llama.cpp has no sampler letter {ch!r} (use {''.join(LETTERS)})."
            )
        out.append(LETTERS[ch])
    return out


def parse_logit_bias(text: str) -> tuple[int, float]:
    """``-l TOKEN_ID(+/-)BIAS``, e.g. ``15043+1`` or ``15043-inf``."""
    s = text.strip()
    for i in range(1, len(s)):
        if s[i] in "+-":
            try:
                tok, bias = int(s[:i]), float(s[i:])
            except ValueError:
                break
            if math.isnan(bias):
                break
            return tok, bias
    raise TokenstepError(f"-l/--logit-bias wants TOKEN_ID(+/-)BIAS, like 15043+1, not {text!r}.")


# How each field is called on the command line (llama.cpp's flag names, common/arg.cpp).
FLAGS = {
    "temp": "--temp",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "min_p": "--min-p",
    "seed": "--seed",
    "greedy": "--greedy",
    "repeat_penalty": "--repeat-penalty",
    "repeat_last_n": "--repeat-last-n",
    "presence_penalty": "--presence-penalty",
    "frequency_penalty": "--frequency-penalty",
    "dry_multiplier": "--dry-multiplier",
    "dry_base": "--dry-base",
    "dry_allowed_length": "--dry-allowed-length",
    "dry_penalty_last_n": "--dry-penalty-last-n",
    "dry_sequence_breakers": "--dry-sequence-breaker",
    "top_n_sigma": "--top-nsigma",
    "typical_p": "--typical",
    "xtc_probability": "--xtc-probability",
    "xtc_threshold": "--xtc-threshold",
    "dynatemp_range": "--dynatemp-range",
    "dynatemp_exponent": "--dynatemp-exp",
    "mirostat": "--mirostat",
    "mirostat_tau": "--mirostat-ent",
    "mirostat_eta": "--mirostat-lr",
    "logit_bias": "-l/--logit-bias",
    "samplers": "--samplers",
    "grammar": "--grammar",
    "off": "stages turned off",
}


@dataclass
class SamplerSettings:
    temp: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = DEFAULT_SEED
    greedy: bool = False
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: list[str] = field(default_factory=lambda: list(DEFAULT_BREAKERS))
    top_n_sigma: float = -1.0
    typical_p: float = 1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    logit_bias: list[tuple[int, float]] = field(default_factory=list)
    samplers: list[str] = field(default_factory=lambda: list(DEFAULT_ORDER))
    grammar: str = ""  # GBNF text ("" = none)
    off: list[str] = field(default_factory=list)  # stages turned off in the app

    @property
    def is_greedy(self) -> bool:
        """``--temp 0`` means greedy, as in llama.cpp's tools."""
        return self.greedy or self.temp <= 0.0

    def validate(self, name: Namer | None = None) -> None:
        """Types first, then llama.cpp's ranges. ``name`` says how a field is called where it
        came from: the command line's flag by default, ``settings.temp`` for a session file
        (the one validator the two share)."""
        n = name or FLAGS.__getitem__
        self._check_types(n)
        check_sizes(self, n)

        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise TokenstepError(msg)

        need(self.temp >= 0, f"{n('temp')} must be 0 or more, not {self.temp}.")
        need(self.top_k >= 0, f"{n('top_k')} must be 0 (off) or more, not {self.top_k}.")
        need(0.0 <= self.top_p <= 1.0, f"{n('top_p')} must be between 0 and 1, not {self.top_p}.")
        need(0.0 <= self.min_p <= 1.0, f"{n('min_p')} must be between 0 and 1, not {self.min_p}.")
        need(
            0 <= self.seed <= 0xFFFFFFFF,
            f"{n('seed')} must be between 0 and 4294967295, not {self.seed}.",
        )
        need(
            self.repeat_penalty > 0,
            f"{n('repeat_penalty')} must be more than 0 (1.0 = off), not {self.repeat_penalty}.",
        )
        need(
            self.repeat_last_n >= -1,
            f"{n('repeat_last_n')} must be -1 (context size), 0 (off) or more, not {self.repeat_last_n}.",
        )
        need(
            self.dry_multiplier >= 0,
            f"{n('dry_multiplier')} must be 0 (off) or more, not {self.dry_multiplier}.",
        )
        need(self.dry_base >= 1.0, f"{n('dry_base')} must be 1.0 or more, not {self.dry_base}.")
        need(
            self.dry_allowed_length >= 1,
            f"{n('dry_allowed_length')} must be 1 or more, not {self.dry_allowed_length}.",
        )
        need(
            self.dry_penalty_last_n >= -1,
            f"{n('dry_penalty_last_n')} must be -1 (context size), 0 (off) or more, "
            f"not {self.dry_penalty_last_n}.",
        )
        need(
            0.0 <= self.typical_p <= 1.0,
            f"{n('typical_p')} must be between 0 and 1 (1.0 = off), not {self.typical_p}.",
        )
        need(
            0.0 <= self.xtc_probability <= 1.0,
            f"{n('xtc_probability')} must be between 0 and 1, not {self.xtc_probability}.",
        )
        need(
            0.0 <= self.xtc_threshold <= 1.0,
            f"{n('xtc_threshold')} must be between 0 and 1, not {self.xtc_threshold}.",
        )
        need(
            self.dynatemp_range >= 0,
            f"{n('dynatemp_range')} must be 0 (off) or more, not {self.dynatemp_range}.",
        )
        need(
            self.dynatemp_exponent > 0,
            f"{n('dynatemp_exponent')} must be more than 0, not {self.dynatemp_exponent}.",
        )
        need(
            self.mirostat in (0, 1, 2),
            f"{n('mirostat')} must be 0 (off), 1 or 2, not {self.mirostat}.",
        )
        tau, eta = self.mirostat_tau, self.mirostat_eta
        need(tau > 0, f"{n('mirostat_tau')} must be more than 0, not {tau}.")
        need(eta > 0, f"{n('mirostat_eta')} must be more than 0, not {eta}.")
        for stage in [*self.samplers, *self.off]:
            need(stage in DEFAULT_ORDER, f"{n('samplers')}: llama.cpp has no sampler {stage!r}.")
        need(
            len(set(self.samplers)) == len(self.samplers),
            "--samplers names a sampler twice.",
        )
        for tok, bias in self.logit_bias:
            need(tok >= 0, f"-l/--logit-bias: token id {tok} is negative.")
            need(not math.isnan(bias), "-l/--logit-bias: the bias is not a number.")

    def _check_types(self, n: Callable[[str], str]) -> None:
        """A session file can hold anything JSON holds: NaN, a string, ``true`` for a number."""
        for f in fields(self):
            v, what = getattr(self, f.name), n(f.name)
            kind = str(f.type)
            if kind == "float":
                checks.finite(v, what)
            elif kind == "int":
                checks.whole(v, what)
            elif kind == "bool":
                checks.flag(v, what)
            elif kind == "str":
                checks.text(v, what)
            elif kind.startswith("list[str]"):
                if not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v):
                    raise TokenstepError(
                        f"{what} must be a list of strings, not {checks.shown(v)}."
                    )

    def check_vocab(self, n_vocab: int) -> None:
        for tok, _ in self.logit_bias:
            if tok >= n_vocab:
                raise TokenstepError(
                    f"-l/--logit-bias: token id {tok} is outside the vocabulary (0..{n_vocab - 1})."
                )

    def enabled(self, name: str) -> bool:
        return name in self.samplers and name not in self.off

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values. Not ``dataclasses.asdict``: its deep copy took
        0.08 ms a record here, and every record written to a trace or spilled carries one."""
        d = {name: getattr(self, name) for name in _FIELD_NAMES}
        for name in ("dry_sequence_breakers", "samplers", "off"):
            d[name] = list(d[name])
        d["logit_bias"] = [list(x) for x in self.logit_bias]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplerSettings:
        """A saved settings dict; keys it lacks (older sessions) take the defaults."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "logit_bias" in kw:
            kw["logit_bias"] = [(int(t), float(b)) for t, b in kw["logit_bias"]]
        return cls(**kw)

    def copy(self) -> SamplerSettings:
        return replace(
            self,
            dry_sequence_breakers=list(self.dry_sequence_breakers),
            logit_bias=list(self.logit_bias),
            samplers=list(self.samplers),
            off=list(self.off),
        )

    def describe(self) -> str:
        if self.is_greedy:
            return "greedy"
        if self.mirostat:
            return (
                f"mirostat {self.mirostat} · tau {self.mirostat_tau:.2f} · "
                f"eta {self.mirostat_eta:.2f} · temp {self.temp:.2f} · seed {self.seed}"
            )
        return (
            f"top-k {self.top_k} · top-p {self.top_p:.2f} · min-p {self.min_p:.2f} · "
            f"temp {self.temp:.2f} · seed {self.seed}"
        )


_FIELD_NAMES = tuple(f.name for f in fields(SamplerSettings))
