"""What the worker knows about this chat beyond the engine: playback, notice, spans, picks.

One :class:`State` per chat, owned by the worker thread. Every command changes it through the
fields below or the public methods (``note``, ``note_records``, ``restore``); a view copies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..engine.model import secret
from ..engine.model.chat_template import Message
from ..engine.record.run_record import Pick
from ..engine.run.step import StepRecord
from ..engine.run.verify import VerifyResult
from .playback import Playback
from .stages import BATCH, DECODE, LOGITS


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
    values: tuple[Pick | None, ...]  # per token: its pick in the record (None: not known)
    how: str  # what left it: "rewind", "force", "fork" or "jump"
    seq: int | None = None  # the parked sequence holding its cells (None: decode again)


@dataclass(frozen=True)
class LastPick:
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
    playback: Playback = field(default_factory=Playback)  # mode, activity, busy: transitions
    action: str = "start"  # what the last command did
    lit: tuple[int, ...] = ()  # pipeline stages the last command ran
    messages: list[Message] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    reply_start: int | None = None
    last_records: tuple[StepRecord, ...] = ()  # the llama_decode calls of the last command
    new_cells: tuple[int, int] = (0, 0)  # [start, end) of the KV cells those calls wrote
    cut_cells: tuple[int, int] = (0, 0)  # [start, end) of cells a verify wrote, then cut
    last_pick: LastPick | None = None
    tokenized: Tokenized | None = None
    queued: str | None = None
    notice: str = ""
    notice_level: str = "info"  # "info", "warn" or "error"
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

    @property
    def mode(self) -> str:  # "autoplay" or "step" (changed by ``playback``'s transitions)
        return self.playback.mode

    @property
    def activity(self) -> str:  # "idle", "generating" or "done"
        return self.playback.activity

    @property
    def busy(self) -> str | None:  # a slow command under way (a re-prefill, verify)
        return self.playback.busy

    @property
    def playing(self) -> bool:
        return self.playback.playing

    def ran(
        self, action: str, lit: tuple[int, ...] | None = None, *, unsaved: bool = False
    ) -> None:
        """A command did ``action``, running the pipeline stages ``lit`` (None: the lit stages
        stay as they were); ``unsaved``: it changed what a save would write."""
        self.action = action
        if lit is not None:
            self.lit = lit
        if unsaved:
            self.dirty_since_save = True

    def light(self, lit: tuple[int, ...]) -> None:
        """The pipeline stages the command ran (the pipeline pane lights them)."""
        self.lit = lit

    def saved(self, path: str, *, autosave: bool) -> None:
        """The chat was written to ``path``; an autosave leaves nothing unsaved (ctrl+s to
        another file does not: the autosave file still lacks the change)."""
        self.last_saved = path
        if autosave:
            self.dirty_since_save = False

    def note(self, text: str, level: str = "info") -> None:
        """The sentence the status line shows for the last command (the API key masked: a
        server's error text may quote it)."""
        self.notice, self.notice_level = secret.redact(text), level

    def sent(
        self, messages: list[Message], spans: list[Span], reply_start: int, tok: Tokenized
    ) -> None:
        """A message went into the context: the conversation, its spans, where the reply
        starts and how the turn tokenized; no pick yet."""
        self.messages, self.spans, self.reply_start = messages, spans, reply_start
        self.tokenized, self.last_pick = tok, None

    # -- the conversation ------------------------------------------------------------------
    def queue(self, text: str) -> None:
        """A message typed while a reply plays: sent when the reply ends."""
        self.queued = text

    def take_queued(self) -> str | None:
        """The queued message, taken off the queue (None if none)."""
        text, self.queued = self.queued, None
        return text

    def give_back(self, text: str) -> None:
        """A message that could not be sent: the chat box gets it back."""
        self.returned_text = text

    def handled(self) -> None:
        """A new command: nothing is handed back to the chat box yet."""
        self.returned_text = None

    def with_system(self, system: Message | None) -> int:
        """The conversation opens with ``system`` from now on (None: no system message);
        the number of messages after it."""
        first = self.messages[:1]
        rest = self.messages[1:] if first and first[0].role == "system" else list(self.messages)
        self.messages = ([system] if system else []) + rest
        self.dirty_since_save = True
        return len(rest)

    def shifted(self, spans: list[Span], n_keep: int, n_discard: int) -> None:
        """A context shift forgot [n_keep, n_keep + n_discard): ``spans`` are what is left;
        where the reply and a fork start move back with the tokens after the gap."""
        self.spans = spans
        if self.reply_start is not None and self.reply_start > n_keep:
            self.reply_start = max(n_keep, self.reply_start - n_discard)
        if self.fork_at is not None and self.fork_at > n_keep:
            self.fork_at = max(n_keep, self.fork_at - n_discard)

    def cut_to(self, spans: list[Span]) -> None:
        """The context ends earlier (a rewind, a jump): ``spans`` are the ones left."""
        self.spans = spans

    def note_pick(self, pick: LastPick | None) -> None:
        """The token the last step took (None: a forked step's sequence 0 gave no row)."""
        self.last_pick = pick

    # -- forks and paths -------------------------------------------------------------------
    def forked(self, at: int, seqs: list[int]) -> None:
        """Sequence 0 (``at`` tokens long) was copied: each of ``seqs`` starts empty."""
        self.fork_at, self.fork_tokens = at, {q: [] for q in seqs}

    def fork_stepped(self, tokens: dict[int, int]) -> None:
        """One token per sequence, from one llama_decode."""
        for seq, token in tokens.items():
            self.fork_tokens.setdefault(seq, []).append(token)

    def unforked(self) -> None:
        self.fork_at, self.fork_tokens = None, {}

    def add_path(
        self,
        tokens: tuple[int, ...],
        values: tuple[Pick | None, ...],
        how: str,
        seq: int | None,
    ) -> None:
        """A path not taken of this turn, numbered in order."""
        self.paths.append(PathBranch(self.path_next, tokens, values, how, seq))
        self.path_next += 1

    def jumped(self, note: str) -> None:
        """A jump put a path back (``note``: how)."""
        self.path_note = note

    def new_turn(self) -> None:
        """A new message: the paths were of the last turn."""
        self.paths, self.path_note = [], None

    # -- the panes' slices -----------------------------------------------------------------
    def verified(self, res: VerifyResult) -> None:
        self.verify, self.action, self.lit = res, "verify", ()

    def scale(self, scale: str) -> None:
        """The surprise map's scale ("off", "p", "p'", "entropy")."""
        self.surprise_scale = scale

    def show_paths(self, shown: bool) -> None:
        """The tree pane is (not) showing: while it is, rewinds park their cells."""
        self.paths_shown = shown

    def forget_step(self, cells: tuple[int, int] | None = None) -> None:
        """The last pick and its decode calls do not describe the context (a rewind, a
        jump); ``cells``: the new-cells range the KV grid lights from now (None: kept)."""
        self.last_pick, self.last_records = None, ()
        if cells is not None:
            self.new_cells, self.cut_cells = cells, (0, 0)

    def note_records(
        self,
        records: Sequence[StepRecord],
        new_cells: tuple[int, int],
        cut_cells: tuple[int, int] = (0, 0),
    ) -> None:
        """The llama_decode calls a command made: the batch pane draws them, the KV grid
        lights the cells they wrote (``cut_cells``: the ones a verify wrote and its
        llama_memory_seq_rm removed again); the timeline reads the run's record."""
        self.last_records = tuple(records)
        self.new_cells, self.cut_cells = new_cells, cut_cells

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
        if reply_start is None:
            self.playback.idle()
        else:
            self.playback.start_reply()
        self.playback.pause()
        self.action = "resume"
        self.lit = (BATCH, DECODE, LOGITS) if records else ()
        self.last_records = tuple(records)
        self.new_cells, self.cut_cells = new_cells, (0, 0)
        self.dirty_since_save = False
        self.note(notice)
