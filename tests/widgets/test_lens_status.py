"""The Lens pane always says why it is empty (issue #30): while the lens's head loads, and
whenever the worker has no step to show (e.g. the lens not turned on yet)."""

from __future__ import annotations

import threading

import tui.engine.observe.lens_capture as lens_capture
from tests.support.app import SIZE, make_app, run_async, send, wait_for
from tests.support.spec import LIST_X4
from tui.engine.speculative.spec_ngram import NgramSimple
from tui.engine.speculative.spec_verify import NgramDrafter, Speculator
from tui.widgets.lens import LensPane
from tui.worker import lens as worker_lens
from tui.worker.lens import LensView
from tui.worker.spec_run import SpecRun

BARE = "the lens is not available"


def _text(pane) -> str:
    """The pane's words on one line (its rows wrap)."""
    return " ".join(" ".join(pane.render_line(y).text.split()) for y in range(pane.size.height))


def test_a_lens_view_without_a_step_always_says_why():
    """An empty reason cannot be built: it becomes the general one (no raise, no blank pane)."""
    assert LensView(True, "preview", None, 30, "").status == worker_lens.NOTHING_YET
    assert LensView(True, "preview", None, 30).status == worker_lens.NOTHING_YET
    off = worker_lens.OFF  # what the view of a lens not turned on yet says
    assert LensView(False, "preview", None, 30, "").status == off
    assert LensView(False, "preview", None, 30, off).status == off
    assert LensView(True, "last", None, 30, "loading…").status == "loading…"  # a given one stays


@run_async
async def test_the_pane_says_the_head_is_loading(make_engine, tmp_path, monkeypatch):
    """The first `8` reads the head from the GGUF: a view saying so goes out before the load
    (the load is held here until the pane has shown it), then the lens comes."""
    go = threading.Event()
    real = lens_capture.load_head

    def held(path: str, progress=None):  # type: ignore[no-untyped-def]
        assert go.wait(120), "the pane never said the head was loading"
        return real(path, progress)

    monkeypatch.setattr(lens_capture, "load_head", held)
    app = make_app(make_engine, tmp_path, raw=True)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "The capital of France is")
        await wait_for(pilot, lambda: app.view.text.n_past > 0, "prefill")
        await pilot.press("escape")
        await pilot.press("8")
        pane = app.query_one(LensPane)
        info = app.worker.engine.info
        want = f"loading the lens's output head ({info.n_vocab:,} x {info.n_embd:,} from the GGUF"
        try:
            await wait_for(pilot, lambda: want in _text(pane), "the loading sentence")
            lv = app.view.lens
            assert lv.visible and lv.step is None and lv.loading_since is not None
            assert app.view.busy is not None and "output head" in app.view.busy
            await wait_for(pilot, lambda: " s" in _text(pane).split("…")[-1], "the seconds")
        finally:
            go.set()
        await wait_for(pilot, lambda: app.view.lens.step is not None, "the lens")
        assert app.view.lens.loading_since is None and BARE not in _text(pane)
        assert app.view.busy is None or "output head" not in app.view.busy


@run_async
async def test_spec_fork_attention_then_lens_never_bare(make_engine, tmp_path):
    """--spec-type ngram-simple, a round, F, a, 8: the pane shows the lens or says why, never
    the bare sentence, from the key on."""
    app = make_app(make_engine, tmp_path, raw=True)
    app.worker.spec = SpecRun(Speculator(NgramDrafter(NgramSimple(3, 8))))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, LIST_X4)
        await pilot.press("escape")
        n = len(app.worker.engine.records)
        await pilot.press("right")
        await wait_for(
            pilot,
            lambda: len(app.view.batch.last_records) and app.view.batch.last_records[-1].index >= n,
            "a round",
        )
        await pilot.press("F")
        await wait_for(pilot, lambda: app.view.text.fork_at is not None, "the fork")
        await pilot.press("a")
        await pilot.press("8")
        pane = app.query_one(LensPane)
        seen: list[str] = []

        def shown() -> bool:
            seen.append(_text(pane))
            lv = app.view.lens
            return lv is not None and lv.visible and lv.step is not None

        await wait_for(pilot, shown, "the lens after the fork")
        assert not any(t.strip() == BARE or not t.strip() for t in seen[1:]), seen
