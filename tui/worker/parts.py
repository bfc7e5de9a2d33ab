"""What the worker's command modules are handed: the parts of one worker, as a protocol.

``chat``, ``stepping``, ``paths``, ``sampler_keys``, ``chain_edit``, ``saving``, ``surprise``,
``verify``, ``attention``, ``lens`` and ``build`` each run their commands on the worker
:class:`~tui.worker.thread.Worker` puts together. They are typed with :class:`WorkerParts`,
not with ``Worker``, so none of them imports the module that imports them all (no import
circle, not even one made only for type hints).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from ..engine.run.parts import PathParts

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from ..engine.model.kvcache import KVMirror
    from ..engine.model.lens import LensHead
    from ..engine.model.tokens import Vocab
    from ..engine.observe.observer_context import ObserverContext, ReplayProgress, Wants
    from ..engine.run.backend import Backend, LocalSession
    from ..engine.run.session import Engine
    from ..engine.run.step import Branch, StepRecord
    from ..engine.sampler.sampling import ChainResult, SamplerChain, SamplerSettings
    from .commands import Command
    from .key_lane import KeyLane
    from .sampler_desk import SamplerDesk
    from .spec_run import SpecRun
    from .state import State


class PathSession(PathParts, Protocol):
    """The local session as ``worker/paths.py`` uses it: the engine's ``paths`` stage, and the
    forks it drops and the pick it previews when a path is left."""

    @property
    def chain(self) -> SamplerChain: ...

    def drop_seq(self, seq: int) -> None: ...

    def preview(self, settings: SamplerSettings | None = None) -> ChainResult: ...


class ForkSession(Protocol):
    """The local session as ``stepping.py``'s forks and ``build.py``'s fork panes use it: fork,
    step every sequence in one batch, drop them (capability ``fork``)."""

    @property
    def kv(self) -> KVMirror: ...

    @property
    def vocab(self) -> Vocab: ...

    @property
    def settings(self) -> SamplerSettings: ...

    @property
    def branches(self) -> dict[int, Branch]: ...

    @property
    def stop_reason(self) -> str | None: ...

    @property
    def logits(self) -> np.ndarray | None: ...

    @property
    def n_past(self) -> int: ...

    @property
    def seq_ids(self) -> list[int]: ...

    def preview(self, settings: SamplerSettings | None = None) -> ChainResult: ...

    def stopped(self, reason: str | None, seq: int = 0) -> None: ...

    def fork(self, src: int = 0) -> int: ...

    def step_seqs(self, force: dict[int, int] | None = None) -> StepRecord | None: ...

    def drop_seq(self, seq: int) -> None: ...


class AttentionPart(Protocol):
    """The attention control as the other parts use it."""

    on: bool  # capturing attention

    def state(self) -> dict[str, Any]: ...

    def forget_matrix(self) -> None: ...


class ObserversPart(Protocol):
    """The observer context's owner as the other parts use it (see observers.py)."""

    ctx: ObserverContext | None
    wants: Wants
    progress: ReplayProgress | None  # fill()'s replay under way: how far it is
    head_read: tuple[int, int] | None  # the lens's head read under way: bytes of all

    @property
    def local(self) -> bool: ...

    @property
    def engine(self) -> Engine | None: ...

    @property
    def head(self) -> LensHead | None: ...

    def want(self, **changes: object) -> ObserverContext | None: ...

    def rebuild(self, lens_from: int | None = None) -> None: ...

    def ready(self) -> ObserverContext | None: ...

    def fill(self, what: str) -> None: ...

    def may_replay(self) -> bool: ...


class WorkerParts(Protocol):
    """One worker's parts as its command modules use them."""

    raw: bool
    prefix_cache: bool
    spec: SpecRun | None  # --spec-type: the draft-verify rounds

    @property
    def system_prompt(self) -> str | None: ...

    @property
    def picks(self) -> int: ...

    @property
    def commands(self) -> int: ...

    @property
    def desk(self) -> SamplerDesk: ...

    @property
    def engine(self) -> Backend: ...

    @property
    def state(self) -> State: ...

    @property
    def lane(self) -> KeyLane: ...

    @property
    def attention(self) -> AttentionPart: ...

    @property
    def observers(self) -> ObserversPart: ...

    @property
    def autosave_path(self) -> Path | None: ...

    def note_pick(self, ended: tuple[int | None, str, ChainResult] | None) -> None:
        """A token was picked (the RNG advanced); ``ended``: the chain that picked an end."""

    def keep_system_prompt(self, text: str | None) -> None:
        """The first message of each chat from now on (None: none)."""

    def autosave_off(self) -> None:
        """An autosave failed: no more autosaves this run."""

    def new_state(self, state: State) -> None:
        """A new chat: ``state`` replaces the chat's state."""

    def busy(self, what: str) -> AbstractContextManager[None]: ...

    def progress(self, what: str, *, last: bool = False) -> None:
        """Inside :meth:`busy`: the busy line says ``what`` now (a view paced, the last sent)."""

    def require(self, what: str) -> LocalSession: ...

    def take_queued(self, kind: type[Command]) -> Command | None: ...

    def drop_forks(self) -> None: ...

    def autosave(self) -> None: ...
