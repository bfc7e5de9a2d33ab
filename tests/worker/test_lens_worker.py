"""The lens on the worker's side: computed only while its tab shows, in an observer context
of its own (the run's context never gets the eval callback), the preview and the last step,
attention kept alongside."""

from __future__ import annotations

import gc
import weakref

from tui.engine import SamplerSettings
from tui.engine.observe.attention_capture import find_capture
from tui.engine.observe.lens_capture import find_lens
from tui.engine.observe.observer_context import ObserverContext
from tui.worker import Worker
from tui.worker.commands import AttentionToggle, LensMode, LensShown, Send, Step


def _worker(make_engine) -> Worker:
    return Worker(
        make_engine(SamplerSettings(temp=0.0)), raw=True, autoplay=False, close_engine=False
    )


def _show_lens(w: Worker) -> ObserverContext:
    """A prompt, then tab 8: the observer context that holds the lens, its head read."""
    w.handle(Send("The capital of France is"))
    w.handle(LensShown(True))
    ctx = w.observers.ctx
    assert ctx is not None and ctx.head is not None
    return ctx


def _close(w: Worker) -> None:
    if w.close_engine:
        w.engine.close()


def test_lens_tab_turns_capture_on_and_off(make_engine) -> None:
    w = _worker(make_engine)
    try:
        w.handle(Send("The capital of France is"))
        assert find_lens(w.engine) is None
        assert w.lens.view().step is None  # not showing: nothing computed
        w.handle(LensShown(True))  # an observer context with the callback replays the prompt
        assert find_lens(w.engine) is None  # the run's own context: untouched
        obs = w.observers.engine
        cap = find_lens(obs)
        assert cap is not None and cap.lens_on
        step = w.lens.view().step
        assert step is not None and step.mark_piece == " Paris"
        assert step.record == w.engine.logits_record
        assert step.first_top1 == step.check["top1_layer"]
        assert step.layers[-1]["top"][0]["piece"] == " Paris"

        w.handle(Step())  # sample " Paris", feed it
        preview = w.lens.view().step
        assert preview is not None and preview.record == w.engine.logits_record
        w.handle(LensMode())
        last = w.lens.view()
        assert last.mode == "last" and last.step is not None
        assert last.step.record == step.record and last.step.mark_piece == " Paris"
        assert last.step.mark_what == "the token sampled"

        w.handle(LensShown(False))
        assert w.observers.ctx is None  # nothing else looks: its context is freed
        w.handle(Step())
        rec = w.engine.records[-1]
        assert "lens" not in rec.extras  # the run's records never carry it
        w.handle(LensMode())
        w.handle(LensShown(True))  # a new observer context replays the run, the lens at its end
        again = w.lens.view().step
        assert again is not None and again.record == w.engine.logits_record == rec.index
    finally:
        _close(w)


def test_attention_and_lens_share_the_callback(make_engine) -> None:
    w = _worker(make_engine)
    try:
        w.handle(Send("Hello"))
        w.handle(LensShown(True))
        fa = w.engine.flash_attn_resolved
        w.handle(AttentionToggle())  # a new observer context, flash attention off: lens stays
        obs = w.observers.engine
        cap = find_lens(obs)
        assert cap is not None and cap.lens_on and find_capture(obs) is cap
        assert obs.flash_attn_resolved == "off" and w.engine.flash_attn_resolved == fa
        w.handle(Step())
        w.lens.view()  # the pane reads the observer: it catches up
        rec = obs.records[-1]
        assert "lens" in rec.extras and "attention" in rec.extras
        assert not w.engine.records[-1].extras
    finally:
        _close(w)


def test_turning_the_lens_off_keeps_its_head(make_engine) -> None:
    """The head (n_vocab x n_embd float32, about 5 s to read on a loaded machine) outlives the
    lens being off: a later 8 takes the same arrays, no read from the GGUF, and the pane says
    what the kept head is. One head: the worker holds one slot, freed when it stops."""
    w = _worker(make_engine)
    try:
        ctx = _show_lens(w)
        head = ctx.head
        assert head is not None
        assert ctx.capture is not None and ctx.capture.head_load_ms is not None  # read here
        w.handle(LensShown(False))
        assert w.observers.ctx is None and w.observers.head is head  # kept, context freed
        w.handle(LensShown(True))
        again = w.observers.ctx
        assert again is not None and again.head is head
        assert again.capture is not None and again.capture.head_load_ms is None  # not read
        n_vocab, n_embd = head.out.shape
        said = w.lens.view().head
        assert f"{n_vocab:,} x {n_embd:,}" in said and "kept while the lens is off" in said
        # what the kept head holds, array by array: the matrix, then its rounding bounds
        assert head.out.nbytes == n_vocab * n_embd * 4
        assert f"{head.out.nbytes / (1 << 20):.1f} MiB" in said
        if head.block_abs is not None:
            assert f"{head.block_abs.nbytes / (1 << 20):.1f} MiB of rounding bounds" in said
    finally:
        w.observers.close()
        assert w.observers.head is None  # the worker's stop frees it
        _close(w)


def test_the_workers_stop_frees_the_head(make_engine) -> None:
    """The worker's observers are the head's one holder (about 110 MiB as float32 on
    SmolLM2): kept while the lens is off, gone once the worker stops, with no copy left in a
    process-wide cache. A weak reference says whether anything still holds it."""
    w = _worker(make_engine)
    try:
        head = _show_lens(w).head
        assert head is not None
        ref = weakref.ref(head)
        del head
        w.handle(LensShown(False))  # the lens let go: its context freed, the head kept
        assert w.observers.ctx is None and w.observers.head is ref()
        gc.collect()
        assert ref() is not None
        assert w.stop()  # no thread: the stop runs its shutdown here
        gc.collect()
        assert ref() is None, gc.get_referrers(ref())
    finally:
        _close(w)
