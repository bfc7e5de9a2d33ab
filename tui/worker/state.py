"""What the worker knows about this chat beyond the engine: mode, notice, spans, picks.

One :class:`State` per chat, owned by the worker thread. Every command changes it through the
fields below or the public methods (``note``, ``note_records``, ``restore``); a view copies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..engine.chat import Message
from ..engine.step import StepRecord
from ..engine.surprise import Surprise
from ..engine.verify import VerifyResult
from .stages import BATCH, DECODE, LOGITS
from .timeline import Timeline


@dataclass(frozen=True)
class Span:
    """A run of context tokens with one origin: template text, a message, or the reply."""

    role: str  # "template", "system", "user", "assistant", "reply", "prompt" (raw), "generated"
    start: int
    end: int


@dataclass
class PathBranch:
    id: int
    tokens: tuple[int, ...]  # the reply's tokens on this path (after reply_start)
    values: tuple[Surprise | None, ...]  # per token: p, p', entropy (None: not known)
    how: str  # what left it: "rewind", "force", "fork" or "jump"
    seq: int | None = None  # the parked sequence holding its cells (None: decode again)


@dataclass(frozen=True)
class Pick:
    """The token the last step sampled (or was forced to take)."""

    id: int
    piece: bytes
    p: float
    p_final: float
    forced: bool
    eog: bool
    greedy: bool
    seed: int
    mirostat: int = 0  # 1 or 2: mirostat's own sampler picked (with the seed), not dist


@dataclass(frozen=True)
class Tokenized:
    chars: int  # characters the user typed this turn
    text_tokens: int  # tokens of the user's own text
    prompt_tokens: int  # the whole prompt (template included)
    reused: int  # of them already in the KV cache (prefix reuse)


@dataclass
class State:
    mode: str = "autoplay"  # "autoplay" or "step"
    activity: str = "idle"  # "idle", "generating" or "done"
    action: str = "start"  # what the last command did
    lit: tuple[int, ...] = ()  # pipeline stages the last command ran
    messages: list[Message] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    reply_start: int | None = None
    last_records: tuple[StepRecord, ...] = ()  # the llama_decode calls of the last command
    new_cells: tuple[int, int] = (0, 0)  # [start, end) of the KV cells those calls wrote
    timeline: Timeline = field(default_factory=Timeline)
    last_pick: Pick | None = None
    tokenized: Tokenized | None = None
    queued: str | None = None
    notice: str = ""
    notice_level: str = "info"  # "info", "warn" or "error"
    chain_cursor: int = 0  # the sampler stage the chain keys move or turn off
    returned_text: str | None = None  # a message that could not be sent, for the chat box
    chat_no: int = 1
    records_from: int = 0  # first engine record of this chat
    last_saved: str | None = None
    dirty_since_save: bool = False
    verify: VerifyResult | None = None
    turns_from: int = 0  # first engine turn of this chat
    shifts_from: int = 0
    fork_at: int | None = None  # sequence 0's length when it was forked
    fork_tokens: dict[int, list[int]] = field(default_factory=dict)
    paths: list[PathBranch] = field(default_factory=list)  # this turn's paths not taken
    path_next: int = 1  # the next branch's number
    path_note: str | None = None  # how the last jump put its path back
    paths_shown: bool = False  # the tree pane is showing: rewinds park their cells
    surprise_scale: str = "off"  # the text pane's surprise map: "off", "p", "p'" or "entropy"
    busy: str | None = None  # a slow command under way (a re-prefill, verify): what it does

    @property
    def playing(self) -> bool:
        return self.mode == "autoplay" and self.activity == "generating"

    def note(self, text: str, level: str = "info") -> None:
        """The sentence the status line shows for the last command."""
        self.notice, self.notice_level = text, level

    def note_records(self, records: Sequence[StepRecord], new_cells: tuple[int, int]) -> None:
        """The llama_decode calls a command made: the batch pane draws them, the KV grid
        lights the cells they wrote, the timeline adds them."""
        self.last_records = tuple(records)
        self.new_cells = new_cells
        self.timeline.add(records)

    def restore(
        self,
        *,
        messages: list[Message],
        spans: list[Span],
        reply_start: int | None,
        records: Sequence[StepRecord],
        new_cells: tuple[int, int],
        notice: str,
    ) -> None:
        """A resumed session: its conversation, and the prefill that rebuilt its cache."""
        self.messages = messages
        self.spans = spans
        self.reply_start = reply_start
        self.activity = "idle" if reply_start is None else "generating"
        self.mode = "step"
        self.action = "resume"
        self.lit = (BATCH, DECODE, LOGITS) if records else ()
        self.last_records = tuple(records)
        self.new_cells = new_cells
        self.timeline = Timeline(records)
        self.dirty_since_save = False
        self.note(notice)
