"""The lens on the worker's side: computed only while its tab shows, the context rebuilt with
the eval callback the first time, the preview and the last step, attention kept alongside."""

from __future__ import annotations

from tui.engine import SamplerSettings
from tui.engine.attention_capture import find_capture
from tui.engine.lens_capture import find_lens
from tui.worker import Worker
from tui.worker.commands import AttentionToggle, LensMode, LensTab, Send, Step


def _worker(make_engine) -> Worker:
    return Worker(
        make_engine(SamplerSettings(temp=0.0)), raw=True, autoplay=False, close_engine=False
    )


def _close(w: Worker) -> None:
    if w.close_engine:
        w.engine.close()


def test_lens_tab_turns_capture_on_and_off(make_engine) -> None:
    w = _worker(make_engine)
    try:
        w.handle(Send("The capital of France is"))
        assert find_lens(w.engine) is None
        assert w.lens.view().step is None  # not showing: nothing computed
        w.handle(LensTab(True))  # a new context with the callback; the prompt prefilled again
        cap = find_lens(w.engine)
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

        w.handle(LensTab(False))
        assert not cap.lens_on
        w.handle(Step())
        rec = w.engine.records[-1]
        assert "lens" not in rec.extras  # computed only while the tab shows
        w.handle(LensMode())
        w.handle(LensTab(True))  # the current position is decoded again, with the lens
        again = w.lens.view().step
        assert again is not None and again.record == w.engine.logits_record > rec.index
        assert find_lens(w.engine) is cap  # the callback was already installed: no rebuild
    finally:
        _close(w)


def test_attention_and_lens_share_the_callback(make_engine) -> None:
    w = _worker(make_engine)
    try:
        w.handle(Send("Hello"))
        w.handle(LensTab(True))
        w.handle(AttentionToggle())  # rebuilds with flash attention off: the lens stays
        cap = find_lens(w.engine)
        assert cap is not None and cap.lens_on and find_capture(w.engine) is cap
        w.handle(Step())
        rec = w.engine.records[-1]
        assert "lens" in rec.extras and "attention" in rec.extras
    finally:
        _close(w)
