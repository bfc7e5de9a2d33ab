"""The immutable view the worker publishes: everything the panes draw, copied out of the engine.

Fields are grouped by the pane that draws them (the builder in :mod:`tui.worker.build` fills
each group with one function). Nothing here refers to the engine: a view can be drawn on the
UI thread while the worker decodes the next token.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.model.chat_template import Message
from ..engine.model.kvcache import KVLogReport
from ..engine.model.work import WorkSnapshot
from ..engine.observe.memory import MemoryReport
from ..engine.record.run_record import Turn
from ..engine.run.backend import LOCAL, Capabilities
from ..engine.run.step import ShiftEvent, StepRecord
from ..engine.run.verify import VerifyResult
from ..engine.sampler.sampling import ChainResult, SamplerSettings
from .attention import AttentionView
from .chat import Span
from .lens import LensView
from .paths import PathsView
from .remote_view import RemoteView
from .spec_run import SpecMarks
from .state import LastPick, Tokenized
from .surprise import SurpriseView
from .timeline import TimelineTotals

TOP_ROWS = 16  # candidates shown in the logits pane


@dataclass(frozen=True)
class CandidateRow:
    id: int
    piece: bytes
    logit: float
    p: float  # softmax of the raw logits (temperature 1, whole vocabulary)
    p_final: float  # probability after the sampler chain (0 if cut)
    cut_by: str | None  # the stage that removed it, None if it survived
    # Its probability in the distribution top-p saw: the softmax (temperature 1) over what the
    # stages before it left; None if it was cut before top-p or top-p did not run.
    p_seen: float | None = None
    # The logit past logit bias, penalties and DRY (what the cutting stages saw); None when no
    # stage moved a logit.
    logit_moved: float | None = None


@dataclass(frozen=True)
class SeqView:
    """One sequence after a fork: the tokens it generated since the fork point."""

    seq_id: int
    pieces: tuple[bytes, ...]
    n_tokens: int  # the sequence's length in the KV cache
    stop_reason: str | None


@dataclass(frozen=True)
class HeaderView:
    """The header and the status line: where the session is saved, the context's settings."""

    queued: str | None  # a message waiting for the reply to end
    autosave_path: str | None
    last_saved: str | None
    n_records: int
    flash_attn: str
    n_batch: int
    n_ubatch: int
    returned_text: str | None = None  # a message that could not be sent, for the chat box
    # Where the model runs: the layers and KV cache (llama.cpp's log), or the server's URL.
    where: str | None = None
    spec: str | None = None  # --spec-type: acceptance, tokens per decode, speed vs plain
    spec_short: str | None = None  # the same in fewer words (a narrow header)
    n_past: int = 0  # sequence 0's cells, from the run's record (the header's ctx)


@dataclass(frozen=True)
class TextView:
    """The conversation and tokens panes: the context's tokens, their pieces and origins."""

    tokens: tuple[int, ...]
    pieces: tuple[bytes, ...]
    spans: tuple[Span, ...]
    reply_start: int | None
    n_ctx: int
    n_vocab: int
    messages: tuple[Message, ...]
    last_pick: LastPick | None
    tokenized: Tokenized | None
    fork_at: int | None = None  # sequence 0's length when it was forked
    seqs: tuple[SeqView, ...] = ()  # each live sequence's continuation since the fork
    surprise: SurpriseView = SurpriseView("off")  # the surprise map (and the run chart)
    spec: SpecMarks | None = None  # --spec-type: the last round's accepted/rejected tokens

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    @property
    def reply_tokens(self) -> int:
        return 0 if self.reply_start is None else len(self.tokens) - self.reply_start


@dataclass(frozen=True)
class BatchView:
    """The pipeline and batch panes: the stages the last command ran and its decode calls."""

    lit: tuple[int, ...]  # pipeline stages the last command ran, in order
    last_records: tuple[StepRecord, ...]  # the llama_decode calls of the last decoding command
    batch_pieces: tuple[tuple[bytes, ...], ...]  # the pieces of those calls' tokens
    new_cells: tuple[int, int]  # [start, end) of the KV cells those calls wrote
    cut_cells: tuple[int, int] = (0, 0)  # cells a verify wrote and then cut (--spec-type)


@dataclass(frozen=True)
class KVView:
    """The KV cache grid and the causal mask: one entry per used cell."""

    kv_cells: tuple[tuple[int, int, tuple[int, ...]], ...]  # (token, pos, seq_ids) per used cell
    kv_bytes: int
    kv_bytes_per_token: int
    kv_bytes_allocated: int
    kv_report: KVLogReport | None
    kv_problems: tuple[str, ...]

    @property
    def kv_used(self) -> int:
        return len(self.kv_cells)


@dataclass(frozen=True)
class TimelineView:
    """The timeline pane: the newest llama_decode calls and totals over all of them."""

    calls: tuple[tuple[str, int, float], ...]  # (phase, n_tokens, decode_ms), newest calls
    totals: TimelineTotals = TimelineTotals()  # over every call, not only those kept
    older: int = 0  # calls before ``calls[0]`` that are only counted


@dataclass(frozen=True)
class LogitsView:
    """The logits pane: the top candidates and what the sampler chain does to them."""

    candidates: tuple[CandidateRow, ...]
    chain: ChainResult | None
    entropy: float | None
    next_pick: int | None
    remote: RemoteView | None = None  # over llama-server: top K of N, logprobs, who picks
    chain_cursor: int = 0  # the stage the chain keys act on (an index into settings.samplers)
    next_piece: bytes | None = None  # the next pick's piece (it may be on no row)
    spec_row: str | None = None  # --spec-type: the pane shows this row of the verify batch


@dataclass(frozen=True)
class CacheView:
    """The cache lessons (memory, work, verify, prefix reuse per turn, context shifts)."""

    memory: MemoryReport | None = None
    work: WorkSnapshot | None = None
    verify: VerifyResult | None = None
    turns: tuple[Turn, ...] = ()  # this chat's prefills (the run record's): reused vs computed
    shifts: tuple[ShiftEvent, ...] = ()  # context shifts, with the tokens each forgot
    shift_pieces: tuple[tuple[bytes, ...], ...] = ()  # the forgotten tokens' pieces, per shift
    context_full: str = "stop"
    n_keep: int = 0
    verify_pieces: tuple[bytes, bytes] | None = None  # the cached and fresh top-1's pieces


@dataclass(frozen=True)
class View:
    """Everything the panes draw, copied out of the engine by the worker thread: a few fields
    every pane reads, and one small sub-view per pane (each pane reads its own)."""

    seq: int
    mode: str  # "autoplay" or "step"
    activity: str  # "idle", "generating" or "done"
    action: str  # what the last command did
    raw: bool
    settings: SamplerSettings
    notice: str
    notice_level: str  # "info", "warn" or "error"
    stop_reason: str | None
    header: HeaderView
    text: TextView
    batch: BatchView
    kv: KVView
    timeline: TimelineView
    logits: LogitsView
    cache: CacheView = CacheView()
    attention: AttentionView | None = None  # the Attention and Anatomy tabs
    lens: LensView | None = None  # the Lens tab
    paths: PathsView = PathsView()  # the paths not taken of this turn (the tree pane)
    commands: int = 0  # user commands handled so far: a view that answers one is drawn at once
    capabilities: Capabilities = LOCAL  # what the backend can show; panes ask, never the type
    busy: str | None = None  # a slow command under way: what it is doing (the app shows progress)
