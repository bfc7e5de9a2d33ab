"""Benchmarks 2 and 3: the real app, headless at 120x40, autoplaying.

2. Tokens/s of an autoplayed reply (raw completion, greedy) while the tabs cycle through every
   pane, at the app's default decode threads (every core but one, ``app_threads()``), against
   the bare loop on the same prompt tokens at the SAME threads (the visualizer's own cost, the
   target) and on every core (what a user gives up), alternating. Also: the UI thread's CPU
   (a fraction of one core, from ``time.thread_time`` on the UI thread, which ``run_test``
   runs on) and the worker's, and llama_decode's own time in the app (the records'
   ``decode_ms``) against the bare loop's per-token time.
3. Responsiveness: during autoplay, the time from a ``T``/``t`` key event (temperature
   up/down) reaching the app until the logits pane draws the new temperature's view (and,
   in the detail, until it holds it).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from dataclasses import dataclass

from textual import events
from textual.strip import Strip

from tui.app import TokenstepApp
from tui.engine import Engine, EngineConfig, Model, SamplerSettings
from tui.widgets.logits import LogitsPane

from .bare import bare_generate
from .common import THREADS, Row, median

SIZE = (120, 40)
TABS = "12345"
# Raw text whose greedy continuation runs for hundreds of tokens without an end token (the
# model keeps counting), so a reply lasts the whole measurement.
COUNTING = ", ".join(str(i) for i in range(1, 21)) + ","


def _key(app: TokenstepApp, key: str) -> None:
    """Post a key the way the terminal driver does. Pilot.press is not used while the app is
    busy: it first waits (up to a second, twice) for the event loop to go idle."""
    app.post_message(events.Key(key, key))


def app_threads() -> int:
    """The app's decode threads without ``-t`` (tui.startup.app_threads)."""
    from tui.startup import app_threads as default

    return default()


def _app(model: Model, settings: SamplerSettings, tmp: str) -> tuple[TokenstepApp, Engine]:
    eng = Engine(model, EngineConfig(n_ctx=4096, n_threads=app_threads()), settings)
    app = TokenstepApp(
        eng, raw=True, prefill=COUNTING, autosave_dir=tmp, autoplay=True, close_engine=False
    )
    return app, eng


@dataclass
class Autoplay:
    tok_s: float
    prompt: list[int]
    ui_cpu: float  # CPU seconds of the UI thread per wall second (a fraction of one core)
    worker_cpu: float  # the same for the decode worker thread (Python; ggml's threads apart)
    decode_ms: float  # median llama_decode time of the measured steps (the records' own)


def _thread_cpu(native_id: int) -> float:
    """CPU seconds (user + system) of one thread of this process, from /proc."""
    with open(f"/proc/self/task/{native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _worker_id() -> int | None:
    for t in threading.enumerate():
        if t.name == "tokenstep-decode":
            return t.native_id
    return None


async def _autoplay(model: Model, n: int) -> Autoplay:
    """Tokens/s over ``n`` autoplayed decode steps, the threads' CPU and the decode time."""
    with tempfile.TemporaryDirectory() as tmp:
        app, eng = _app(model, SamplerSettings(temp=0.0), tmp)
        try:
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press("enter")
                while not eng.records:  # the prefill
                    await pilot.pause(0.01)
                base = len(eng.records)
                n_prompt = eng.records[0].call.n_tokens
                while len(eng.records) == base:
                    await pilot.pause(0.002)
                t0, start = time.perf_counter(), len(eng.records)
                wid = _worker_id()
                ui0, w0 = time.thread_time(), _thread_cpu(wid) if wid else 0.0
                next_tab = t0
                tab = 0
                while len(eng.records) < start + n:
                    if app.view is not None and app.view.activity != "generating":
                        break
                    if time.perf_counter() >= next_tab:  # every pane gets drawn in turn
                        _key(app, TABS[tab % len(TABS)])
                        tab += 1
                        next_tab += 0.5
                    await asyncio.sleep(0.05)  # not pilot.pause: see _responsiveness
                done = len(eng.records) - start
                if done < n:
                    raise RuntimeError(f"the reply ended after {done} of {n} tokens")
                dt = time.perf_counter() - t0
                ui = (time.thread_time() - ui0) / dt
                worker = ((_thread_cpu(wid) - w0) / dt) if wid else float("nan")
                dms = [r.decode_ms for r in eng.records[start : start + done]]
                prompt = eng.tokens[:n_prompt]
                await pilot.press("space")  # pause before the app exits
            return Autoplay(done / dt, prompt, ui, worker, median(dms))
        finally:
            app.worker.stop()
            eng.close()


async def _responsiveness(model: Model, presses: int) -> tuple[list[float], list[float]]:
    """Milliseconds from a temperature key to the logits pane holding a view with the new
    value, and to the pane drawing a line of it (the frame the user sees).

    The waits are ``asyncio.sleep``, not ``pilot.pause``: a pause first has every widget on
    the screen process a callback, which at a millisecond poll is most of the UI thread's work
    and delays the very frame being timed."""
    held: list[float] = []
    drawn: list[float] = []
    # top-k 1: the reply keeps counting (no early end token), while the temperature still
    # changes what the logits pane shows.
    settings = SamplerSettings(temp=0.8, top_k=1, seed=1)
    seen: dict[str, float] = {}  # the temperature of the view the pane last drew a line of

    def render_line(pane: LogitsPane, y: int) -> Strip:
        if pane.view is not None:
            seen["temp"] = pane.view.settings.temp
        return plain_render_line(pane, y)

    plain_render_line = LogitsPane.render_line
    LogitsPane.render_line = render_line  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        app, eng = _app(model, settings, tmp)
        try:
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press("enter")
                t_wait = time.perf_counter()
                while app.view is None or app.view.activity != "generating":
                    await pilot.pause(0.01)
                    if time.perf_counter() - t_wait > 60:
                        raise RuntimeError("the reply never started")
                await pilot.press("5")  # the causal mask tab, the busiest
                pane = app.query_one(LogitsPane)
                for i in range(presses):
                    await asyncio.sleep(0.07)  # a few steps between presses
                    if app.view is None or app.view.activity != "generating":
                        break
                    before = pane.view.settings.temp if pane.view else None
                    t0 = time.perf_counter()
                    t_held = None
                    _key(app, "T" if i % 2 == 0 else "t")
                    while time.perf_counter() - t0 < 5.0:  # else the reply ended
                        await asyncio.sleep(0.0005)
                        if t_held is None and pane.view and pane.view.settings.temp != before:
                            t_held = time.perf_counter()
                        if t_held is not None and seen.get("temp", before) != before:
                            held.append((t_held - t0) * 1000.0)
                            drawn.append((time.perf_counter() - t0) * 1000.0)
                            break
                    else:
                        break
                await pilot.press("space")
        finally:
            LogitsPane.render_line = plain_render_line  # type: ignore[method-assign]
            app.worker.stop()
            eng.close()
    return held, drawn


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.95 * (len(s) - 1)))] if s else float("nan")


def run(model: Model, rounds: int = 3, n: int = 256, presses: int = 40) -> list[Row]:
    threads = app_threads()
    runs: list[Autoplay] = []
    same: list[float] = []  # bare loop at the app's threads
    every: list[float] = []  # bare loop on every core
    for _ in range(rounds):
        a = asyncio.run(_autoplay(model, n))
        runs.append(a)
        same.append(bare_generate(model, a.prompt, n, threads=threads))
        every.append(bare_generate(model, a.prompt, n, threads=THREADS))
    o = median([a.tok_s for a in runs])
    b, ball = median(same), median(every)
    ui, wk = median([a.ui_cpu for a in runs]), median([a.worker_cpu for a in runs])
    dms = median([a.decode_ms for a in runs])
    held, lat = asyncio.run(_responsiveness(model, presses))
    return [
        Row(
            f"2. app autoplay 120x40, {n} tokens, {threads} decode thread(s) (default)",
            f"{o / b:.3f} of bare at {threads}",
            ">= 0.85",
            o / b >= 0.85,
            f"{o:.1f} vs bare {b:.1f} tok/s at the same threads (medians of {rounds}, tabs "
            f"cycling); llama_decode {dms:.2f} ms in the app vs {1000 / b:.2f} ms a token "
            f"bare; UI thread {ui:.2f} of a core, worker thread {wk:.2f}",
        ),
        Row(
            f"2. app autoplay (default threads) vs bare on all {THREADS} threads",
            f"{o / ball:.3f} of bare at {THREADS}",
            "(report)",
            None,
            f"{o:.1f} vs bare {ball:.1f} tok/s: what leaving a core to the UI costs",
        ),
        Row(
            "3. key T -> logits pane (autoplay)",
            f"p95 {p95(lat):.1f} ms",
            "p95 < 50 ms, median < 25 ms",
            p95(lat) < 50.0 and median(lat) < 25.0,
            f"to the pane drawing it: median {median(lat):.1f} ms, max "
            f"{max(lat, default=float('nan')):.1f} ms; to the pane holding the view: median "
            f"{median(held):.1f}, p95 {p95(held):.1f} ms; {len(lat)} presses, {threads} decode "
            "thread(s)",
        ),
    ]


if __name__ == "__main__":
    for row in run(Model()):
        print(row)
