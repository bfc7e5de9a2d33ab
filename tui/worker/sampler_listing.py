"""Every sampler setting as llama.cpp spells it: the flag, its current value the way one would
type it after the flag (``--sampling-seq kpmt``, ``--dry-sequence-breaker '\\n'``,
``-l 15043+1``), whether it differs from llama.cpp's default, and whether the chain uses it at
these settings (mirostat replaces top-k, top-p and min-p; a stage left out of ``samplers`` or
neutral uses none of its values). The ``:`` screen lists them; a wrong name gets the closest.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.model.tokens import quoted, visible
from ..engine.sampler.chain_result import MOVES
from ..engine.sampler.chain_stages import chain_defs
from ..engine.sampler.sampler_settings import LETTERS, SamplerSettings

if TYPE_CHECKING:
    from ..engine.sampler.chain_result import ChainResult

# llama.cpp's flag name → the setting it sets (the app's ": name value" line takes these).
FLAGS: dict[str, str] = {
    "temp": "temp",
    "top-k": "top_k",
    "top-p": "top_p",
    "min-p": "min_p",
    "seed": "seed",
    "repeat-penalty": "repeat_penalty",
    "repeat-last-n": "repeat_last_n",
    "presence-penalty": "presence_penalty",
    "frequency-penalty": "frequency_penalty",
    "dry-multiplier": "dry_multiplier",
    "dry-base": "dry_base",
    "dry-allowed-length": "dry_allowed_length",
    "dry-penalty-last-n": "dry_penalty_last_n",
    "dry-sequence-breaker": "dry_sequence_breakers",
    "top-nsigma": "top_n_sigma",
    "typical": "typical_p",
    "xtc-probability": "xtc_probability",
    "xtc-threshold": "xtc_threshold",
    "dynatemp-range": "dynatemp_range",
    "dynatemp-exp": "dynatemp_exponent",
    "mirostat": "mirostat",
    "mirostat-lr": "mirostat_eta",
    "mirostat-ent": "mirostat_tau",
    "logit-bias": "logit_bias",
    "samplers": "samplers",
    "sampling-seq": "samplers",
    "grammar": "grammar",
    "json-schema": "grammar",
}
DEFAULTS = SamplerSettings()
_LETTER = {name: ch for ch, name in LETTERS.items()}
# The stage of the chain each setting belongs to ("" for those every chain reads).
_STAGE = {
    "temp": "temperature",
    "dynatemp_range": "dynatemp",
    "dynatemp_exponent": "dynatemp",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "repeat_penalty": "penalties",
    "repeat_last_n": "penalties",
    "presence_penalty": "penalties",
    "frequency_penalty": "penalties",
    "dry_multiplier": "dry",
    "dry_base": "dry",
    "dry_allowed_length": "dry",
    "dry_penalty_last_n": "dry",
    "dry_sequence_breakers": "dry",
    "top_n_sigma": "top_n_sigma",
    "typical_p": "typ_p",
    "xtc_probability": "xtc",
    "xtc_threshold": "xtc",
    "mirostat_tau": "mirostat",
    "mirostat_eta": "mirostat",
    "logit_bias": "logit_bias",
    "seed": "rng",
    "samplers": "order",
}


@dataclass(frozen=True)
class Setting:
    flag: str  # llama.cpp's flag name, without the dashes
    value: str  # as typed after the flag
    changed: bool  # differs from llama.cpp's default
    used: bool  # the chain reads it at these settings


def _num(v: float) -> str:
    return f"{v:g}"


def _breakers(bs: list[str]) -> str:
    if not bs:
        return "none"
    return ", ".join("'" + b.replace("\\", "\\\\").replace("\n", "\\n") + "'" for b in bs)


def value_of(s: SamplerSettings, flag: str) -> str:
    """``flag``'s current value in llama.cpp's notation."""
    field = FLAGS[flag]
    v = getattr(s, field)
    if flag == "samplers":
        return ";".join(v) if v else "none"
    if flag == "sampling-seq":
        return "".join(_LETTER.get(n, "?") for n in v) or "none"
    if flag == "dry-sequence-breaker":
        return _breakers(v)
    if flag == "logit-bias":
        return " ".join(f"{t}{b:+g}" for t, b in v) or "none"
    if flag in ("grammar", "json-schema"):  # a schema is kept as the GBNF it became
        return "none" if not v else visible(v, space=False)
    if isinstance(v, float):
        return _num(v)
    return str(v)


def chain_order(s: SamplerSettings) -> str:
    """The chain as it runs now, in llama.cpp's names: ``logit_bias → top_k → ... → dist``."""
    names = [sdef.name for sdef in chain_defs(s)]
    if s.is_greedy:
        names = [n for n in names if n != "temperature"] + ["greedy"]
    else:
        names.append(f"mirostat{'_v2' * (s.mirostat == 2)}" if s.mirostat else "dist")
    return " → ".join(names)


def stages_used(s: SamplerSettings) -> set[str]:
    """The chain's stages at these settings (llama.cpp's names), and the picker."""
    used = {sdef.name for sdef in chain_defs(s)}
    if s.is_greedy:  # greedy takes the highest logit: no temperature, no RNG
        used.discard("temperature")
        return used | {"greedy"} | ({"order"} if not s.mirostat else set())
    if s.mirostat:  # common_sampler_init: temperature (plain), then mirostat, nothing else
        return used | {"mirostat", "rng"}
    return used | {"order", "rng"} | ({"dynatemp"} if "temperature" in used else set())


def listing(s: SamplerSettings) -> list[Setting]:
    """Every flag with its current value, in the order of :data:`FLAGS`."""
    used = stages_used(s)
    out = []
    for flag, field in FLAGS.items():
        stage = _STAGE.get(field, "")
        out.append(
            Setting(
                flag,
                value_of(s, flag),
                value_of(s, flag) != value_of(DEFAULTS, flag),
                not stage or stage in used,
            )
        )
    return out


def closest(name: str, n: int = 4) -> list[str]:
    """The flag names nearest ``name``, sorted (by edit distance, then by name)."""
    ratio = {f: difflib.SequenceMatcher(None, name, f).ratio() for f in FLAGS}
    for f in FLAGS:  # a shared prefix or a part (``penalty`` in ``repeat-penalty``) counts
        if name and (f.startswith(name[:3]) or name in f or f in name):
            ratio[f] += 0.3
    return sorted(sorted(FLAGS), key=lambda f: -ratio[f])[:n]


def stage_report(chain: ChainResult, name: str, piece: Callable[[int], bytes]) -> str:
    """What stage ``name`` did on this row, for the chain keys' notice (``: keeps 8 of 8,
    did not fire``); empty when the stage is not in the chain."""
    for st, shown in zip(chain.stages, chain.shown_counts(), strict=True):
        if st.key != name:
            continue
        if st.key in MOVES:
            what = f"moved {len(st.changed)} logit(s)" if st.changed else "moved no logit"
            if st.changed:
                tok, a, b = st.changed[0]
                why = st.why.get(tok, "")
                what += f", e.g. {quoted(piece(tok), tok)} {a:.2f}→{b:.2f}"
                what += f" ({why})" if why else ""
        else:
            what = f"keeps {shown:,} of {st.n_before:,}" if st.n_before else f"keeps {shown:,}"
        return f": {what}, {st.note}" if st.note else f": {what}"
    return ""
