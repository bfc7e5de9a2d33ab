"""What the engine's stage modules are handed: the parts of one session, as a protocol.

``prompt``, ``decode``, ``sequences``, ``shift``, ``paths`` and ``verify`` each run one
stage on the session :class:`~tui.engine.session.Engine` puts together. They are typed with
:class:`EngineParts`, not with ``Engine``, so none of them imports the module that imports
them all (no import circle, not even one made only for type hints). This module imports only
the engine's leaf records.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import llama_cpp
    import numpy as np

    from .batch import DecodeCall, LlamaBatch
    from .logits import LogitsMemory
    from .model.context import EngineConfig
    from .model.kvcache import KVMirror
    from .model.model import Model, ModelInfo
    from .model.tokens import Vocab
    from .model.work import WorkCounter
    from .overlap import Overlap
    from .records import RecordLog
    from .replay import ReplayLog
    from .run_record import RunRecord
    from .sampler.sampling import SamplerChain, SamplerSettings
    from .step import Branch, Parked, PrefillTurn, ShiftEvent, StepRecord
    from .surprise import SurpriseLog


class DecodeObserver(Protocol):
    """Something that watches every ``llama_decode`` (e.g. the attention capture).

    ``configure`` runs before the context exists (it may set ``cb_eval``); ``before_decode``
    and ``after_decode`` bracket each call, and ``after_decode`` may put data in ``extras``."""

    def configure(self, params: llama_cpp.llama_context_params) -> None: ...

    def before_decode(self, engine: EngineParts, call: DecodeCall) -> None: ...

    def after_decode(
        self, engine: EngineParts, call: DecodeCall, extras: dict[str, Any]
    ) -> None: ...


class EngineParts(Protocol):
    """One session's parts as the stage modules use them (the Engine is the one maker)."""

    # the model and its context
    model: Model
    info: ModelInfo
    config: EngineConfig
    vocab: Vocab
    n_ctx: int
    n_cells: int
    type_k: int
    type_v: int
    flash_attn_resolved: str
    # the decoder: the batch, the KV mirror, the logits memory, the records
    batch: LlamaBatch
    kv: KVMirror
    logits_memory: LogitsMemory
    records: RecordLog
    replay: ReplayLog
    run: RunRecord
    work: WorkCounter
    observers: list[DecodeObserver]
    overlap: Overlap  # the step's views, off the decode's critical path (overlap.py)
    decode_gate: Callable[[], AbstractContextManager[object]] | None
    score_prompt: bool
    surprise: SurpriseLog
    turns: list[PrefillTurn]
    shifts: list[ShiftEvent]
    # the sampler and the sequences
    settings: SamplerSettings
    chain: SamplerChain
    gen_start: int
    branches: dict[int, Branch]
    parked: dict[int, Parked]

    @property
    def n_prompt(self) -> int:  # the first prompt's length (``--keep -1``)
        ...

    @property
    def ctx(self) -> llama_cpp.llama_context_p: ...

    @property
    def tokens(self) -> list[int]: ...

    @property
    def n_past(self) -> int: ...

    @property
    def kv_bytes_used(self) -> int: ...

    @property
    def logits(self) -> np.ndarray | None: ...

    @property
    def logits_record(self) -> int | None: ...

    @property
    def generated(self) -> list[int]: ...

    @property
    def seq_ids(self) -> list[int]: ...

    @property
    def stop_reason(self) -> str | None: ...

    def stopped(self, reason: str | None, seq: int = 0) -> None:
        """Generation ended for ``reason`` (None: it may go on); ``seq``: a fork's own."""

    def first_prompt(self, n: int) -> None:
        """A prompt of ``n`` tokens went into an empty context (``--keep -1`` keeps it)."""

    def set_seq_logits(self, seq: int, logits: np.ndarray, record: int) -> None: ...

    def seq_logits(self, seq: int) -> np.ndarray | None: ...

    def truncate(self, n_keep: int) -> None: ...

    def prefill(self, tokens: list[int], *, reused: int = 0) -> list[StepRecord]: ...

    def ensure_logits(self) -> None: ...

    def new_chain(self, seed: int) -> SamplerChain: ...
