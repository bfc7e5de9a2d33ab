"""The decode worker: one thread owns the Engine; the UI talks to it through a queue.

The app never calls the engine. It puts small commands (send, step, rewind, adjust a sampler
setting, ...) on a queue; the worker thread runs them one at a time, in order, between decode
calls (a sampler key at the head of the queue may run during a step's decode: :mod:`.key_lane`),
and publishes an immutable :class:`~tui.worker.views.View` of everything the panes draw.
During autoplay the worker keeps stepping while the queue is empty. A view is built only when
the UI has taken the previous one (or when the worker goes idle), so a slow screen never slows
the decode loop and the screen always draws the latest state.

Nothing here imports Textual or Rich: the worker is plain Python and can be driven from a test.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..engine.model import secret
from ..engine.model.errors import TokenstepError
from ..engine.run.backend import Backend, LocalSession
from ..engine.sampler.sampling import ChainResult
from ..engine.wire.remote_http import ServerError
from . import chain_edit, chat, sampler_keys, saving, session_store, stepping, surprise, verify
from . import commands as cmd_types
from .attention import AttentionControl
from .build import ViewBuilder
from .key_lane import KeyLane
from .lens import LensControl
from .observers import Observers
from .playback import Playback
from .publisher import Publisher
from .sampler_desk import SamplerDesk
from .spec_run import SpecRun
from .spec_step import settle_before, spec_commands
from .state import State
from .tokenize import tokenize_note
from .views import View

SWITCH_INTERVAL = 0.0005  # seconds a thread may hold the GIL while another waits for it
_STOP = cmd_types.Stop()


class Worker:
    """Owns an :class:`Engine` on one thread and publishes :class:`View` objects.

    ``on_view`` is called from the worker thread; it must only hand the view over (e.g. post
    a Textual message), never draw."""

    def __init__(
        self,
        engine: Backend,
        *,
        raw: bool = False,
        prefix_cache: bool = True,
        autoplay: bool = True,
        autosave_dir: str | Path | None = None,
        on_view: Callable[[View], None] | None = None,
        close_engine: bool = True,
    ) -> None:
        # Any backend: what only a local llama.cpp session can do goes through
        # ``engine.local`` (None over a server), checked with ``engine.capabilities``.
        self.engine = engine
        self.raw = raw
        self.prefix_cache = prefix_cache
        self.close_engine = close_engine
        self.autosave_dir = Path(autosave_dir) if autosave_dir is not None else None
        self.state = State(Playback("autoplay" if autoplay else "step"))
        self.error: str | None = None  # an unexpected failure in the worker
        self.picks = 0  # picks so far: the preview cache must not outlive an RNG advance
        self.desk = SamplerDesk(lambda: self.engine)  # settings changes, cursor, ended chain
        self.commands = 0  # user commands handled so far
        self.observers = Observers(self)  # attention, lens, grid, scored prompt: their context
        self.attention = AttentionControl(self)
        self.lens = LensControl(self)
        self.system_prompt: str | None = None  # -sys / /system: the first message of each chat
        self.spec: SpecRun | None = None  # --spec-type: draft-verify rounds
        self._q: queue.Queue[cmd_types.Command] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.time()
        self._views = ViewBuilder(self, self.attention.view, self.lens.view)
        self.publisher = Publisher(self.build_view, self._views.with_notice, self._failed, on_view)
        self.commands_queue = self._q  # sampler keys are answered during a step's decode:
        self.lane = KeyLane(self._q, self.run_now, self.publisher.report)
        self._handlers: dict[type, Callable[[Any], None]] = {
            cmd_types.Send: lambda c: chat.send(self, c.text),
            cmd_types.Step: lambda c: stepping.user_step(self),
            cmd_types.Force: lambda c: stepping.force(self, c.token),
            cmd_types.TogglePlay: lambda c: stepping.toggle_play(self),
            cmd_types.Pause: lambda c: stepping.pause(self),
            cmd_types.RewindTokens: lambda c: stepping.rewind(self, c.n),
            cmd_types.Adjust: lambda c: sampler_keys.adjust(self, c.name, c.direction),
            cmd_types.Greedy: lambda c: sampler_keys.toggle_greedy(self),
            cmd_types.ChainEdit: lambda c: chain_edit.run(self, c.op, c.arg),
            cmd_types.Seed: lambda c: sampler_keys.next_seed(self, c.delta),
            cmd_types.NewChat: lambda c: saving.new_chat(self),
            cmd_types.Save: lambda c: saving.save(self, c.path),
            cmd_types.AttentionToggle: lambda c: self.attention.toggle(),
            cmd_types.AttentionLayer: lambda c: self.attention.set_layer(c.layer),
            cmd_types.AttentionHead: lambda c: self.attention.set_head(c.head),
            cmd_types.AttentionTabs: lambda c: self.attention.set_tabs(c.matrix, c.census),
            cmd_types.LensShown: lambda c: self.lens.set_visible(c.visible),
            cmd_types.LensMode: lambda c: self.lens.toggle_mode(),
            cmd_types.Verify: lambda c: verify.verify(self, c.mode),
            cmd_types.ForkSeq: lambda c: stepping.fork(self),
            cmd_types.JumpPath: lambda c: stepping.jump(self, c.branch),
            cmd_types.SurpriseScale: lambda c: surprise.cycle(self),
            cmd_types.PathsShown: lambda c: self.state.show_paths(c.shown),
            **spec_commands(self),
            cmd_types.Call: lambda c: c.fn(),
            cmd_types.Look: lambda c: c.fn(),
        }

    # -- the UI side ---------------------------------------------------------------------------
    def start(self) -> None:
        # When llama_decode returns, this thread must take the GIL back from the UI thread,
        # which may be drawing; by default it waits up to 5 ms for it (a profile of autoplay
        # showed that wait as most of a step's time outside llama_decode). A shorter switch
        # interval hands the GIL over sooner.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        self._thread = threading.Thread(target=self._run, name="tokenstep-decode", daemon=True)
        if (local := self.engine.local) is not None:  # a server decodes in its own process
            local.gate_decodes(self.lane.decoding)
        self._thread.start()
        self.lane.start()

    def take(self) -> View | None:
        """The latest view (called by the UI thread; marks it as taken)."""
        return self.publisher.take()

    @property
    def latest(self) -> View | None:
        return self.publisher.latest

    @property
    def on_view(self) -> Callable[[View], None] | None:
        return self.publisher.on_view

    @on_view.setter
    def on_view(self, fn: Callable[[View], None] | None) -> None:
        self.publisher.on_view = fn

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def put(self, cmd: cmd_types.Command) -> None:
        """Queue a command for the worker thread (a sampler key may run on the key lane)."""
        self._q.put(cmd)
        self.lane.offer(cmd)

    def queue_empty(self) -> bool:
        """True when the worker has taken every queued command."""
        return self._q.empty()

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the worker thread between decode calls (the engine is only ever
        touched there)."""
        self.put(cmd_types.Call(fn))

    def send(self, text: str) -> None:
        self.put(cmd_types.Send(text))

    def set_system_prompt(self, text: str) -> None:
        """``/system TEXT`` in the chat box (empty: no system message)."""
        self.put(cmd_types.Call(lambda: chat.set_system(self, text)))

    def step(self) -> None:
        self.put(cmd_types.Step())

    def force(self, token: int) -> None:
        self.put(cmd_types.Force(token))

    def toggle_play(self) -> None:
        self.put(cmd_types.TogglePlay())

    def pause(self) -> None:
        self.put(cmd_types.Pause())

    def rewind(self, n: int = 1) -> None:
        self.put(cmd_types.RewindTokens(n))

    def adjust(self, name: str, direction: int) -> None:
        """Move ``name`` (temp, top_k, top_p, min_p) one rung up or down its ladder."""
        self.put(cmd_types.Adjust(name, direction))

    def toggle_greedy(self) -> None:
        self.put(cmd_types.Greedy())

    def chain_edit(self, op: str, arg: str = "") -> None:
        """The chain keys: stage cursor, move a stage, turn it off/on, set a parameter."""
        self.put(cmd_types.ChainEdit(op, arg))

    def next_seed(self, delta: int = 1) -> None:
        self.put(cmd_types.Seed(delta))

    def new_chat(self) -> None:
        self.put(cmd_types.NewChat())

    def save(self, path: str) -> None:
        self.put(cmd_types.Save(path))

    def attention_cmd(self, name: str, *args: Any) -> None:
        self.put(cmd_types.attention_command(name, args, self.attention.capture_all))

    def lens_cmd(self, name: str, *args: Any) -> None:
        self.put(cmd_types.lens_command(name, args, self.lens.toggle_grid))

    def tokenize_text(self, text: str) -> None:
        """/tokenize TEXT: its tokens in the notice, nothing sent."""
        self.put(cmd_types.Call(lambda: tokenize_note(self.engine.vocab, self.state.note, text)))

    def verify(self, mode: str = "batched") -> None:
        """Recompute the context from scratch in a fresh context and compare the logits."""
        self.put(cmd_types.Verify(mode))

    def fork(self) -> None:
        """Copy sequence 0 into a new seq_id; later steps decode both in one batch."""
        self.put(cmd_types.ForkSeq())

    def jump_path(self, branch: int) -> None:
        """Make a path not taken of this turn the live reply."""
        self.put(cmd_types.JumpPath(branch))

    def paths_shown(self, shown: bool) -> None:
        """The tree pane is (not) showing: while it is, rewinds park their cells."""
        self.put(cmd_types.PathsShown(shown))

    def surprise_scale(self) -> None:
        """Cycle the surprise map: off, p, p', entropy."""
        self.put(cmd_types.SurpriseScale())

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
        return self.autosave_dir / session_store.autosave_name(self._started, self.state.chat_no)

    # -- for the commands (worker thread) --------------------------------------------------------
    def note_pick(self, ended: tuple[int | None, str, ChainResult] | None) -> None:
        """A token was picked (the RNG advanced); ``ended``: see ``SamplerDesk.ended``."""
        self.picks += 1
        self.desk.note_pick(ended)

    def autosave_off(self) -> None:
        self.autosave_dir = None

    def keep_system_prompt(self, text: str | None) -> None:  # -sys, /system
        self.system_prompt = text

    def new_state(self, state: State) -> None:  # a new chat
        self.state = state

    @contextmanager
    def busy(self, what: str) -> Iterator[None]:
        """A slow command: a view saying ``what`` it does is published before it starts (the
        app shows progress), and cleared when it ends."""
        self.state.playback.begin(what)
        self.publisher.publish(force=True)
        try:
            yield
        finally:
            self.state.playback.finish()

    def progress(self, what: str, *, last: bool = False) -> None:
        """Inside :meth:`busy`: the slow command is this far (``what``); views paced."""
        self.state.playback.begin(what)
        self.publisher.progress(last=last)

    def take_queued(self, kind: type[cmd_types.Command]) -> cmd_types.Command | None:
        """Remove every queued command of ``kind`` and return the newest (None if none): a
        flood of presses asking for the same slow thing is done once, for the last one."""
        with self._q.mutex:
            found = [c for c in self._q.queue if isinstance(c, kind)]
            for c in found:
                self._q.queue.remove(c)
        return found[-1] if found else None

    def drop_forks(self) -> None:
        stepping.drop_forks(self)

    def autosave(self) -> None:
        """Write the chat to its autosave file now (a message was just sent)."""
        saving.autosave(self)

    def require(self, what: str) -> LocalSession:
        """The local session for a command that needs ``what`` (a ``Capabilities`` field);
        a backend without it refuses, in its words."""
        local, missing = self.engine.local, self.engine.capabilities.missing(what)
        if local is None or missing is not None:
            raise TokenstepError(f"{what} {missing or 'needs a local model'}.")
        return local

    def handle(self, cmd: cmd_types.Command) -> None:
        """Run one command now, on this thread (the worker loop, or a test driving it)."""
        self.commands += 1
        self.state.handled()
        if self.spec is not None:  # a pick waiting for the next verify batch (--spec-type)
            settle_before(self, self.spec, cmd)
        self._handlers[type(cmd)](cmd)

    def run_now(self, cmd: cmd_types.Command) -> None:
        """Handle ``cmd`` and publish its view (the caller holds the state lock)."""
        self._guarded(self.handle, cmd)
        self.publisher.publish(force=True)

    def build_view(self) -> View:
        """A view of the current state (worker thread; the UI takes published ones)."""
        return self._views.build()

    # -- the worker ----------------------------------------------------------------------------
    def _run(self) -> None:
        self.observers.owned_by(threading.current_thread())  # replays run here, never elsewhere
        try:
            with self.lane.working():
                self.publisher.publish(force=True)
            while not self._stop.is_set():
                with self.lane.working():
                    playing = self.state.playing
                    if self.publisher.dirty and not playing:
                        self.publisher.publish(force=True)
                try:  # waiting for a command holds nothing
                    cmd = self._q.get_nowait() if playing else self._q.get()
                except queue.Empty:
                    cmd = None
                if cmd is _STOP or self._stop.is_set():
                    break
                with self.lane.working():
                    if cmd is not None:
                        self.run_now(cmd)
                    elif self.state.playing:  # a key on the lane may have paused it
                        self._guarded(stepping.step, self, None)
                        if self._q.empty():  # else the command's own view comes next
                            self.publisher.publish(force=False)
        finally:
            self.lane.stop()
            with self.lane.working():
                self._shutdown()

    def _shutdown(self) -> None:
        try:
            if self.state.dirty_since_save:
                saving.autosave(self)
        except Exception:  # never lose the exit over an autosave problem
            pass
        self.observers.close()  # its own context, made by this worker
        if self.close_engine:
            self.engine.close()

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except ServerError as exc:  # llama-server went away, is loading, busy, slow or refused
            self.state.playback.pause()  # autoplay would retry in a loop; the user retries
            text = str(exc)[:1].upper() + str(exc)[1:]
            if exc.retry:
                key = "Enter sends it again" if self.state.returned_text else "press → to retry"
                text += f" The conversation is kept; {key}."
            self.state.note(text, "error")
        except TokenstepError as exc:
            self.state.playback.pause()  # the same error again and again helps nobody
            self.state.note(str(exc)[:1].upper() + str(exc)[1:], "error")
        except Exception as exc:  # keep the worker alive; show what happened
            self.error = secret.redact(traceback.format_exc())
            self.state.note(f"Internal error: {type(exc).__name__}: {exc}", "error")
            self.state.playback.pause()

    def _failed(self, text: str, trace: str) -> None:
        """A view could not be built, or a key on the lane failed outside its command."""
        self.error = secret.redact(trace)
        self.state.note(text, "error")
