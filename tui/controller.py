"""The decode worker: one thread owns the Engine; the UI talks to it through a queue.

The app never calls the engine. It puts small commands (send, step, rewind, adjust a sampler
setting, ...) on a queue; the worker thread runs them one at a time, in order, between decode
calls, and publishes an immutable :class:`View` of everything the panes draw. During autoplay
the worker keeps stepping while the queue is empty. A view is built only when the UI has taken
the previous one (or when the worker goes idle), so a slow screen never slows the decode loop
and the screen always draws the latest state.

Nothing here imports Textual or Rich: the controller is plain Python and can be driven from a test.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import session_store
from .attention_control import AttentionControl, AttentionView
from .engine.backend import LOCAL, Capabilities
from .engine.chat import Message, chat_tokens
from .engine.errors import ContextFullError, TokenstepError
from .engine.kvcache import KVLogReport
from .engine.memory import MemoryReport, memory_report
from .engine.sampling import ChainResult, SamplerSettings, softmax, top_stats
from .engine.session import Engine
from .engine.step import PrefillTurn, ShiftEvent, StepRecord
from .engine.verify import VerifyResult
from .engine.work import WorkSnapshot

TOP_ROWS = 16  # candidates shown in the logits pane
MIN_VIEW_INTERVAL = 1 / 30  # during autoplay, views are built at most 30 times a second

# Pipeline stages, in loop order (index = stage number - 1).
STAGES = ("tokenize", "batch", "decode", "logits", "sample", "end/detokenize", "feed back")
TOKENIZE, BATCH, DECODE, LOGITS, SAMPLE, DETOKENIZE, FEED_BACK = range(7)

# Ladders for the sampler keys: each press moves one rung.
TEMP_LADDER = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0, 3.0)
TOP_K_LADDER = (0, 1, 2, 3, 5, 10, 20, 40, 50, 100, 200)
TOP_P_LADDER = (0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0)
MIN_P_LADDER = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5)
LADDERS: dict[str, tuple[float, ...]] = {
    "temp": TEMP_LADDER,
    "top_k": TOP_K_LADDER,
    "top_p": TOP_P_LADDER,
    "min_p": MIN_P_LADDER,
}


def next_rung(ladder: tuple[float, ...], value: float, direction: int) -> float:
    """The next value on ``ladder`` above (direction > 0) or below ``value``; a value between
    rungs moves to the nearest rung in that direction."""
    if direction > 0:
        above = [v for v in ladder if v > value + 1e-9]
        return above[0] if above else value
    below = [v for v in ladder if v < value - 1e-9]
    return below[-1] if below else value


@dataclass(frozen=True)
class Span:
    """A run of context tokens with one origin: template text, a message, or the reply."""

    role: str  # "template", "system", "user", "assistant", "reply", "prompt" (raw), "generated"
    start: int
    end: int


@dataclass(frozen=True)
class CandidateRow:
    id: int
    piece: bytes
    logit: float
    p: float  # softmax of the raw logits (temperature 1, whole vocabulary)
    p_final: float  # probability after the sampler chain (0 if cut)
    cut_by: str | None  # the stage that removed it, None if it survived


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


@dataclass(frozen=True)
class Tokenized:
    chars: int  # characters the user typed this turn
    text_tokens: int  # tokens of the user's own text
    prompt_tokens: int  # the whole prompt (template included)
    reused: int  # of them already in the KV cache (prefix reuse)


TIMELINE_KEEP = 2048  # calls the timeline pane can draw; older ones are only counted


@dataclass(frozen=True)
class TimelineTotals:
    """Sums over every ``llama_decode`` call of the chat, drawn or not."""

    prefill_calls: int = 0
    prefill_tokens: int = 0
    prefill_ms: float = 0.0
    decode_calls: int = 0
    decode_tokens: int = 0
    decode_ms: float = 0.0


class Timeline:
    """(phase, n_tokens, decode_ms) per ``llama_decode`` call: the newest ``TIMELINE_KEEP``
    for the pane to draw, and running totals over all of them, so a long session costs O(1)
    per step."""

    def __init__(self, records: Iterable[StepRecord] = ()) -> None:
        self.recent: deque[tuple[str, int, float]] = deque(maxlen=TIMELINE_KEEP)
        self.n = 0
        self._totals = {"prefill": [0, 0, 0.0], "decode": [0, 0, 0.0]}  # calls, tokens, ms
        self.add(records)

    def add(self, records: Iterable[StepRecord]) -> None:
        for rec in records:
            n, ms = rec.call.n_tokens, rec.decode_ms
            self.recent.append((rec.phase, n, ms))
            self.n += 1
            acc = self._totals["prefill" if rec.phase == "prefill" else "decode"]
            acc[0] += 1
            acc[1] += n
            acc[2] += ms

    def __len__(self) -> int:
        return self.n

    def totals(self) -> TimelineTotals:
        p, d = self._totals["prefill"], self._totals["decode"]
        return TimelineTotals(int(p[0]), int(p[1]), p[2], int(d[0]), int(d[1]), d[2])


@dataclass(frozen=True)
class View:
    """Everything the panes draw, copied out of the engine by the worker thread."""

    seq: int
    mode: str  # "autoplay" or "step"
    activity: str  # "idle", "generating" or "done"
    action: str  # what the last command did
    lit: tuple[int, ...]  # pipeline stages the last command ran, in order
    raw: bool
    settings: SamplerSettings
    tokens: tuple[int, ...]
    pieces: tuple[bytes, ...]
    spans: tuple[Span, ...]
    reply_start: int | None
    n_ctx: int
    n_vocab: int
    kv_cells: tuple[tuple[int, int, tuple[int, ...]], ...]  # (token, pos, seq_ids) per used cell
    kv_bytes: int
    kv_bytes_per_token: int
    kv_bytes_allocated: int
    kv_report: KVLogReport | None
    kv_problems: tuple[str, ...]
    last_records: tuple[StepRecord, ...]  # the llama_decode calls of the last decoding command
    batch_pieces: tuple[tuple[bytes, ...], ...]  # the pieces of those calls' tokens
    new_cells: tuple[int, int]  # [start, end) of the KV cells those calls wrote
    timeline: tuple[tuple[str, int, float], ...]  # (phase, n_tokens, decode_ms), newest calls
    candidates: tuple[CandidateRow, ...]
    chain: ChainResult | None
    entropy: float | None
    next_pick: int | None
    last_pick: Pick | None
    tokenized: Tokenized | None
    stop_reason: str | None
    queued: str | None
    notice: str
    notice_level: str  # "info", "warn" or "error"
    messages: tuple[Message, ...]
    autosave_path: str | None
    last_saved: str | None
    n_records: int
    flash_attn: str
    n_batch: int
    n_ubatch: int
    returned_text: str | None = None  # a message that could not be sent, for the chat box
    attention: AttentionView | None = None  # the Attention and Anatomy tabs
    # The cache lessons (issue 5): all copied out of the engine by the worker thread.
    memory: MemoryReport | None = None
    work: WorkSnapshot | None = None
    verify: VerifyResult | None = None
    turns: tuple[PrefillTurn, ...] = ()  # this chat's prefills: reused vs computed tokens
    shifts: tuple[ShiftEvent, ...] = ()  # context shifts, with the tokens each forgot
    shift_pieces: tuple[tuple[bytes, ...], ...] = ()  # the forgotten tokens' pieces, per shift
    context_full: str = "stop"
    n_keep: int = 0
    fork_at: int | None = None  # sequence 0's length when it was forked
    seqs: tuple[SeqView, ...] = ()  # each live sequence's continuation since the fork
    commands: int = 0  # user commands handled so far: a view that answers one is drawn at once
    timeline_totals: TimelineTotals = TimelineTotals()  # over every call, not only those kept
    timeline_older: int = 0  # calls before ``timeline[0]`` that are only counted
    capabilities: Capabilities = LOCAL  # what the backend can show; panes ask, never the type

    @property
    def kv_used(self) -> int:
        return len(self.kv_cells)

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    @property
    def reply_tokens(self) -> int:
        return 0 if self.reply_start is None else len(self.tokens) - self.reply_start


@dataclass(frozen=True)
class SeqView:
    """One sequence after a fork: the tokens it generated since the fork point."""

    seq_id: int
    pieces: tuple[bytes, ...]
    n_tokens: int  # the sequence's length in the KV cache
    stop_reason: str | None


@dataclass
class _Cmd:
    name: str
    args: tuple[Any, ...] = ()


_STOP = _Cmd("stop")


@dataclass
class _State:
    mode: str = "autoplay"
    activity: str = "idle"
    action: str = "start"
    lit: tuple[int, ...] = ()
    messages: list[Message] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    reply_start: int | None = None
    last_records: tuple[StepRecord, ...] = ()
    new_cells: tuple[int, int] = (0, 0)
    timeline: Timeline = field(default_factory=Timeline)
    last_pick: Pick | None = None
    tokenized: Tokenized | None = None
    queued: str | None = None
    notice: str = ""
    notice_level: str = "info"
    returned_text: str | None = None
    chat_no: int = 1
    records_from: int = 0  # first engine record of this chat
    last_saved: str | None = None
    dirty_since_save: bool = False
    verify: VerifyResult | None = None
    turns_from: int = 0  # first engine turn of this chat
    shifts_from: int = 0
    fork_at: int | None = None
    fork_tokens: dict[int, list[int]] = field(default_factory=dict)


class Controller:
    """Owns an :class:`Engine` on one thread and publishes :class:`View` objects.

    ``on_view`` is called from the worker thread; it must only hand the view over (e.g. post
    a Textual message), never draw."""

    def __init__(
        self,
        engine: Engine,
        *,
        raw: bool = False,
        prefix_cache: bool = True,
        autoplay: bool = True,
        autosave_dir: str | Path | None = None,
        on_view: Callable[[View], None] | None = None,
        close_engine: bool = True,
    ) -> None:
        self.engine = engine
        self.raw = raw
        self.prefix_cache = prefix_cache
        self.close_engine = close_engine
        self.on_view = on_view
        self._q: queue.Queue[_Cmd] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seq = 0
        self._lock = threading.Lock()
        self._latest: View | None = None
        self._taken = True  # the UI has taken the latest view
        self._dirty = False
        self._built_at = 0.0
        self._preview_cache: tuple[Any, Any] | None = None
        self._commands = 0
        self._work_cache: tuple[object, float, WorkSnapshot] | None = None
        self._pieces_cache: tuple[tuple[int, ...], tuple[bytes, ...]] = ((), ())
        self._cells_cache: tuple[object, tuple[tuple[int, int, tuple[int, ...]], ...]] = (None, ())
        self._picks = 0  # picks so far: the preview cache must not outlive an RNG advance
        self._started = time.time()
        self.autosave_dir = Path(autosave_dir) if autosave_dir is not None else None
        self.s = _State(mode="autoplay" if autoplay else "step")
        self.error: str | None = None  # an unexpected failure in the worker
        self.attention = AttentionControl(self)

    # -- the UI side ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tokenstep-decode", daemon=True)
        self._thread.start()

    def take(self) -> View | None:
        """The latest view (called by the UI thread; marks it as taken)."""
        with self._lock:
            self._taken = True
            return self._latest

    @property
    def latest(self) -> View | None:
        return self._latest

    def send(self, text: str) -> None:
        self._q.put(_Cmd("send", (text,)))

    def step(self) -> None:
        self._q.put(_Cmd("step"))

    def force(self, token: int) -> None:
        self._q.put(_Cmd("force", (token,)))

    def toggle_play(self) -> None:
        self._q.put(_Cmd("toggle_play"))

    def pause(self) -> None:
        self._q.put(_Cmd("pause"))

    def rewind(self, n: int = 1) -> None:
        self._q.put(_Cmd("rewind", (n,)))

    def adjust(self, name: str, direction: int) -> None:
        """Move ``name`` (temp, top_k, top_p, min_p) one rung up or down its ladder."""
        self._q.put(_Cmd("adjust", (name, direction)))

    def toggle_greedy(self) -> None:
        self._q.put(_Cmd("greedy"))

    def next_seed(self, delta: int = 1) -> None:
        self._q.put(_Cmd("seed", (delta,)))

    def new_chat(self) -> None:
        self._q.put(_Cmd("new_chat"))

    def save(self, path: str) -> None:
        self._q.put(_Cmd("save", (path,)))

    def attention_cmd(self, name: str, *args: Any) -> None:
        """Attention: "toggle", "layer" n, "head" h (None = mean), "tabs" (matrix, census)."""
        self._q.put(_Cmd("attention", (name, *args)))

    def verify(self, mode: str = "batched") -> None:
        """Recompute the context from scratch in a fresh context and compare the logits."""
        self._q.put(_Cmd("verify", (mode,)))

    def fork(self) -> None:
        """Copy sequence 0 into a new seq_id; later steps decode both in one batch."""
        self._q.put(_Cmd("fork"))

    def stop(self, timeout: float | None = 60.0) -> bool:
        """Ask the worker to finish (after the decode it is in) and wait for it. The worker
        autosaves and frees the context itself; True when it has ended."""
        self._stop.set()
        self._q.put(_STOP)
        if self._thread is None:
            self._shutdown()
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def autosave_path(self) -> Path | None:
        if self.autosave_dir is None:
            return None
        return self.autosave_dir / session_store.autosave_name(self._started, self.s.chat_no)

    # -- the worker ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._publish(force=True)
            while not self._stop.is_set():
                playing = self.s.mode == "autoplay" and self.s.activity == "generating"
                if self._dirty and not playing:
                    self._publish(force=True)
                try:
                    cmd = self._q.get_nowait() if playing else self._q.get()
                except queue.Empty:
                    cmd = None
                if cmd is _STOP or self._stop.is_set():
                    break
                if cmd is not None:
                    self._guarded(self._handle, cmd)
                    self._publish(force=True)
                else:
                    self._guarded(self._auto_step)
                    self._publish(force=False)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        try:
            if self.s.dirty_since_save:
                self._autosave()
        except Exception:  # never lose the exit over an autosave problem
            pass
        if self.close_engine:
            self.engine.close()

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except TokenstepError as exc:
            self._note(str(exc)[:1].upper() + str(exc)[1:], "error")
        except Exception as exc:  # keep the worker alive; show what happened
            self.error = traceback.format_exc()
            self._note(f"Internal error: {type(exc).__name__}: {exc}", "error")
            self.s.mode = "step"

    def _note(self, text: str, level: str = "info") -> None:
        self.s.notice, self.s.notice_level = text, level

    def _handle(self, cmd: _Cmd) -> None:
        self._commands += 1
        self.s.returned_text = None
        handler = getattr(self, f"_do_{cmd.name}")
        handler(*cmd.args)

    # -- commands ------------------------------------------------------------------------------
    def _do_send(self, text: str) -> None:
        s = self.s
        if not text.strip():
            if s.queued:  # Enter on an empty box: send the queued message now
                text, s.queued = s.queued, None
            else:
                self._note("Type a message first.", "warn")
                return
        elif s.activity == "generating" and s.mode == "autoplay":
            s.queued = text
            self._note("Queued: your message is sent when this reply ends.", "warn")
            return
        try:
            self._send_now(text)
        except TokenstepError:
            s.returned_text = text
            raise

    def _send_now(self, text: str) -> None:
        s, eng = self.s, self.engine
        cut = s.activity == "generating" and s.reply_start is not None
        messages = list(s.messages)
        if not self.raw:
            if s.reply_start is not None and self._reply_tokens():
                messages.append(Message("assistant", self._reply_text()))
            messages.append(Message("user", text))
            tmpl = eng.info.chat_template
            if not tmpl:
                raise TokenstepError("this model has no chat template; start with --raw.")
            prompt = chat_tokens(eng.vocab, tmpl, messages, add_bos=eng.info.add_bos)
            tokens = prompt.tokens
            spans = _chat_spans(messages, prompt.user_spans, len(tokens))
            text_tokens = prompt.user_spans[-1][1] - prompt.user_spans[-1][0]
        else:
            new = eng.vocab.tokenize(text, add_special=eng.n_past == 0)
            tokens = eng.tokens + new
            spans = self._spans_now() + [Span("prompt", eng.n_past, len(tokens))]
            text_tokens = len(new)
        if eng.branches:
            self._drop_forks()
        if len(tokens) > eng.n_ctx:
            raise ContextFullError(
                f"the conversation would need {len(tokens)} tokens but the context holds "
                f"{eng.n_ctx}; press ctrl+n for a new chat or start with a larger -c."
            )
        records = eng.sync_prompt(tokens, reuse=self.prefix_cache)
        s.messages = messages
        s.spans = _merge(spans)
        s.reply_start = eng.n_past
        s.activity = "generating"
        s.action = "send"
        s.lit = (TOKENIZE, BATCH, DECODE, LOGITS)
        s.last_records = tuple(records)
        s.new_cells = (eng.kv.used - sum(r.call.n_tokens for r in records), eng.kv.used)
        s.timeline.add(records)
        s.tokenized = Tokenized(len(text), text_tokens, len(tokens), records[0].reused)
        s.last_pick = None
        s.dirty_since_save = True
        decoded = sum(r.call.n_tokens for r in records)
        note = f"Prefill: {decoded} tokens in {len(records)} llama_decode call(s)"
        if records[0].reused:
            note += f", {records[0].reused} reused from the KV cache"
        if cut:
            note += "; the previous reply was cut where it stood"
        tail = ". Space pauses." if s.mode == "autoplay" else ". → steps one token, space plays."
        self._note(note + tail)

    def _auto_step(self) -> None:
        self._step(None)

    def _do_step(self) -> None:
        s = self.s
        if s.mode == "autoplay" and s.activity == "generating":
            s.mode = "step"
            self._note("Paused: step mode. Each → is one decode.")
            return
        self._step(None)

    def _do_force(self, token: int) -> None:
        self.s.mode = "step"
        self._step(token)

    def _step(self, force: int | None) -> None:
        s, eng = self.s, self.engine
        if s.activity == "idle" or eng.n_past == 0:
            self._note("Send a message first: type it in the chat box and press Enter.", "warn")
            return
        if s.activity == "done":
            s.mode = "step"
            self._note(
                f"The reply has ended ({eng.stop_reason}). ← rewinds; or type a new message."
            )
            return
        if eng.branches:
            self._step_forked(force)
            return
        greedy, seed = eng.settings.is_greedy, eng.settings.seed
        before = eng.kv.used
        token = eng.sample_next(force)  # may decode the last token again after a deep rewind
        self._picks += 1
        p, p_final = self._pick_probabilities(token)
        s.last_pick = Pick(
            token,
            eng.vocab.piece(token),
            p,
            p_final,
            force is not None,
            eng.vocab.is_eog(token),
            greedy,
            seed,
        )
        rec = None if eng.vocab.is_eog(token) else eng.feed(token)
        s.action = "force" if force is not None else "step"
        s.dirty_since_save = True
        if rec is None:
            s.activity = "done"
            s.lit = (SAMPLE, DETOKENIZE)
            if eng.stop_reason == "end of generation":
                self._note(
                    "End of generation: the model sampled an end token. "
                    "Type a message; Esc then ← rewinds and resamples."
                )
            else:
                self._note(f"Context full ({eng.n_ctx} tokens): ctrl+n starts a new chat.", "warn")
            self._turn_ended()
            return
        if self._stepped(rec, before):
            return  # the notice says what the shift forgot
        if force is not None:
            self._note(f"Forced token {force}; it was decoded like any sampled token.")
        elif s.mode == "step":
            self._note("Stepped one token: sample, detokenize, feed back, decode.")

    def _stepped(self, rec: StepRecord, before: int) -> bool:
        """Note one decode step (one sequence or several): the stages it lit, its record, the
        cells it wrote, its time. True when a context shift came first (and was noted)."""
        s = self.s
        s.lit = (SAMPLE, DETOKENIZE, FEED_BACK, BATCH, DECODE, LOGITS)
        s.last_records = (rec,)
        s.new_cells = (before, self.engine.kv.used)
        s.timeline.add((rec,))
        if rec.shift is None:
            return False
        self._shifted(rec.shift)
        return True

    def _shifted(self, ev: ShiftEvent) -> None:
        """A context shift forgot tokens [n_keep, n_keep + n_discard): cut them out of the
        text's spans and say what was forgotten."""
        s, a, n = self.s, ev.n_keep, ev.n_discard
        s.spans = _cut(s.spans, a, n)
        if s.reply_start is not None and s.reply_start > a:
            s.reply_start = max(a, s.reply_start - n)
        if s.fork_at is not None and s.fork_at > a:
            s.fork_at = max(a, s.fork_at - n)
        gone = b"".join(self.engine.vocab.piece(f.token) for f in ev.forgotten)
        text = gone.decode("utf-8", errors="replace")
        shown = text if len(text) <= 40 else text[:39] + "…"
        self._note(
            f"Context full: shifted. Kept the first {a} tokens, forgot {n} ({shown!r}); "
            "tab 0 lists them.",
            "warn",
        )

    def _step_forked(self, force: int | None) -> None:
        """After a fork: every live sequence samples from its own logits row with its own
        chain, and ONE llama_decode carries one token per sequence."""
        s, eng = self.s, self.engine
        before = eng.kv.used
        rec = eng.step_seqs({0: force} if force is not None else None)
        s.action = "force" if force is not None else "step"
        s.dirty_since_save = True
        s.last_pick = None
        if rec is None:
            s.activity = "done"
            s.lit = (SAMPLE, DETOKENIZE)
            self._note(f"Every sequence has stopped ({eng.stop_reason or 'end of generation'}).")
            self._turn_ended()
            return
        for seq, row in rec.rows.items():
            s.fork_tokens.setdefault(seq, []).append(row.token)
        if not self._stepped(rec, before) and s.mode == "step":
            ids = ", ".join(str(q) for q in rec.rows)
            self._note(f"One llama_decode for sequences {ids}: one token each, own positions.")

    def _pick_probabilities(self, token: int) -> tuple[float, float]:
        """p and p' of the token just picked. The record whose logits it came from already
        holds the top candidates (with p) and the pick's chain (with p'); only a token outside
        that top needs the full softmax."""
        eng = self.engine
        assert eng.logits is not None
        rec = next(
            (
                r
                for r in reversed(eng.records)
                if r.has_logits and r.n_ctx_tokens == eng.n_past and r.sampled == token
            ),
            None,
        )
        p = next((c.p for c in rec.top if c.id == token), None) if rec else None
        if p is None:
            p = float(softmax(eng.logits)[token])
        if rec is not None and rec.chain is not None:
            p_final = rec.chain.p_final(token)
        else:  # the chain's survivors do not depend on the RNG: a preview gives the same p'
            p_final = eng.preview().p_final(token)
        return p, p_final

    def _turn_ended(self) -> None:
        self._autosave()
        if self.s.queued:
            text, self.s.queued = self.s.queued, None
            self._send_now(text)

    def _do_toggle_play(self) -> None:
        s = self.s
        if s.mode == "autoplay":
            s.mode = "step"
            self._note("Step mode: → decodes one token, ← rewinds one, space plays again.")
        else:
            s.mode = "autoplay"
            if s.activity == "done":
                self._note("Autoplay on. The reply has ended; the next message plays on its own.")
            elif s.activity == "idle":
                self._note("Autoplay on: replies generate on their own.")
            else:
                self._note("Playing. Space pauses.")
        s.action = "mode"

    def _do_pause(self) -> None:
        if self.s.mode == "autoplay":
            self._do_toggle_play()

    def _do_rewind(self, n: int) -> None:
        s, eng = self.s, self.engine
        s.mode = "step"  # rewinding is stepping: autoplay would resample at once
        n = min(n, self._reply_tokens())
        if self.engine.branches:
            self._drop_forks()
        if n <= 0:
            self._note("Nothing to rewind: the reply is empty (rewind stops at your message).")
            return
        before = eng.kv.used
        removed = eng.rewind(n)
        s.activity = "generating"
        s.action = "rewind"
        s.lit = (FEED_BACK,)
        s.last_pick = None
        s.last_records = ()
        s.new_cells = (eng.kv.used, eng.kv.used)
        s.spans = _clip(s.spans, eng.n_past)
        s.dirty_since_save = True
        if eng.logits is not None:
            how = "the logits for the new last token came from memory, nothing was recomputed"
        else:
            how = "its logits were not kept, so the next step decodes that token again"
        self._note(f"Rewound {removed} token: KV cells {before} → {eng.kv.used}; {how}.")

    def _do_adjust(self, name: str, direction: int) -> None:
        st = self.engine.settings
        if name not in LADDERS:
            raise ValueError(name)
        value = float(getattr(st, name))
        if name == "temp" and st.greedy:
            st.greedy = False
        new = next_rung(LADDERS[name], value, direction)
        setattr(st, name, int(new) if name == "top_k" else new)
        self._settings_changed(f"{_LABEL[name]} {_fmt_setting(name, getattr(st, name))}")

    def _do_greedy(self) -> None:
        st = self.engine.settings
        if st.is_greedy:
            st.greedy = False
            if st.temp <= 0:
                st.temp = 0.8
            self._settings_changed("greedy off (sampling with dist)")
        else:
            st.greedy = True
            self._settings_changed("greedy on (highest logit)")

    def _do_seed(self, delta: int) -> None:
        st = self.engine.settings
        st.seed = (st.seed + delta) % (1 << 32)
        self._settings_changed(f"seed {st.seed} (a fresh RNG)")

    def _settings_changed(self, what: str) -> None:
        s = self.s
        s.action = "settings"
        s.lit = (SAMPLE,) if self.engine.logits is not None else ()
        s.dirty_since_save = True
        if self.engine.logits is None:
            self._note(f"{what[:1].upper()}{what[1:]}: used from the next message on.")
        else:
            self._note(
                f"{what[:1].upper()}{what[1:]}: the sampler chain re-ran on the same logits, no decode."
            )

    def _do_new_chat(self) -> None:
        if self.s.dirty_since_save:
            self._autosave()
        eng = self.engine
        eng.reset()
        mode, chat_no = self.s.mode, self.s.chat_no + 1
        self.s = _State(
            mode=mode,
            chat_no=chat_no,
            records_from=len(eng.records),
            turns_from=len(eng.turns),
            shifts_from=len(eng.shifts),
        )
        self.s.action = "new"
        path = self.autosave_path
        where = f" Autosave: {path}." if path else ""
        self._note(f"New chat: the KV cache is empty.{where}")

    def _do_verify(self, mode: str) -> None:
        if self.engine.logits is None:
            self._note("Nothing to verify yet: send a message first.", "warn")
            return
        res = self.engine.verify_last(mode)
        self.s.verify = res
        self.s.action = "verify"
        self.s.lit = ()
        agree = "agrees" if res.top1_agree else "DISAGREES"
        self._note(
            f"Verify ({mode}): recomputed {res.n_tokens} tokens from scratch in "
            f"{res.recompute_ms:.0f} ms; max |Δ| {res.max_abs_diff:.3g}, top-1 {agree}. "
            "Tab 0 shows why.",
            "info" if res.top1_agree else "error",
        )

    def _do_fork(self) -> None:
        s, eng = self.s, self.engine
        if s.activity == "done" and not eng.branches:
            s.activity = "generating"  # a fork may continue where the reply ended
            eng.stop_reason = None
        at = eng.n_past
        dst = eng.fork(0)
        s.fork_at = at
        s.fork_tokens = {0: [], dst: []}
        s.mode = "step"
        s.action = "fork"
        s.lit = ()
        self._note(
            f"Forked: sequence {dst} shares all {at} KV cells of sequence 0 "
            "(llama_memory_seq_cp); → steps both in one llama_decode."
        )

    def _drop_forks(self) -> None:
        eng = self.engine
        for seq in list(eng.branches):
            eng.drop_seq(seq)
        self.s.fork_at = None
        self.s.fork_tokens = {}

    def _do_attention(self, name: str, *args: Any) -> None:
        self.attention.handle(name, *args)

    def _do_save(self, path: str) -> None:
        target = self._write(path)
        self.s.last_saved = str(target)
        self._note(f"Saved {self._n_records()} step records and the conversation to {target}.")

    # -- helpers -------------------------------------------------------------------------------
    def _reply_tokens(self) -> int:
        if self.s.reply_start is None:
            return 0
        return max(0, self.engine.n_past - self.s.reply_start)

    def _reply_text(self) -> str:
        assert self.s.reply_start is not None
        toks = self.engine.tokens[self.s.reply_start :]
        data = b"".join(self.engine.vocab.piece(t) for t in toks)
        return data.decode("utf-8", errors="replace")

    def _spans_now(self) -> list[Span]:
        spans = _clip(self.s.spans, self.engine.n_past)
        if self.s.reply_start is not None and self._reply_tokens():
            role = "generated" if self.raw else "reply"
            spans.append(Span(role, self.s.reply_start, self.engine.n_past))
        return spans

    def _messages_now(self, pieces: tuple[bytes, ...] | None = None) -> list[Message]:
        msgs = list(self.s.messages)
        if self.s.reply_start is not None and self._reply_tokens():
            if pieces is None:
                text = self._reply_text()
            else:
                text = b"".join(pieces[self.s.reply_start :]).decode("utf-8", errors="replace")
            msgs.append(Message("assistant", text))
        return msgs

    def _n_records(self) -> int:
        return len(self.engine.records) - self.s.records_from

    def _write(self, path: str | Path) -> Path:
        rows = session_store.session_rows(
            self.engine,
            self.engine.records.dicts(self.s.records_from),
            self._messages_now(),
            raw=self.raw,
            prefix_cache=self.prefix_cache,
        )
        rows[0]["attention"] = self.attention.state()
        return session_store.write_jsonl_atomic(path, rows)

    def _autosave(self) -> None:
        path = self.autosave_path
        if path is None or (self.engine.n_past == 0 and not self.s.messages):
            return
        try:
            self._write(path)
        except TokenstepError as exc:
            self._note(f"Autosave failed: {exc} Autosave is off.", "error")
            self.autosave_dir = None
            return
        self.s.dirty_since_save = False
        self.s.last_saved = str(path)

    def _candidates(
        self,
    ) -> tuple[tuple[CandidateRow, ...], ChainResult | None, float | None, int | None]:
        eng = self.engine
        logits = eng.logits
        if logits is None:
            return (), None, None, None
        key = (len(eng.records), eng.n_past, self._picks, repr(eng.settings.to_dict()))
        if self._preview_cache is not None and self._preview_cache[0] == key:
            return self._preview_cache[1]  # type: ignore[no-any-return]
        chain = eng.preview()
        top, p_top, entropy = top_stats(logits, TOP_ROWS)  # one exp pass, no full softmax
        ids = top.tolist()
        rows = tuple(
            CandidateRow(t, eng.vocab.piece(t), float(logits[t]), pt, pf, cut)
            for t, pt, pf, cut in zip(
                ids, p_top.tolist(), chain.p_final_many(ids), chain.cut_by_many(ids), strict=True
            )
        )
        out = (rows, chain, entropy, chain.selected)
        self._preview_cache = (key, out)  # type: ignore[assignment]
        return out

    def _publish(self, *, force: bool) -> None:
        """Build and hand over a view, unless the UI is still busy with the previous one."""
        with self._lock:
            too_soon = time.monotonic() - self._built_at < MIN_VIEW_INTERVAL
            if not force and (not self._taken or too_soon):
                self._dirty = True
                return
        self._built_at = time.monotonic()
        view = self._build()
        with self._lock:
            self._latest = view
            self._taken = False
            self._dirty = False
        if self.on_view is not None:
            self.on_view(view)

    def _pieces(self, tokens: tuple[int, ...]) -> tuple[bytes, ...]:
        """Each token's bytes. Between two views the context usually grew or shrank at the
        end, so only the new tail is looked up (a view at 8k tokens stays cheap)."""
        old, pieces = self._pieces_cache
        n = min(len(old), len(tokens))
        if tokens[:n] != old[:n]:  # a shift or a new chat: look everything up again
            n, pieces = 0, ()
        pieces = pieces[:n] + tuple(map(self.engine.vocab.piece, tokens[n:]))
        self._pieces_cache = (tokens, pieces)
        return pieces

    def _kv_cells(self) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
        """(token, pos, seq_ids) per used cell. The mirror appends cells for decodes and
        replaces its list for removals; it edits cells in place only for a fork or a shift,
        which change ``seq_ids`` or ``n_shifts``. So an unchanged key means: extend."""
        kv = self.engine.kv
        key = (id(kv.cells), kv.n_shifts, tuple(kv.seq_ids()))
        old_key, out = self._cells_cache
        if key != old_key or len(out) > len(kv.cells):
            out = ()
        if len(out) < len(kv.cells):
            out += tuple((c.token, c.pos, tuple(sorted(c.seqs))) for c in kv.cells[len(out) :])
        self._cells_cache = (key, out)
        return out

    def _build(self) -> View:
        eng, s = self.engine, self.s
        self._seq += 1
        tokens = tuple(eng.tokens)
        pieces = self._pieces(tokens)
        candidates, chain, entropy, next_pick = self._candidates()
        return View(
            seq=self._seq,
            mode=s.mode,
            activity=s.activity,
            action=s.action,
            lit=s.lit,
            raw=self.raw,
            settings=eng.settings.copy(),
            tokens=tokens,
            pieces=pieces,
            spans=tuple(_merge(self._spans_now())),
            reply_start=s.reply_start,
            n_ctx=eng.n_ctx,
            n_vocab=eng.info.n_vocab,
            kv_cells=self._kv_cells(),
            kv_bytes=eng.kv_bytes_used,
            kv_bytes_per_token=eng.layout.bytes_per_token,
            kv_bytes_allocated=eng.kv_bytes_allocated,
            kv_report=eng.kv_reports[0] if eng.kv_reports else None,
            kv_problems=tuple(eng.records[-1].kv_problems) if eng.records else (),
            last_records=s.last_records,
            batch_pieces=tuple(
                tuple(eng.vocab.piece(t.id) for t in r.call.tokens) for r in s.last_records
            ),
            new_cells=s.new_cells,
            timeline=tuple(s.timeline.recent),
            timeline_totals=s.timeline.totals(),
            timeline_older=len(s.timeline) - len(s.timeline.recent),
            candidates=candidates,
            chain=chain,
            entropy=entropy,
            next_pick=next_pick,
            last_pick=s.last_pick,
            tokenized=s.tokenized,
            stop_reason=eng.stop_reason,
            queued=s.queued,
            notice=s.notice,
            notice_level=s.notice_level,
            messages=tuple(self._messages_now(pieces)),
            autosave_path=str(self.autosave_path) if self.autosave_path else None,
            last_saved=s.last_saved,
            n_records=self._n_records(),
            flash_attn=eng.flash_attn_resolved,
            n_batch=eng.config.n_batch,
            n_ubatch=eng.config.n_ubatch,
            returned_text=s.returned_text,
            attention=self.attention.view(),
            memory=memory_report(eng),
            work=self._work_snapshot(),
            verify=s.verify,
            turns=tuple(eng.turns[s.turns_from :]),
            shifts=tuple(eng.shifts[s.shifts_from :]),
            shift_pieces=tuple(
                tuple(eng.vocab.piece(f.token) for f in ev.forgotten)
                for ev in eng.shifts[s.shifts_from :]
            ),
            context_full=eng.config.context_full,
            n_keep=eng.keep_count(),
            fork_at=s.fork_at,
            seqs=self._seq_views(),
            commands=self._commands,
            capabilities=eng.capabilities,
        )

    def _work_snapshot(self) -> WorkSnapshot:
        """The work counter's series cost O(steps) to copy; while a reply plays they are
        copied at most twice a second (the chart lags by that much, its totals too)."""
        eng, s = self.engine, self.s
        playing = s.mode == "autoplay" and s.activity == "generating"
        now = time.monotonic()
        cached = self._work_cache
        if playing and cached is not None and cached[0] is eng.work and now - cached[1] < 0.5:
            return cached[2]
        snap = eng.work.snapshot()
        self._work_cache = (eng.work, now, snap)
        return snap

    def _seq_views(self) -> tuple[SeqView, ...]:
        eng, s = self.engine, self.s
        if s.fork_at is None:
            return ()
        out = []
        for seq in eng.seq_ids:
            toks = s.fork_tokens.get(seq, [])
            stop = eng.stop_reason if seq == 0 else eng.branches[seq].stop_reason
            pieces = tuple(eng.vocab.piece(t) for t in toks)
            out.append(SeqView(seq, pieces, eng.kv.count(seq), stop))
        return tuple(out)


_LABEL = {"temp": "temperature", "top_k": "top-k", "top_p": "top-p", "min_p": "min-p"}


def _fmt_setting(name: str, value: float) -> str:
    if name == "top_k":
        return "off" if value == 0 else str(int(value))
    if name == "temp" and value == 0:
        return "0 (greedy)"
    return f"{value:.2f}"


def _chat_spans(messages: list[Message], spans: list[tuple[int, int]], n: int) -> list[Span]:
    """Template text between the messages, and each message's own tokens with its role."""
    out: list[Span] = []
    pos = 0
    for m, (a, b) in zip(messages, spans, strict=True):
        if a > pos:
            out.append(Span("template", pos, a))
        if b > a:
            out.append(Span(m.role, a, b))
        pos = b
    if n > pos:
        out.append(Span("template", pos, n))
    return out


def _clip(spans: list[Span], n: int) -> list[Span]:
    return [Span(sp.role, sp.start, min(sp.end, n)) for sp in spans if sp.start < n]


def _cut(spans: list[Span], a: int, n: int) -> list[Span]:
    """Spans after tokens [a, a + n) left the context (a context shift)."""

    def move(i: int) -> int:
        return i if i <= a else max(a, i - n)

    return [Span(sp.role, move(sp.start), move(sp.end)) for sp in spans]


def _merge(spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for sp in spans:
        if sp.end <= sp.start:
            continue
        if out and out[-1].role == sp.role and out[-1].end == sp.start:
            out[-1] = Span(sp.role, out[-1].start, sp.end)
        else:
            out.append(sp)
    return out
