"""What one turn of the loop leaves behind: the step record of each ``llama_decode`` call.

A :class:`StepRecord` is written for every decode call (a prefill chunk or one fed token) and
completed in one place (``decode.py``). The TUI's panes, ``tokenstep trace`` and saved sessions
all read these same records, so nothing here knows about a screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..model.kvcache import Forgotten
from ..record.run_record import Pick
from ..sampler.sampling import ChainResult, SamplerChain, SamplerSettings
from .batch import DecodeCall

if TYPE_CHECKING:
    import numpy as np

    from ..wire.remote_step import ServerStep


@dataclass
class Candidate:
    id: int
    piece: bytes
    logit: float
    p: float


@dataclass
class SeqRow:
    """One sequence's row in a decode call that carried several sequences (after a fork)."""

    seq_id: int
    batch_index: int  # the row's index in the llama_batch (llama_get_logits_ith)
    token: int  # the token this row fed
    pos: int
    top: list[Candidate] = field(default_factory=list)
    entropy: float = 0.0
    n_ctx_tokens: int = 0  # the sequence's length after the call
    sampled: int | None = None  # the token sampled from this row's logits
    chain: ChainResult | None = None
    eog: bool = False


@dataclass
class SpecRow:
    """One row of a speculative verify decode: its top candidates, and the target's pick from
    it with the chain's stages (None for the rows after the first mismatch: never sampled)."""

    top: list[Candidate]
    entropy: float
    pick: int | None = None
    chain: ChainResult | None = None


@dataclass
class SpecInfo:
    """A draft-verify round (``--spec-type``): the draft, how much of it the target accepted,
    and the target's picks row by row up to and including the first that differs (so the
    round emitted exactly ``picks``)."""

    type: str = ""
    draft: list[int] = field(default_factory=list)
    accepted: int = 0
    picks: list[int] = field(default_factory=list)
    rows: list[SpecRow] = field(default_factory=list)  # one per token of the verify batch
    removed: int = 0  # KV cells cut after the verify (llama_memory_seq_rm): the rejected tail
    draft_ms: float = 0.0  # llama_decode time of the draft model for this draft (0: none ran)
    draft_decodes: int = 0
    source: int | None = None  # ngram-simple: the context index the draft was copied from
    draft_removed: int = 0  # cells the draft model's own cache cut to follow (0: no cache)
    why_none: str = ""  # why the drafter could not draft this round (a sentence), or ""


@dataclass
class ShiftEvent:
    """A context shift: the first ``n_keep`` tokens stay, the next ``n_discard`` are forgotten,
    the rest slide back ``n_discard`` positions (llama_memory_seq_rm + llama_memory_seq_add)."""

    index: int  # 0, 1, ... (Forgotten.shift)
    before_record: int  # the record decoded right after the shift
    n_past: int  # sequence length before the shift
    n_keep: int
    n_discard: int
    forgotten: list[Forgotten]  # sequence 0's (the main text's) forgotten tokens
    # After a fork, every sequence's forgotten tokens (shared ones appear under each).
    by_seq: dict[int, list[Forgotten]] = field(default_factory=dict)


@dataclass
class PrefillTurn:
    """One ``sync_prompt``: prompt tokens found in the cache against those decoded."""

    reused: int
    computed: int
    prefill_ms: float
    records: tuple[int, int]  # [first, end) record indices of the prefill
    scored_rows: int = 0  # logits rows read beyond the last one, to score the prompt


@dataclass
class StepRecord:
    """One ``llama_decode`` call and everything the loop learned from it."""

    index: int
    phase: str  # "prefill" or "decode"
    call: DecodeCall
    decode_ms: float
    chunk: tuple[int, int] = (1, 1)  # (i, n) for a prompt split into several calls
    reused: int = 0  # prompt tokens found already in the cache (prefix reuse)
    has_logits: bool = False
    top: list[Candidate] = field(default_factory=list)
    entropy: float = 0.0
    chain: ChainResult | None = None
    sampled: int | None = None
    forced: bool = False
    eog: bool = False
    n_ctx_tokens: int = 0  # tokens in the context after this call
    kv_used: int = 0
    kv_bytes: int = 0
    kv_problems: list[str] = field(default_factory=list)
    settings: SamplerSettings | None = None
    # Data that observers (attention capture, graph census) attach to this decode call.
    extras: dict[str, Any] = field(default_factory=dict)
    # Several sequences in one call (after a fork): one row per sequence, by seq_id.
    rows: dict[int, SeqRow] = field(default_factory=dict)
    shift: ShiftEvent | None = None  # the context shift made just before this call
    server: ServerStep | None = None  # the llama-server request behind this record (remote)
    scored_rows: int = 0  # prompt rows asked for logits only to score the prompt (surprise map)
    spec: SpecInfo | None = None  # a speculative round's verify decode (spec_verify.py)

    def note_views(self, top: list[Candidate], entropy: float) -> None:
        """Write the top candidates and the entropy of the record's logits row (on the
        observation thread when it runs: overlap.py; before anyone reads the record)."""
        self.top, self.entropy = top, entropy

    def note_pick(
        self,
        seq: int,
        token: int,
        chain: ChainResult,
        eog: bool,
        *,
        forced: bool,
        settings: SamplerSettings,
    ) -> None:
        """Write the token sampled (or forced) from this record's logits for ``seq``: on the
        record itself for sequence 0, and on the sequence's row after a fork."""
        if seq == 0:
            self.sampled, self.forced, self.chain = token, forced, chain
            self.settings = settings.copy()
            self.eog = eog
        row = self.rows.get(seq)
        if row is not None:
            row.sampled, row.chain, row.eog = token, chain, eog


@dataclass
class Branch:
    """A sequence made by :meth:`Engine.fork`: its own sampler chain (own seeded RNG) and its own
    logits row. Sequence 0 keeps using the engine's own ``chain`` and ``logits``."""

    seq_id: int
    parent: int
    fork_pos: int  # positions below this are cells shared with the parent
    chain: SamplerChain
    logits: np.ndarray | None
    record: int | None  # the record whose row produced ``logits``
    stop_reason: str | None = None

    @property
    def seed(self) -> int:
        return self.chain.seed


@dataclass
class Sampled:
    """Stages 5 and 6 for one sequence: the token picked (or forced) from a logits row."""

    seq: int
    token: int
    chain: ChainResult  # the sampler chain's stages on that row (a preview when forced)
    logits: np.ndarray  # the row sampled from
    source: StepRecord | None  # the record that produced the row (None: moved to disk)
    forced: bool
    eog: bool  # an end-of-generation token: this sequence stops here
    p: float | None = None  # the token's probability under ``logits`` (temperature 1)


@dataclass
class Parked:
    """A sequence holding a copy of sequence 0 as it was: its tokens, the logits row of its
    last position and the record's picks of its tokens (a jump back writes them again)."""

    seq: int
    tokens: list[int]
    logits: np.ndarray | None
    record: int | None
    values: list[Pick | None]
