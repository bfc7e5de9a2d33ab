"""The backend seam: what the decode worker needs from whatever computes the logits.

The worker (``tui/worker``) never asks which class it drives. It asks :attr:`Backend.capabilities`
and talks through the methods below; what only a llama.cpp context in this process can do
(forks, verify, prompt scoring, speculative rounds, the observers' replays) goes through
:attr:`Backend.local`, a :class:`LocalSession`, which is None over a server. The local llama.cpp :class:`~tui.engine.run.session.Engine`
is the first implementation; a remote llama-server backend is the second. A pane that needs
something a backend cannot give (KV cells, attention weights, the compute graph, verify)
reads the answer from the view and says why it is empty, instead of showing stale numbers.

Pure Python: no llama.cpp call here, so a remote backend can import it without a context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .parts import EngineParts

if TYPE_CHECKING:
    import numpy as np

    from ..model.context import EngineConfig
    from ..model.kvcache import KVLayout, KVLogReport, KVMirror
    from ..model.model import ModelInfo
    from ..model.offload import Placement
    from ..model.tokens import Vocab
    from ..model.work import WorkCounter
    from ..record.run_record import RunRecord
    from ..record.surprise import SurpriseLog
    from ..sampler.sampling import ChainResult, SamplerChain, SamplerSettings
    from .overlap import Overlap
    from .records import RecordLog
    from .step import PrefillTurn, Sampled, ShiftEvent, StepRecord
    from .verify import VerifyResult


@dataclass(frozen=True)
class Capabilities:
    """What a backend can show. Each flag is one kind of pane or command."""

    name: str  # "local llama.cpp" or "llama-server at http://..."
    kv_cells: bool = True  # the KV mirror holds real cells (grid, causal mask from cells)
    attention: bool = True  # attention weights from the eval callback
    graph: bool = True  # graph census and profile of a decode
    verify: bool = True  # recompute the context in a second context and compare
    fork: bool = True  # several sequences in one llama_decode
    full_vocab: bool = True  # logits for the whole vocabulary (not only the top K)
    context_shift: bool = True
    lens: bool = False  # the logit lens (per-layer projection of l_out)
    vocab: bool = True  # a llama_vocab for the stages that read token text (DRY, grammars)

    def missing(self, what: str) -> str | None:
        """A sentence for a pane that needs ``what`` (a field name), or None if available."""
        if getattr(self, what, False):
            return None
        return f"needs a local model: this one runs on {self.name}"


LOCAL = Capabilities("local llama.cpp")
LOCAL_LENS = Capabilities("local llama.cpp", lens=True)  # the model has a head the lens reads


class ServerFacts(Protocol):
    """What only a backend that steps a server knows (:attr:`Backend.server`): where it runs,
    who picks, and what the last request left unsent. Saved sessions, the header and the
    logits pane read these; a local context has none (``server`` is None)."""

    url: str
    api: str  # "llama-server" (its native /completion) or "openai" (/v1/completions)
    slot: int  # the server's slot that holds this conversation
    pick: str  # "tokenstep" or "server"
    n_probs: int  # the top K each request asks for
    ids_prompt: bool  # False: the server takes text only, the prompt goes as the ids' text

    @property
    def unsent_pick(self) -> int | None: ...

    def exactness(self, settings: SamplerSettings | None = None) -> str | None: ...


@runtime_checkable
class Backend(Protocol):
    """The operations the worker drives; the local Engine satisfies it structurally."""

    info: ModelInfo
    settings: SamplerSettings
    records: RecordLog
    run: RunRecord
    turns: list[PrefillTurn]
    shifts: list[ShiftEvent]
    work: WorkCounter
    overlap: Overlap  # a step's views, inline or while the next decode runs (loop.generate)
    stop_reason: str | None

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def local(self) -> LocalSession | None:
        """The llama.cpp session in this process, None over a server: forks, verify, prompt
        scoring, speculative rounds and the observers' replays need its context."""

    @property
    def server(self) -> ServerFacts | None:
        """The server this backend steps, None for a local context."""

    @property
    def tokens(self) -> list[int]: ...

    # what the panes read (a server backend has them too: an empty KV mirror, a zero layout)
    @property
    def vocab(self) -> Vocab: ...

    @property
    def config(self) -> EngineConfig: ...

    @property
    def flash_attn_resolved(self) -> str: ...

    @property
    def kv(self) -> KVMirror: ...

    @property
    def layout(self) -> KVLayout: ...

    @property
    def kv_bytes_used(self) -> int: ...

    @property
    def kv_bytes_allocated(self) -> int: ...

    @property
    def kv_reports(self) -> Sequence[KVLogReport]: ...

    @property
    def surprise(self) -> SurpriseLog: ...

    @property
    def chain(self) -> SamplerChain | None: ...

    @property
    def logits(self) -> np.ndarray | None: ...

    @property
    def logits_record(self) -> int | None: ...

    def keep_count(self) -> int: ...

    @property
    def n_past(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    # the loop (``loop.advance`` and ``loop.generate`` drive any backend through these)
    def prefill(self, tokens: list[int], *, reused: int = 0) -> list[StepRecord]: ...

    def sync_prompt(self, tokens: list[int], *, reuse: bool = True) -> list[StepRecord]: ...

    def sample(self, force: int | None = None) -> Sampled: ...

    def feed(self, token: int) -> StepRecord | None: ...

    def use_settings(self, settings: SamplerSettings) -> None: ...

    def score_prompts(self, on: bool) -> None: ...

    def use_chat_template(self, template: str) -> None: ...

    def preview(self, settings: SamplerSettings | None = None) -> ChainResult: ...

    def rewind(self, n: int = 1) -> int: ...

    def reset(self) -> None: ...

    @property
    def seq_ids(self) -> list[int]:  # [0] where nothing forks
        ...

    def close(self) -> None: ...


class LocalSession(EngineParts, Backend, Protocol):
    """A backend's llama.cpp session in this process (:attr:`Backend.local`): what forks,
    verify, prompt scoring, speculative rounds and the observers' replays drive."""

    stop_reason: str | None
    placement: Placement  # where llama.cpp put the layers and the KV cache (its load log)

    @property
    def flash_attn_note(self) -> str | None: ...

    def gate_decodes(self, gate: Callable[[], AbstractContextManager[object]] | None) -> None:
        """The worker's key lane opens ``gate`` while llama_decode runs (decode.py)."""

    # several sequences (capability ``fork``)
    def fork(self, src: int = 0) -> int: ...

    def drop_seq(self, seq: int) -> None: ...

    def step_seqs(self, force: dict[int, int] | None = None) -> StepRecord | None: ...

    # exactness (capability ``verify``)
    def verify_last(self, mode: str = "batched", seq: int = 0) -> VerifyResult: ...


def describe(caps: Capabilities, wanted: Sequence[str]) -> dict[str, Any]:
    """For saved sessions and ``trace``: which of ``wanted`` this backend provides."""
    return {"backend": caps.name, **{w: bool(getattr(caps, w, False)) for w in wanted}}
