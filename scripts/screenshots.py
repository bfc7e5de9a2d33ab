"""Regenerate the SVG screenshots in screenshots/ by driving the real app on the bundled model.

    make screenshots

main.svg       the main screen after a real chat turn (greedy), KV cache pane showing
step-mode.svg  step mode mid-reply with the sampler cutting candidates (top-p, min-p)
help.svg       the help screen
cache-*.svg    the cache lessons: memory (tab 9), quadratic wall, verify, prefix reuse,
               context shift (-c 64 --context-full shift --keep 4; tab 4 and the text's gap),
               fork (tab 0, and the text pane's one column per sequence)
remote.svg     stepping over --server (a real llama-server): top K of N, logprobs, the server's
               timings, and the KV cache pane saying it needs a local model
attention.svg  tab 6: "The cat sat on the mat because it was tired.", layer 13, head 8:
               the cursor on ' it' and what it attends to (' cat', from kq_soft_max-13)
browser.png    `tokenstep serve` in headless Chromium after a reply (scripts/browser_screenshot.py)
lens.svg       tab 8: the logit lens on the raw prompt "The capital of France is"
surprise-map.svg  the surprise map (u) over a reply: each token coloured by p, the prompt's
               perplexity and what scoring it cost in the legend
run-chart.svg  tab c: entropy and the pick's p per step of the reply, the cursor on a step
paths-tree.svg tab w: a turn with three paths not taken (a rewind, a force, a fork)
chain-dry-xtc.svg  the sampler chain with DRY and XTC cutting, on a repeated sentence
grammar-mask.svg   a GBNF grammar masking candidates (marked 'grammar', with a count)

Times shown are really measured on the machine that runs this script.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input

from tui.app import TokenstepApp
from tui.engine import Engine, EngineConfig, Model, SamplerSettings
from tui.startup import app_threads

OUT = Path(__file__).resolve().parent.parent / "screenshots"
SIZE = (120, 40)


async def wait_for(pilot: Pilot, pred: Callable[[], bool], timeout: float = 300) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        await pilot.pause(0.05)
        if pred():
            await pilot.pause(0.3)
            return
    raise SystemExit("screenshots: timed out waiting for the model")


def new_app(model: Model, settings: SamplerSettings, *, autoplay: bool) -> TokenstepApp:
    engine = Engine(model, EngineConfig(n_threads=app_threads()), settings)  # as `tokenstep` does
    return TokenstepApp(engine, autoplay=autoplay, autosave_dir=None)


def save(app: TokenstepApp, name: str) -> None:
    app.query_one("#chat", Input).cursor_blink = False
    (OUT / name).write_text(app.export_screenshot(title="tokenstep"), encoding="utf-8")
    print(f"wrote screenshots/{name}")


async def main_screen(model: Model) -> None:
    app = new_app(model, SamplerSettings(temp=0.0), autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Name three colors.", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.activity == "done")
        await pilot.press("escape", "4")
        await pilot.pause(0.3)
        save(app, "main.svg")


async def step_mode(model: Model) -> None:
    settings = SamplerSettings(temp=0.8, top_k=40, top_p=0.9, min_p=0.05, seed=42)
    app = new_app(model, settings, autoplay=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Write a haiku about the sea.", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.activity == "generating")
        for _ in range(6):
            await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens >= 6)
        await pilot.press("p")  # top-p 0.90 -> 0.85: re-run the chain on the same logits
        await wait_for(pilot, lambda: app.view.settings.top_p < 0.9)
        await pilot.press("down", "5", "e")
        await pilot.pause(0.3)
        save(app, "step-mode.svg")


async def help_screen(model: Model) -> None:
    app = new_app(model, SamplerSettings(temp=0.0), autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        await pilot.pause(0.3)
        save(app, "help.svg")


# -- the cache lessons (issue 5): tab 9 is KV memory, tab 0 the cache pane -----------------


def cache_app(model: Model, *, autoplay: bool, raw: bool = False, **config: object) -> TokenstepApp:
    engine = Engine(model, EngineConfig(**config), SamplerSettings(temp=0.0))  # type: ignore[arg-type]
    return TokenstepApp(engine, autoplay=autoplay, raw=raw, autosave_dir=None)


async def show_section(app: TokenstepApp, pilot: Pilot, section: str) -> None:
    """Scroll the cache pane so that ``section`` (#c-seqs, #c-verify, ...) is at its top."""
    tab = app.query_one("#cache")
    tab.scroll_to_widget(app.query_one(section), top=True, animate=False)
    await pilot.pause(0.3)


async def cache_memory(model: Model) -> None:
    app = cache_app(model, autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Name three colors.", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.activity == "done")
        await pilot.press("escape", "9")
        await pilot.pause(0.3)
        save(app, "cache-memory.svg")


async def cache_quadratic(model: Model) -> None:
    app = cache_app(model, autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Write a long paragraph about the history of the sea.", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.reply_tokens >= 100)
        await pilot.press("space", "0")  # pause after ~100 generated tokens
        await show_section(app, pilot, "#c-work")
        save(app, "cache-quadratic.svg")


async def cache_verify(model: Model) -> None:
    app = cache_app(model, autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Write a long paragraph about the history of the sea.", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.reply_tokens >= 60)
        await pilot.press("space", "v")  # pause, then recompute the context in one batch
        await wait_for(pilot, lambda: app.view.cache.verify is not None)
        await show_section(app, pilot, "#c-verify")
        save(app, "cache-verify.svg")


async def cache_prefix(model: Model) -> None:
    app = cache_app(model, autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Name three colors.", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.activity == "done")
        await pilot.press(*"And three animals?", "enter")
        await wait_for(pilot, lambda: len(app.view.cache.turns) == 2 and app.view.activity == "done")
        await pilot.press("escape", "0")
        await show_section(app, pilot, "#c-turns")
        save(app, "cache-prefix.svg")


async def cache_shift(model: Model) -> None:
    app = cache_app(model, autoplay=False, raw=True, n_ctx=64, context_full="shift", n_keep=4)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"The days of the week are Monday, Tuesday,", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.activity == "generating")
        if app.focused is not None and app.focused.id == "chat":
            await pilot.press("escape")  # from the prompt box to the controls
        while not app.view.cache.shifts:  # step until the context is full and shifts once
            n = app.view.header.n_records
            await pilot.press("right")
            await wait_for(
                pilot, lambda n=n: app.view.header.n_records > n or app.view.activity != "generating"
            )
            if app.view.activity != "generating":
                raise SystemExit("screenshots: the reply ended before the context filled")
        await pilot.press("4")  # the KV grid: what the shift forgot, and the seam
        await pilot.pause(0.5)
        save(app, "cache-shift.svg")


async def cache_fork(model: Model) -> None:
    app = cache_app(model, autoplay=False)
    app.worker.engine.settings.greedy = False
    app.worker.engine.settings.temp = 0.9
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"Write a haiku about the sea.", "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.activity == "generating")
        await pilot.press("F")
        await wait_for(pilot, lambda: app.view.text.fork_at is not None)
        for _ in range(10):
            await pilot.press("right")
        await wait_for(pilot, lambda: all(len(s.pieces) >= 10 for s in app.view.text.seqs))
        await show_section(app, pilot, "#c-seqs")
        save(app, "cache-fork.svg")


# -- inside one decode (issue 4): tab 6, the model's own attention weights -------------------

PRONOUN = "The cat sat on the mat because it was tired."


async def attention_screen(model: Model) -> None:
    """Tab 6 on a raw sentence, layer 13, head 8, the cursor on " it": what it attends to."""
    from tui.widgets.attention_tabs import AttentionTab

    layer, head = 13, 8
    engine = Engine(model, EngineConfig(), SamplerSettings(temp=0.0))
    app = TokenstepApp(engine, raw=True, autoplay=False, autosave_dir=None)
    app.worker.attention.start([layer])  # as --attention 13: captured in a context of its own
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*PRONOUN, "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.n_past > 0)
        await pilot.press("6")
        pane = app.query_one(AttentionTab)
        await wait_for(pilot, lambda: pane.att is not None)
        pane.set_head(head)
        it = list(app.view.text.pieces).index(b" it")
        pane.move_cursor(it)
        await pilot.pause(0.3)
        pane.scroll_to(y=max(0, it - pane.body_h + 1), animate=False)  # the rows before " it"
        await pilot.pause(0.3)
        top = pane.ranked(1)
        print(f"attention: ' it' -> {top[0][1]!r} {top[0][2]:.3f} (layer {layer}, head {head})")
        save(app, "attention.svg")


async def remote_screen(model: Model) -> None:
    """Stepping over --server: a real llama-server with the bundled model; the KV cache pane
    (tab 4), which needs a local model, says so."""
    import tempfile

    from benchmarks.bench_remote import server_binary, start_server
    from tui.engine.remote.remote import RemoteBackend

    binary = server_binary()
    if binary is None:
        print("screenshots: remote.svg skipped (no llama-server binary: make llama-server)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(binary, Path(tmp) / "server.log")
        try:
            settings = SamplerSettings(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=42)
            app = TokenstepApp(RemoteBackend(url, settings), autoplay=False, autosave_dir=None)
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press(*"Write a haiku about the sea.", "enter")
                await wait_for(
                    pilot, lambda: app.view is not None and app.view.activity == "generating"
                )
                for _ in range(6):
                    await pilot.press("right")
                await wait_for(pilot, lambda: app.view.text.reply_tokens >= 6)
                await pilot.press("4")  # the KV cache pane: it needs a local model
                await pilot.pause(0.3)
                save(app, "remote.svg")
        finally:
            proc.terminate()
            proc.wait(30)


# -- see what the model almost said (issue 14): tab 8, the logit lens -------------------------

CAPITAL = "The capital of France is"


async def lens_screen(model: Model) -> None:
    """Tab 8 on the raw prompt "The capital of France is": each layer's top 5 for the next
    token, and the layer where " Paris" first enters the top 5 and the top 1."""
    from tui.widgets.lens import LensTab

    engine = Engine(model, EngineConfig(n_threads=app_threads()), SamplerSettings(temp=0.0))
    app = TokenstepApp(engine, raw=True, autoplay=False, autosave_dir=None)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*CAPITAL, "enter")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.n_past > 0)
        await pilot.press("8")
        tab = app.query_one(LensTab)

        def ready() -> bool:
            lens = app.view.lens if app.view is not None else None
            return lens is not None and lens.step is not None

        await wait_for(pilot, ready)
        step = app.view.lens.step
        await pilot.pause(0.5)  # the rows laid out
        tab.scroll_to_layer(step.first_top5 or 0)  # down to the layers where ' Paris' arrives
        await pilot.pause(0.5)
        print(
            f"lens: {step.mark_piece!r} enters the top 5 at layer {step.first_top5}, the top 1 "
            f"at layer {step.first_top1}; max |Δ| {step.check['max_abs_diff']:.3f}"
        )
        save(app, "lens.svg")


# -- see what the model almost said (issue 14) ---------------------------------------------


async def _reply(app: TokenstepApp, pilot: Pilot, text: str, n: int) -> None:
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: app.view is not None and app.view.activity == "generating")
    if app.focused is not None and app.focused.id == "chat":
        await pilot.press("escape")
    for _ in range(n):
        await pilot.press("right")
    await wait_for(pilot, lambda: app.view.text.reply_tokens >= n)


async def surprise_map(model: Model) -> None:
    settings = SamplerSettings(temp=0.8, seed=11)
    app = new_app(model, settings, autoplay=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("escape", "u")  # the map on before the prompt: it is scored too
        await wait_for(pilot, lambda: app.view is not None and app.view.text.surprise.scale == "p")
        await pilot.press("i")
        await _reply(app, pilot, "Write a haiku about the sea.", 24)
        await pilot.pause(0.3)
        save(app, "surprise-map.svg")


async def run_chart(model: Model) -> None:
    settings = SamplerSettings(temp=0.8, seed=11)
    app = new_app(model, settings, autoplay=False)
    async with app.run_test(size=(120, 52)) as pilot:  # room for the two plots
        await pilot.press("escape", "u")
        await wait_for(pilot, lambda: app.view is not None and app.view.text.surprise.scale == "p")
        await pilot.press("i")
        await _reply(app, pilot, "Write a haiku about the sea.", 30)
        await pilot.press("u", "u", "u")  # the map off again; the prompt was scored
        await pilot.press("c")
        await pilot.pause(0.3)
        for _ in range(8):
            await pilot.press("left")
        await pilot.pause(0.5)
        save(app, "run-chart.svg")


async def paths_tree(model: Model) -> None:
    settings = SamplerSettings(temp=0.9, seed=5)
    engine = Engine(model, EngineConfig(n_threads=app_threads(), n_seq_max=4), settings)
    app = TokenstepApp(engine, autoplay=False, autosave_dir=None)
    async with app.run_test(size=SIZE) as pilot:
        await _reply(app, pilot, "Name three colors.", 6)
        await pilot.press("w")  # while the tree shows, rewinds keep their cells
        await pilot.pause(0.3)
        n = app.view.text.reply_tokens
        await pilot.press("left", "left", "left")  # a rewind: the 6 tokens are a branch
        await wait_for(pilot, lambda: app.view.text.reply_tokens == n - 3)
        for _ in range(2):
            await pilot.press("right")
        await wait_for(pilot, lambda: app.view.text.reply_tokens == n - 1)
        app.worker.force(engine.vocab.tokenize(" purple")[0])  # the sampler's pick: a branch
        await wait_for(pilot, lambda: app.view.action == "force")
        await pilot.press("F")  # a fork: its continuation is a branch when rewound
        await wait_for(pilot, lambda: app.view.text.fork_at is not None)
        for _ in range(3):
            await pilot.press("right")
        await wait_for(
            pilot, lambda: any(s.seq_id and len(s.pieces) >= 3 for s in app.view.text.seqs)
        )
        await pilot.press("w", "left")
        await wait_for(pilot, lambda: app.view.action == "rewind" and not app.view.text.seqs)
        await pilot.pause(0.5)
        print(f"paths: {len(app.view.paths.rows) - 1} branches")
        save(app, "paths-tree.svg")


# -- the whole sampler chain (issue 12) -----------------------------------------------------


async def chain_dry_xtc(model: Model) -> None:
    """A repeated sentence: DRY penalizes the token that would repeat it again, and XTC (on
    every step here) removes the most likely candidates above its threshold."""
    settings = SamplerSettings(
        temp=0.8, seed=3, dry_multiplier=0.8, xtc_probability=1.0, xtc_threshold=0.05
    )
    engine = Engine(model, EngineConfig(n_threads=app_threads()), settings)
    text = "The cat sat on the mat. The cat sat on the mat. The cat sat on the"
    app = TokenstepApp(engine, raw=True, prefill=text, autoplay=False, autosave_dir=None)
    async with app.run_test(size=SIZE) as pilot:
        await _reply(app, pilot, "", 0)  # the first pick: DRY sees "mat. The cat sat on the" again
        await pilot.pause(0.3)
        save(app, "chain-dry-xtc.svg")


async def grammar_mask(model: Model) -> None:
    """A GBNF grammar: the candidates it forbids are marked, with a count, in the logits pane."""
    grammar = 'root ::= "The answer is " ("yes" | "no") "."'
    settings = SamplerSettings(temp=0.8, seed=3, grammar=grammar)
    engine = Engine(model, EngineConfig(n_threads=app_threads()), settings)
    app = TokenstepApp(
        engine, prefill="Is the sky blue? Answer yes or no.", autoplay=False, autosave_dir=None
    )
    async with app.run_test(size=SIZE) as pilot:
        await _reply(app, pilot, "", 2)
        await pilot.pause(0.3)
        save(app, "grammar-mask.svg")


def main() -> int:
    OUT.mkdir(exist_ok=True)
    model = Model()
    shots = [main_screen, step_mode, help_screen]
    shots += [cache_memory, cache_quadratic, cache_verify, cache_prefix, cache_shift, cache_fork]
    shots += [attention_screen, remote_screen]
    shots += [lens_screen]
    shots += [surprise_map, run_chart, paths_tree]
    shots += [chain_dry_xtc, grammar_mask]
    only = set(sys.argv[1:])  # e.g. `python scripts/screenshots.py cache_fork`
    for shot in shots:
        if only and shot.__name__ not in only:
            continue
        asyncio.run(shot(model))
    if not only or "browser" in only:  # browser.png: Chromium's screenshot of `tokenstep serve`
        import browser_screenshot  # scripts/ is on sys.path when this script runs

        browser_screenshot.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
