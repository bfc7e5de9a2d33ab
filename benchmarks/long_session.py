"""Long session: play to the end of a 4096-token context with context shift on.

Two parts, both on the bundled model with 2 threads:

* **memory** - the engine alone decodes one token per step, from a short raw prompt, past the
  end of the 4096 context (a context shift happens there). RSS is read from /proc every 100
  steps; the figure is the least-squares slope from step 500 to step 4000 and the difference
  between those two steps. The KV cache is allocated when the context is created, so what grows
  is what tokenstep itself keeps per step (the step records the trace and the panes read).
* **responsiveness** - the app, headless at 120x40, prefilled with ~3400 tokens so that its
  autoplay crosses the end of the context (and shifts) while a temperature key is pressed
  every ~0.3 s; each sample is the time from the key to the logits pane showing the new value.

``python -m benchmarks.long_session`` prints the rows; ``run()`` returns them as dicts with the
keys benchmark, figure, target, met (and detail)."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from typing import Any

from tui.engine import Engine, EngineConfig, Model, SamplerSettings

from .common import TEXT, THREADS, median

N_CTX = 4096
STEPS = 4300  # past the end of the context: one shift at ~4096
FROM, TO = 500, 4000
SLOPE_TARGET_MB = 1.0  # per 1000 steps
LATENCY_TARGET_MS = 50.0  # p95, the same target as benchmark 3
MB = 1024 * 1024


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _slope(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of RSS (bytes) over steps."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def memory_part(model: Model, steps: int = STEPS) -> dict[str, Any]:
    cfg = EngineConfig(n_ctx=N_CTX, n_threads=THREADS, context_full="shift")
    eng = Engine(model, cfg, SamplerSettings(temp=0.8, seed=1))
    samples: list[tuple[int, int]] = []
    forced = 0
    try:
        eng.prefill(eng.vocab.tokenize(TEXT, add_special=True))
        t0 = time.perf_counter()
        for step in range(1, steps + 1):
            token = eng.sample().token
            if eng.vocab.is_eog(token):  # keep going: the best candidate that is not an end
                token = next(c.id for c in eng.records[-1].top if not eng.vocab.is_eog(c.id))
                eng.stop_reason = None
                forced += 1
            if eng.feed(token) is None:
                raise RuntimeError(f"generation stopped at step {step}: {eng.stop_reason}")
            if step % 100 == 0:
                samples.append((step, rss_bytes()))
            if step % 500 == 0:
                el = time.perf_counter() - t0
                print(
                    f"  step {step}: {step / el:.0f} tok/s, RSS {samples[-1][1] / MB:.1f} MB",
                    file=sys.stderr,
                    flush=True,
                )
        dt = time.perf_counter() - t0
        shifts = len(eng.shifts)
        n_records = len(eng.records)
        spilled = eng.records.spilled
    finally:
        eng.close()
    window = [(s, r) for s, r in samples if FROM <= s <= TO]
    at = dict(samples)
    return {
        "slope_mb_per_1000": _slope(window) * 1000 / MB,
        "delta_mb": (at[TO] - at[FROM]) / MB,
        "rss_from_mb": at[FROM] / MB,
        "rss_to_mb": at[TO] / MB,
        "rss_end_mb": samples[-1][1] / MB,
        "shifts": shifts,
        "forced": forced,
        "tok_s": steps / dt,
        "records": n_records,
        "spilled": spilled,
    }


async def _responsiveness(model: Model, seconds: float, fill: int = 4000) -> dict[str, Any]:
    from textual import events

    from tui.app import TokenstepApp
    from tui.widgets.logits import LogitsPane

    cfg = EngineConfig(n_ctx=N_CTX, n_threads=THREADS, context_full="shift")
    eng = Engine(model, cfg, SamplerSettings(temp=0.8, seed=2))
    per = len(eng.vocab.tokenize(TEXT, add_special=False))
    prefill = TEXT * max(1, fill // per)  # ~4000: the autoplay reaches the context end soon
    lat: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        app = TokenstepApp(
            eng, raw=True, prefill=prefill, autosave_dir=tmp, autoplay=True, close_engine=False
        )
        try:
            async with app.run_test(size=(120, 40)) as pilot:
                await pilot.press("enter")
                while app.view is None or app.view.activity != "generating":
                    await pilot.pause(0.05)
                start_past = app.view.text.n_past
                first_step = len(eng.records)
                pane = app.query_one(LogitsPane)
                t_end = time.monotonic() + seconds
                i = 0
                while time.monotonic() < t_end:
                    await pilot.pause(0.3)
                    if app.view.activity != "generating" or app.view.mode != "autoplay":
                        break
                    before = pane.view.settings.temp if pane.view else None
                    t0 = time.perf_counter()
                    # Posted as the terminal driver does: Pilot.press first waits (up to a
                    # second, twice) for the app to go idle, which a playing app never does.
                    key = "T" if i % 2 == 0 else "t"
                    app.post_message(events.Key(key, key))
                    while pane.view is None or pane.view.settings.temp == before:
                        await pilot.pause(0.001)
                    lat.append((time.perf_counter() - t0) * 1000.0)
                    i += 1
                v = app.view
                await pilot.press("space")
                while app._heavy_timer is not None or app._apply_timer is not None:
                    await pilot.pause(0.05)  # let the last throttled redraw run before exit
                shifts = len(eng.shifts)
                return {
                    "lat": lat,
                    "start_past": start_past,
                    "end_past": v.text.n_past,
                    "generated": len(eng.records) - first_step,
                    "shifts": shifts,
                    "activity": v.activity,
                }
        finally:
            app.worker.stop()
            eng.close()


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.95 * (len(s) - 1)))] if s else float("nan")


def run(
    model: Model | None = None, seconds: float = 30.0, *, memory: bool = True, ui: bool = True
) -> list[dict[str, Any]]:
    model = model or Model()
    rows = []
    if memory:
        rows.append(_memory_row(memory_part(model)))
        print(rows[-1], file=sys.stderr, flush=True)
    if ui:
        rows.append(_ui_row(asyncio.run(_responsiveness(model, seconds))))
    return rows


def _memory_row(mem: dict[str, Any]) -> dict[str, Any]:
    return {
        "benchmark": f"long session: RSS slope, steps {FROM}-{TO} (4096 ctx, shift on)",
        "figure": f"{mem['slope_mb_per_1000']:.2f} MB per 1000 steps",
        "target": f"< {SLOPE_TARGET_MB:.0f} MB per 1000 steps",
        "met": mem["slope_mb_per_1000"] < SLOPE_TARGET_MB,
        "detail": (
            f"RSS {mem['rss_from_mb']:.1f} -> {mem['rss_to_mb']:.1f} MB "
            f"(delta {mem['delta_mb']:+.1f} MB), {mem['rss_end_mb']:.1f} MB at step "
            f"{STEPS}; {mem['shifts']} shift(s), {mem['records']} step records "
            f"({mem['spilled']} moved to disk), "
            f"{mem['forced']} end token(s) replaced, {mem['tok_s']:.0f} tok/s"
        ),
    }


def _ui_row(ui: dict[str, Any]) -> dict[str, Any]:
    lat = ui["lat"]
    return {
        "benchmark": "long session: key T -> logits pane across the context end",
        "figure": f"p95 {p95(lat):.1f} ms",
        "target": f"p95 < {LATENCY_TARGET_MS:.0f} ms",
        "met": bool(lat) and p95(lat) < LATENCY_TARGET_MS,
        "detail": (
            f"median {median(lat):.1f} ms, max {max(lat, default=float('nan')):.1f} ms, "
            f"{len(lat)} presses; n_past {ui['start_past']} -> {ui['end_past']}, "
            f"{ui['generated']} tokens, {ui['shifts']} shift(s), ended {ui['activity']}"
        ),
    }


if __name__ == "__main__":
    only = sys.argv[1] if len(sys.argv) > 1 else ""  # "memory" or "ui": one part only
    for row in run(memory=only != "ui", ui=only != "memory"):
        print(row)
