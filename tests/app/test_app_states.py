"""The app under random key presses (Hypothesis's RuleBasedStateMachine), at 100x30.

The real ``App`` runs through ``App.run_test()``'s pilot on the bundled model; every rule presses
keys from the app's one key table (``tui.widgets.keys``): steps, autoplay bursts, rewinds,
forces, forks, jumps to a path not taken, the observers (attention ``a``/``A``, the lens ``8``,
its grid ``G``, prompt scoring ``u``, the run chart ``c``, the tabs, zoom ``z``), the sampler's
keys, a message typed and sent, and save then resume in a new app. After each rule, once the
worker is idle and the app has drawn its latest view, the invariants read the SCREEN (the
widgets' rendered text) and check it against llama.cpp and the run record:

the header's ctx is sequence 0's cells in llama.cpp's KV cache, tab 0's footer and the KV
grid's title count the cells in use; the logits pane's top row is the held logits' argmax with
their softmax (NumPy, here) as its p; the timeline's counts are the record's; the key bar shows
no key the backend refuses; nothing crashed and the decode thread is alive.

``make test`` runs a fixed seed and a few examples; ``make fuzz`` runs it for FUZZ_MINUTES.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from tests.support.compare_records import screen_text
from tests.support.worker_states import BOUNDED, COUNTS, FUZZ, TEXTS, run_machine
from tui.app import TokenstepApp
from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.speculative.spec_ngram import NgramSimple
from tui.engine.speculative.spec_verify import NgramDrafter, Speculator
from tui.widgets.chat_input import ChatInput
from tui.widgets.keybar import KeyBar
from tui.widgets.logits import LogitsPane
from tui.worker.resume import load_header, restore, saved_settings
from tui.worker.session_store import read_session
from tui.worker.spec_run import SpecRun

SIZE = (100, 30)
WAIT_S = 120.0  # a condition not met by then is a hang: the test fails, saying which
APP_BOUNDED = settings(BOUNDED, max_examples=3, stateful_step_count=8)
APP_FUZZ = settings(FUZZ, max_examples=2, stateful_step_count=30)  # FUZZ_MINUTES: by rounds
LOOK_KEYS = ["a", "A", "8", "G", "L", "u", "c", "z", "6", "7", "9", "0", "1", "2", "3", "4", "5"]
SAMPLER_KEYS = ["t", "T", "k", "K", "p", "P", "m", "M", "g", "s"]
# A chip on the key bar and the capability the command behind it needs.
NEEDS = {"F": "fork", "v/V": "verify", "a": "attention", "A": "attention", "8/L": "lens"}


def _number(s: str) -> int:
    return int(s.replace(",", ""))


class AppStates(RuleBasedStateMachine):
    model: Any = None  # set by the test: the session's bundled model
    tmp: Path = Path(".")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.app: TokenstepApp | None = None
        self.engine: Engine | None = None
        self.task: asyncio.Task[None] | None = None
        self.done = asyncio.Event()
        self.context = contextvars.copy_context()
        self.pilot: Any = None
        self.spec = False

    # -- the app's life --------------------------------------------------------------------
    def _open(
        self, s: SamplerSettings, header: dict | None = None, path: Path | None = None
    ) -> None:
        self.engine = Engine(self.model, EngineConfig(n_ctx=384, n_threads=2, n_seq_max=3), s)
        self.app = TokenstepApp(
            self.engine, autoplay=False, autosave_dir=self.tmp / "autosave", close_engine=False
        )
        if self.spec:
            self.app.worker.spec = SpecRun(Speculator(NgramDrafter(NgramSimple(3, 4))))
        if header is not None and path is not None:
            restore(self.app.worker, header, path)  # as --resume does, before the start
        app, done = self.app, asyncio.Event()
        ready: asyncio.Future[Any] = self.loop.create_future()

        async def session() -> None:  # enters and leaves run_test in one task (its context)
            async with app.run_test(size=SIZE) as pilot:
                self.context = contextvars.copy_context()  # the active app, for the pilot
                ready.set_result(pilot)
                await done.wait()

        self.task = self.loop.create_task(session())
        self.done = done
        self.pilot = self.loop.run_until_complete(ready)
        self.settle()

    def _close(self) -> None:
        if self.task is not None:
            self.done.set()
            self.loop.run_until_complete(self.task)
            self.task = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    @initialize(greedy=st.booleans(), seed=st.integers(0, 2**16), spec=st.booleans())
    def start(self, greedy: bool, seed: int, spec: bool) -> None:
        self.spec = spec
        s = SamplerSettings(temp=0.0) if greedy else SamplerSettings(temp=0.9, seed=seed)
        self._open(s)
        COUNTS["examples"] += 1

    def teardown(self) -> None:
        self._close()
        self.loop.close()

    # -- driving ---------------------------------------------------------------------------
    def run(self, coro: Any) -> Any:
        """Run a pilot coroutine in the app's context (Textual reads its active app there)."""
        return self.loop.run_until_complete(self.loop.create_task(coro, context=self.context))

    def wait(self, pred: Callable[[], bool], what: str) -> None:
        async def poll() -> None:
            t0 = time.monotonic()
            while time.monotonic() - t0 < WAIT_S:
                await self.pilot.pause(0.02)
                if pred():
                    return
            raise AssertionError(f"timed out waiting for {what}")

        self.run(poll())

    def idle(self) -> bool:
        assert self.app is not None
        ctl, view, latest = self.app.worker, self.app.view, self.app.worker.latest
        if ctl.error is not None or not ctl.thread or not ctl.thread.is_alive():
            return True  # the invariants say what went wrong
        if ctl.lane.lock.locked() or not ctl.queue_empty() or latest is None or view is None:
            return False
        playing = view.mode == "autoplay" and view.activity == "generating"
        return not playing and view.seq == latest.seq

    def settle(self) -> None:
        """Wait until the worker took every command and the app drew its newest view; twice
        in a row, a few ticks apart (a command just taken from the queue is not yet working)."""
        last: tuple[int, int] | None = None
        for _ in range(int(WAIT_S / 0.05)):
            self.wait(self.idle, "the worker to finish")
            app = self.app
            assert app is not None and app.view is not None
            now = (app.worker.commands, app.view.seq)
            if now == last:
                self.run(self.pilot.pause())
                return
            last = now
            self.run(self.pilot.pause(0.03))
        raise AssertionError("the app never settled")

    def press(self, *keys: str) -> None:
        COUNTS["commands"] += len(keys)
        self.run(self.pilot.press(*keys))
        self.settle()

    def controls(self) -> None:
        """Leave the chat box (Esc) so the keys reach the controls."""
        assert self.app is not None
        if isinstance(self.app.focused, ChatInput):
            self.run(self.pilot.press("escape"))

    # -- rules: keys pressed whatever the state (a press that cannot act must say so) -------
    @rule(text=st.sampled_from(TEXTS))
    def send(self, text: str) -> None:
        assert self.app is not None
        if not isinstance(self.app.focused, ChatInput):
            self.run(self.pilot.press("i"))
        chat = self.app.main.query_one("#chat", ChatInput)
        chat.value = ""  # what a key typed on the way here left in the box
        self.press(*text, "enter")

    @rule(n=st.integers(1, 3))
    def step(self, n: int) -> None:
        self.controls()
        self.press(*["n"] * n)

    @rule(tokens=st.integers(1, 6))
    def autoplay_burst(self, tokens: int) -> None:
        """Space, a few tokens while the reply plays, then space again."""
        self.controls()
        app = self.app
        assert app is not None and app.view is not None
        before = app.view.text.n_past
        COUNTS["commands"] += 1
        self.run(self.pilot.press("space"))

        def enough() -> bool:
            v = app.worker.latest
            return v is None or v.text.n_past >= before + tokens or v.activity != "generating"

        self.wait(enough, "an autoplay burst")
        v = app.worker.latest
        if v is not None and v.mode == "autoplay" and v.activity == "generating":
            self.press("space")
        else:
            self.settle()

    @rule(n=st.integers(1, 2))
    def rewind(self, n: int) -> None:
        self.controls()
        self.press(*["backspace"] * n)

    @rule(down=st.integers(0, 3))
    def force(self, down: int) -> None:
        self.controls()
        self.press(*["down"] * down, "f")

    @rule(key=st.sampled_from(["F", "v", "V"]))
    def fork_or_verify(self, key: str) -> None:
        self.controls()
        self.press(key)

    @rule(down=st.integers(0, 2))
    def jump_path(self, down: int) -> None:
        self.controls()
        self.press("w", *["down"] * down, "enter")

    @rule(key=st.sampled_from(LOOK_KEYS))
    def look(self, key: str) -> None:
        self.controls()
        self.press(key)

    @rule(key=st.sampled_from(SAMPLER_KEYS))
    def sampler(self, key: str) -> None:
        self.controls()
        self.press(key)

    @rule()
    def save_and_resume(self) -> None:
        """Ctrl+S to a file, then a new app resumed from it (the app's --resume)."""
        app = self.app
        assert app is not None
        path = self.tmp / f"app{COUNTS['commands']}.jsonl"
        COUNTS["commands"] += 1
        self.run(self.pilot.press("ctrl+s"))
        self.wait(lambda: bool(app.screen.query("#save-path")), "the save dialog")
        app.screen.query_one("#save-path").value = str(path)  # type: ignore[attr-defined]
        self.run(self.pilot.press("enter"))
        self.wait(
            lambda: app.view is not None and app.view.header.last_saved == str(path), "the save"
        )
        self.settle()
        header, records = read_session(path)
        tokens = list(app.view.text.tokens) if app.view is not None else []
        assert header["context_tokens"] == tokens
        self._close()
        hdr = load_header(path)
        self._open(saved_settings(hdr), hdr, path)
        assert self.app is not None and self.app.view is not None
        assert list(self.app.view.text.tokens) == tokens  # the context came back

    # -- invariants: the screen against llama.cpp and the record ---------------------------
    def screen(self) -> str:  # the whole screen as plain text
        assert self.app is not None
        return screen_text(self.app)  # type: ignore[arg-type]

    @invariant()
    def alive(self) -> None:
        app = self.app
        if app is None:
            return
        ctl = app.worker
        assert ctl.error is None, ctl.error
        assert ctl.thread is not None and ctl.thread.is_alive(), "the decode thread died"
        assert app.is_running and app._exception is None, app._exception
        assert "Internal error" not in self.screen()

    @invariant()
    def context_length_agrees(self) -> None:
        """Header ctx = sequence 0's cells in llama.cpp = the mirror's; tab 0's footer and the
        KV grid's title count the cells in use; where a fork or a parked path holds more cells,
        the header says both."""
        app, eng = self.app, self.engine
        if app is None or eng is None or len(app.screen_stack) > 1:
            return
        shown = self.screen()
        m = re.search(r"ctx ([\d,]+)/([\d,]+)", shown)
        assert m, shown.splitlines()[0]
        ctx = _number(m.group(1))
        with app.worker.lane.lock:  # the worker is idle: nothing else touches the context
            mem = llama_cpp.llama_get_memory(eng.ctx)
            lo = llama_cpp.llama_memory_seq_pos_min(mem, 0)
            hi = llama_cpp.llama_memory_seq_pos_max(mem, 0)
            assert eng.kv.check(eng.ctx) == []
            used, seq0, parked = eng.kv.used, eng.kv.count(0), bool(eng.parked)
        assert (lo, hi) == ((0, ctx - 1) if ctx else (-1, -1)), (lo, hi, ctx)
        assert seq0 == ctx
        assert ctx == len(eng.tokens)
        if app._tab == "cache":
            f = re.search(r"KV ([\d,]+)/([\d,]+) · ", shown)
            assert f, "tab 0 shows no footer"
            assert _number(f.group(1)) == used
        if app._tab == "kv":
            g = re.search(r"KV cache · ([\d,]+)/([\d,]+) cells", shown)
            assert g, "the KV grid shows no title"
            assert _number(g.group(1)) == used
        if app.view is not None and app.view.text.fork_at is None and not parked:
            assert used == ctx  # one sequence, its cells only (a rejected draft's are gone)
        if used != ctx:  # a fork or a parked path holds cells: the header names both counts
            assert f"seq 0 ctx {ctx:,}/" in shown and f"· KV {used:,} cells" in shown, shown[:200]

    @invariant()
    def logits_pane_is_the_held_logits(self) -> None:
        """The top row is the held logits' argmax; its p is their softmax, here in float64."""
        app, eng = self.app, self.engine
        if app is None or eng is None or len(app.screen_stack) > 1:
            return
        if app.main.query_one(LogitsPane).region.area == 0:
            return  # zoomed (z): the bottom pane has the whole window
        with app.worker.lane.lock:
            held = None if eng.logits is None else np.array(eng.logits, dtype=np.float64)
        shown = self.screen()
        lines = shown.splitlines()
        head = next((i for i, ln in enumerate(lines) if re.search(r"piece\s+id\s+p\b", ln)), None)
        if held is None:
            return
        assert head is not None, "\n".join(lines[:12])
        row = re.search(r"│ *[▶ ]?★?(.+?)\s+(\d+)\s+(<?[\d.]+)\s", lines[head + 1])
        assert row, lines[head + 1]
        top = int(np.argmax(held))
        assert _number(row.group(2)) == top, (lines[head + 1], top)
        e = np.exp(held - held.max())
        p = float(e[top] / e.sum())
        # Printed with three decimals: half a unit of the last digit, plus float32's error.
        assert abs(float(row.group(3).lstrip("<")) - p) <= 0.0005 + 1e-6, (lines[head + 1], p)
        m = re.search(r"top '.*' (-?[\d.]+) ·", shown)
        if m:
            assert abs(float(m.group(1)) - float(held[top])) <= 0.005 + 1e-4, m.group(0)

    @invariant()
    def timeline_counts_the_record(self) -> None:
        app, eng = self.app, self.engine
        if app is None or eng is None or app._tab != "timeline" or len(app.screen_stack) > 1:
            return
        shown = self.screen()
        with app.worker.lane.lock:
            tot = eng.run.totals()
        m = re.search(r"prefill\s+([\d,]+) calls?, ([\d,]+) tokens?", shown)
        assert m, shown
        assert (_number(m.group(1)), _number(m.group(2))) == (tot.prefill_calls, tot.prefill_tokens)
        d = re.search(r"decode\s+([\d,]+) (steps?|calls? emitted)", shown)
        assert d, shown
        want = tot.decode_tokens if d.group(2).startswith("step") else tot.decode_calls
        assert _number(d.group(1)) == want, (d.group(0), tot)

    @invariant()
    def key_bar_offers_what_the_backend_does(self) -> None:
        app, eng = self.app, self.engine
        if app is None or eng is None or len(app.screen_stack) > 1:
            return
        bar = app.main.query_one(KeyBar)
        if bar.chat_focused:
            return
        labels = [label for label, _, _, _ in bar.items()]
        caps = eng.capabilities
        for label, need in NEEDS.items():
            if label in labels:
                assert caps.missing(need) is None, (label, caps.missing(need))
        spec_on = app.view is not None and bool(app.view.header.spec)
        assert ("." in labels) == spec_on, labels


def test_app_states(model, tmp_path):
    AppStates.model = model
    AppStates.tmp = tmp_path
    run_machine(AppStates, "app fuzz", bounded=APP_BOUNDED, fuzz=APP_FUZZ, unit="keys")
