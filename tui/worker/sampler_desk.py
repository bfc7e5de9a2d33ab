"""The sampler desk: the one owner, on the worker's side, of every change to the sampler settings.

The sampler keys (:mod:`.sampler_keys`) and the chain edits (:mod:`.chain_edit`) work out what
a press means and say it in the notice line; the desk makes the change. It never changes the
backend's :class:`~tui.engine.sampler.sampler_settings.SamplerSettings` in place: each change is a new
object (``dataclasses.replace`` or a checked copy) handed whole to ``backend.use_settings``, and
llama.cpp's chain is built from it at the next ``llama_sampler_apply``. A key answered on the key
lane while ``llama_decode`` runs therefore swaps one reference; the pick that follows the decode
reads the old settings or the new ones, never a list half reordered.

The desk also holds the chain cursor (the stage the chain keys act on) and the chain that
picked an end token (that row is still on screen, and a fresh preview would run on an RNG that
has advanced since).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..engine.model.errors import TokenstepError

if TYPE_CHECKING:
    from ..engine.run.backend import Backend
    from ..engine.sampler.sampler_settings import SamplerSettings
    from ..engine.sampler.sampling import ChainResult

# (the logits record, the settings it ran on, the chain's result) of the pick of an end token
Ended = tuple[int | None, str, "ChainResult"]


class SamplerDesk:
    """The settings' changes, the chain cursor and the chain that picked an end token."""

    def __init__(self, backend: Callable[[], Backend]) -> None:
        self._backend = backend  # the worker may replace its engine (attention, lens)
        self.cursor = 0
        self.ended: Ended | None = None

    @property
    def settings(self) -> SamplerSettings:
        return self._backend().settings

    def use(self, new: SamplerSettings) -> None:
        """Sample with ``new`` from the next chain run on (the one place settings change)."""
        self._backend().use_settings(new)

    def refuse_unbuildable(self, trial: SamplerSettings) -> None:
        """One sentence, and nothing changes, when the backend cannot build a stage ``trial``
        turns on (DRY or a grammar without a vocabulary: llama.cpp would end the process)."""
        chain = self._backend().chain  # None: the backend is closed
        refused = chain.refusal(trial) if chain is not None else None
        if refused is not None:
            raise TokenstepError(refused)

    # -- the sampler keys ------------------------------------------------------------------------
    def adjust(self, name: str, value: float) -> None:
        """``name`` (temp, top_k, top_p, min_p) takes ``value``; a temperature turns greedy off."""
        st = self.settings
        change: dict[str, Any] = {name: int(value) if name == "top_k" else value}
        self.use(replace(st, greedy=False if name == "temp" else st.greedy, **change))

    def set_greedy(self, on: bool) -> None:
        """Greedy on (the highest logit), or off (dist at a temperature, 0.8 if it was 0)."""
        st = self.settings
        self.use(replace(st, greedy=on, temp=st.temp if on or st.temp > 0 else 0.8))

    def reseed(self, delta: int) -> int:
        """A fresh RNG ``delta`` seeds away; the new seed."""
        seed = (self.settings.seed + delta) % (1 << 32)
        self.use(replace(self.settings, seed=seed))
        return seed

    # -- the chain edits -------------------------------------------------------------------------
    def move_cursor(self, delta: int) -> str:
        """The cursor ``delta`` stages on (wrapping); the stage under it ("none": no stages)."""
        samplers = self.settings.samplers
        self.cursor = (self.cursor + delta) % max(len(samplers), 1)
        return samplers[self.cursor] if samplers else "none"

    def move_stage(self, delta: int) -> int | None:
        """The stage under the cursor one place up (-1) or down (+1); its new place, or None
        when it is already first or last (nothing changes)."""
        st, i = self.settings, self.cursor
        j = i + delta
        if not 0 <= j < len(st.samplers):
            return None
        samplers = list(st.samplers)
        samplers[i], samplers[j] = samplers[j], samplers[i]
        self.use(replace(st, samplers=samplers))
        self.cursor = j
        return j

    def toggle_stage(self) -> tuple[str, bool]:
        """The stage under the cursor off (left out of the chain) or back on: (its name, on)."""
        st = self.settings
        name = st.samplers[self.cursor]
        if name in st.off:
            trial = replace(st, off=[n for n in st.off if n != name])
            self.refuse_unbuildable(trial)
            self.use(trial)
            return name, True
        self.use(replace(st, off=[*st.off, name]))
        return name, False

    def set_flag(self, field: str, value: Any) -> None:
        """One settings field (a llama.cpp flag's) to ``value``, checked whole first: a bad value
        is one sentence and nothing changes."""
        trial = replace(self.settings.copy(), **{field: value})
        trial.validate()
        trial.check_vocab(self._backend().info.n_vocab)
        self.refuse_unbuildable(trial)
        if field == "samplers":
            self.cursor = min(self.cursor, max(len(trial.samplers) - 1, 0))
        self.use(trial)

    # -- picks -----------------------------------------------------------------------------------
    def note_pick(self, ended: Ended | None) -> None:
        """A token was picked: ``ended`` is the chain that picked an end token (None: not one)."""
        self.ended = ended
