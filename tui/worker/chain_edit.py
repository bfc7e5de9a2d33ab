"""The sampler chain edited from the keyboard: pick a stage, move it up or down, turn it off or
on, or set any parameter by llama.cpp's flag name. Each change re-runs the chain on the same
logits (no decode), as the other sampler keys do; the :class:`~.sampler_desk.SamplerDesk` makes it."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..engine.model.errors import TokenstepError
from ..engine.sampler.chain_stages import STAGES
from ..engine.sampler.grammar import check_grammar, schema_to_gbnf
from ..engine.sampler.sampler_settings import (
    SamplerSettings,
    parse_logit_bias,
    parse_samplers,
    parse_sampling_seq,
)
from .sampler_keys import settings_changed
from .sampler_listing import DEFAULTS, FLAGS, closest, stage_report, value_of

if TYPE_CHECKING:
    from .parts import WorkerParts


def default_of(flag: str) -> str:
    """llama.cpp's default for ``flag``, in llama.cpp's notation."""
    return value_of(DEFAULTS, flag)


def move_cursor(w: WorkerParts, delta: int) -> None:
    name = w.desk.move_cursor(delta)
    st = w.desk.settings
    w.state.ran("settings")
    did = ""
    if w.engine.logits is not None and not _off(st, name):
        try:
            did = stage_report(w.engine.preview(), name, w.engine.vocab.piece)
        except TokenstepError:
            did = ""
    w.state.note(f"Stage {w.desk.cursor + 1}: {_label(name)}{_off(st, name)}{did}.")


def move_stage(w: WorkerParts, delta: int) -> None:
    """Move the stage under the cursor one place up (-1) or down (+1) the chain."""
    st, i = w.desk.settings, w.desk.cursor
    if not st.samplers:
        return
    j = w.desk.move_stage(delta)
    if j is None:
        last = "first" if delta < 0 else "last"
        settings_changed(w, f"{_label(st.samplers[i])} is already {last}")
        return
    settings_changed(w, f"{_label(w.desk.settings.samplers[j])} moved to place {j + 1} of the chain")


def toggle_stage(w: WorkerParts) -> None:
    """Turn the stage under the cursor off (left out of the chain) or back on."""
    if not w.desk.settings.samplers:
        return
    name, on = w.desk.toggle_stage()
    settings_changed(w, f"{_label(name)} {'on' if on else 'off'}")


def set_param(w: WorkerParts, line: str) -> None:
    """``NAME VALUE`` with llama.cpp's flag names (``repeat-penalty 1.2``, ``samplers
    top_k;temperature``); a bad name or value is one sentence and nothing changes."""
    name, _, raw = line.strip().lstrip("-").partition(" ")
    raw = raw.strip()
    if name not in FLAGS:
        raise TokenstepError(
            f"--{name}: llama.cpp has no sampler flag of that name; closest: "
            f"{', '.join(closest(name, 3))} (: lists all)."
        )
    field = FLAGS[name]
    w.desk.set_flag(field, _parse(w, name, field, raw, w.desk.settings))
    settings_changed(w, f"--{name} {raw or 'none'}")


def _parse(w: WorkerParts, name: str, field: str, raw: str, s: SamplerSettings) -> Any:
    if name == "samplers":
        return parse_samplers(raw)
    if name == "sampling-seq":
        return parse_sampling_seq(raw)
    if name == "logit-bias":
        return [] if raw in ("", "none") else [*s.logit_bias, parse_logit_bias(raw)]
    if name == "dry-sequence-breaker":
        return [] if raw == "none" else [*s.dry_sequence_breakers, raw.replace("\\n", "\n")]
    if name in ("grammar", "json-schema"):
        if raw in ("", "none"):
            return ""
        text = schema_to_gbnf(raw) if name == "json-schema" else raw
        w.desk.refuse_unbuildable(replace(s, grammar=text))  # no vocabulary (a server without -m): before parsing
        if (chain := w.engine.chain) is not None:  # None: the backend is closed
            check_grammar(chain.env.vocab, text)
        return text
    kind = type(getattr(s, field))
    try:
        return kind(int(raw)) if kind is int else kind(float(raw))
    except ValueError:
        raise TokenstepError(f"--{name} wants a number, not {raw!r}.") from None


def _label(name: str) -> str:
    return STAGES[name].label if name in STAGES else name


def _off(st: SamplerSettings, name: str) -> str:
    if name in st.off:
        return " (off)"
    if st.mirostat:
        return f" (not in the chain: mirostat {st.mirostat} replaces it)" * (name != "temperature")
    return "" if STAGES[name].active(st) else " (neutral at these settings: it changes nothing)"


def run(w: WorkerParts, op: str, arg: str) -> None:
    """One chain key: "cursor" or "move" by ``arg`` (-1 or 1), "toggle", or "set" NAME VALUE."""
    if op == "cursor":
        move_cursor(w, int(arg))
    elif op == "move":
        move_stage(w, int(arg))
    elif op == "toggle":
        toggle_stage(w)
    else:
        set_param(w, arg)
