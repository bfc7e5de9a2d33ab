"""The sampler keys: each press moves one setting of the sampler chain one rung of its ladder
(the :class:`~.sampler_desk.SamplerDesk` makes the change; this module says what it did).

A change takes effect at once when there are logits to sample from (the chain re-runs on the
same logits, no decode), else from the next message on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .stages import SAMPLE

if TYPE_CHECKING:
    from ..engine.sampler.sampler_settings import SamplerSettings
    from .parts import WorkerParts

# Ladders for the sampler keys: each press moves one rung.
TEMP_LADDER = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0, 3.0)
# top-k 0 is off, which keeps the whole vocabulary: the far end of the ladder, past 200, not
# the rung below 1 (where a press on k at top-k 1 would let every token through).
TOP_K_LADDER = (1, 2, 3, 5, 10, 20, 40, 50, 100, 200)
TOP_P_LADDER = (0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0)
MIN_P_LADDER = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5)
LADDERS: dict[str, tuple[float, ...]] = {
    "temp": TEMP_LADDER,
    "top_k": TOP_K_LADDER,
    "top_p": TOP_P_LADDER,
    "min_p": MIN_P_LADDER,
}
LABELS = {"temp": "temperature", "top_k": "top-k", "top_p": "top-p", "min_p": "min-p"}


def next_rung(ladder: tuple[float, ...], value: float, direction: int) -> float:
    """The next value on ``ladder`` above (direction > 0) or below ``value``; a value between
    rungs moves to the nearest rung in that direction."""
    if direction > 0:
        above = [v for v in ladder if v > value + 1e-9]
        return above[0] if above else value
    below = [v for v in ladder if v < value - 1e-9]
    return below[-1] if below else value


def format_setting(name: str, value: float) -> str:
    if name == "top_k":
        return "off" if value == 0 else str(int(value))
    if name == "temp" and value == 0:
        return "0 (greedy)"
    return f"{value:.2f}"


def adjust(w: WorkerParts, name: str, direction: int) -> None:
    """Move ``name`` (temp, top_k, top_p, min_p) one rung up or down its ladder."""
    st = w.desk.settings
    if name not in LADDERS:
        raise ValueError(name)
    value = float(getattr(st, name))
    if name == "top_k" and value == 0:
        value = float("inf")  # off: the far end
    if name == "top_k" and direction > 0 and value >= TOP_K_LADDER[-1]:
        new = 0.0  # off, above the top rung
    elif name == "top_k" and value == float("inf"):
        new = TOP_K_LADDER[-1] if direction < 0 else 0.0
    else:
        new = next_rung(LADDERS[name], value, direction)
    w.desk.adjust(name, new)
    st = w.desk.settings
    what = f"{LABELS[name]} {format_setting(name, getattr(st, name))}"
    why = not_in_chain(st, "temperature" if name == "temp" else name)
    if why:  # the value is kept for later, but this chain has no such stage to re-run
        w.state.ran("settings", unsaved=True)
        w.state.note(f"{what[:1].upper()}{what[1:]}: {why}, so nothing re-ran.")
        return
    settings_changed(w, what)


def not_in_chain(st: SamplerSettings, stage: str) -> str:
    """Why ``stage`` (llama.cpp's name) is not in the chain at these settings ("" if it is)."""
    label = LABELS.get(stage, stage.replace("_", "-"))
    if stage == "temperature":
        return ""  # mirostat keeps temperature; temp 0 means greedy, which the key turns off
    if st.mirostat:
        return f"{label} is not in the chain (mirostat {st.mirostat} replaces it)"
    if stage not in st.samplers:
        return f"{label} is not in --samplers ({';'.join(st.samplers) or 'none'})"
    if stage in st.off:
        return f"{label} is off (x on it in the chain turns it on)"
    return ""


def toggle_greedy(w: WorkerParts) -> None:
    if w.desk.settings.is_greedy:
        w.desk.set_greedy(False)
        settings_changed(w, "greedy off (sampling with dist)")
    else:
        w.desk.set_greedy(True)
        settings_changed(w, "greedy on (highest logit)")


def next_seed(w: WorkerParts, delta: int) -> None:
    seed = w.desk.reseed(delta)
    settings_changed(w, f"seed {seed} (a fresh RNG)")


def settings_changed(w: WorkerParts, what: str) -> None:
    s, has_logits = w.state, w.engine.logits is not None
    s.ran("settings", (SAMPLE,) if has_logits else (), unsaved=True)
    what = f"{what[:1].upper()}{what[1:]}"
    if not has_logits:
        s.note(f"{what}: used from the next message on.")
    elif w.lane.in_decode:  # the shown row already gave the token being decoded
        s.note(f"{what}: the next pick uses it (the token being decoded was picked before).")
    else:
        s.note(f"{what}: the sampler chain re-ran on the same logits, no decode.")
