"""What the engine's stage modules are handed: the parts of one session, one protocol each.

``decode``, ``prompt``, ``paths``, ``shift``, ``sequences`` and ``verify`` each run one stage
on the session :class:`~tui.engine.run.session.Engine` puts together, and the decode observers
read it. Each is typed with its own protocol, naming only what that module touches (a stage
that calls another's functions extends that one's protocol), not with ``Engine``: none of them
imports the module that imports them all (no import circle, not even one made only for type
hints). :class:`EngineParts` is all of them. This module imports only the engine's leaf records.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import llama_cpp
    import numpy as np

    from ..model.context import EngineConfig
    from ..model.kvcache import KVMirror
    from ..model.model import Model, ModelInfo
    from ..model.tokens import Vocab
    from ..model.work import WorkCounter
    from ..record.run_record import RunRecord
    from ..record.surprise import SurpriseLog
    from ..sampler.sampling import SamplerChain, SamplerSettings
    from .batch import DecodeCall, LlamaBatch
    from .logits import LogitsMemory
    from .overlap import Overlap
    from .records import RecordLog
    from .replay import ReplayLog
    from .step import Branch, Parked, PrefillTurn, ShiftEvent, StepRecord


class ObservedParts(Protocol):
    """What the decode observers (attention, lens, graph, cell map) read of the session."""

    model: Model
    info: ModelInfo
    vocab: Vocab
    kv: KVMirror

    @property
    def ctx(self) -> llama_cpp.llama_context_p: ...


class DecodeObserver(Protocol):
    """Something that watches every ``llama_decode`` (e.g. the attention capture).

    ``configure`` runs before the context exists (it may set ``cb_eval``); ``before_decode``
    and ``after_decode`` bracket each call, and ``after_decode`` may put data in ``extras``."""

    def configure(self, params: llama_cpp.llama_context_params) -> None: ...

    def before_decode(self, engine: ObservedParts, call: DecodeCall) -> None: ...

    def after_decode(
        self, engine: ObservedParts, call: DecodeCall, extras: dict[str, Any]
    ) -> None: ...


class DecodeParts(ObservedParts, Protocol):
    """``decode``: the batch, the logits memory, the records and the observers of one call."""

    batch: LlamaBatch
    logits_memory: LogitsMemory
    records: RecordLog
    replay: ReplayLog
    run: RunRecord
    work: WorkCounter
    observers: list[DecodeObserver]
    overlap: Overlap  # the step's views, off the decode's critical path (overlap.py)
    decode_gate: Callable[[], AbstractContextManager[object]] | None

    @property
    def n_past(self) -> int: ...

    @property
    def kv_bytes_used(self) -> int: ...

    def set_seq_logits(self, seq: int, logits: np.ndarray, record: int) -> None: ...


class PromptParts(DecodeParts, Protocol):
    """``prompt``: a prompt into the context, its turn, the prompt rows' surprise."""

    config: EngineConfig
    n_ctx: int
    score_prompt: bool
    surprise: SurpriseLog
    turns: list[PrefillTurn]
    branches: dict[int, Branch]
    parked: dict[int, Parked]

    @property
    def tokens(self) -> list[int]: ...

    @property
    def logits(self) -> np.ndarray | None: ...

    def stopped(self, reason: str | None, seq: int = 0) -> None:
        """Generation ended for ``reason`` (None: it may go on); ``seq``: a fork's own."""

    def first_prompt(self, n: int) -> None:
        """A prompt of ``n`` tokens went into an empty context (``--keep -1`` keeps it)."""


class PathParts(PromptParts, Protocol):
    """``paths``: park, restore and drop the sequences of the paths not taken."""

    n_cells: int

    @property
    def logits_record(self) -> int | None: ...

    def truncate(self, n_keep: int) -> None: ...

    def prefill(self, tokens: list[int], *, reused: int = 0) -> list[StepRecord]: ...

    def ensure_logits(self) -> None: ...


class ShiftParts(PathParts, Protocol):
    """``shift``: llama.cpp's context shift, and the record of what it forgot."""

    shifts: list[ShiftEvent]

    @property
    def n_prompt(self) -> int:  # the first prompt's length (``--keep -1``)
        ...

    @property
    def seq_ids(self) -> list[int]: ...


class SequenceParts(ShiftParts, Protocol):
    """``sequences``: forks, each with its own sampler chain, stepped in one batch."""

    settings: SamplerSettings
    chain: SamplerChain
    gen_start: int

    @property
    def stop_reason(self) -> str | None: ...

    def seq_logits(self, seq: int) -> np.ndarray | None: ...

    def new_chain(self, seed: int) -> SamplerChain: ...


class VerifyParts(Protocol):
    """``verify``: a second context like the session's, to recompute the context in."""

    model: Model
    info: ModelInfo
    config: EngineConfig
    n_cells: int
    type_k: int
    type_v: int
    flash_attn_resolved: str
    kv: KVMirror
    shifts: list[ShiftEvent]
    branches: dict[int, Branch]
    overlap: Overlap  # settled first: the records verify reads are complete

    @property
    def logits_record(self) -> int | None: ...

    def seq_logits(self, seq: int) -> np.ndarray | None: ...


class EngineParts(SequenceParts, VerifyParts, Protocol):
    """The whole session as its stages see it (the Engine is the one maker)."""
