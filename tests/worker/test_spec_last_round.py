"""--spec-type: `.` and `<` read the last round while it is the newest decode, a reply that
ended on it included; after a plain step they say the last step drafted nothing, never the
"(--spec-type)" of a run without speculation (issue #30's walk)."""

from __future__ import annotations

import pytest

from tests.support.spec import LIST_X4
from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.speculative.spec_draft import DraftSimple
from tui.engine.speculative.spec_ngram import NgramSimple
from tui.engine.speculative.spec_verify import NgramDrafter, Speculator
from tui.worker import commands as c
from tui.worker.spec_run import SpecRun
from tui.worker.thread import Worker


def make_worker(model, drafter):
    eng = Engine(model, EngineConfig(n_ctx=1024, n_threads=2), SamplerSettings(greedy=True))
    w = Worker(eng, raw=True, autoplay=False, autosave_dir=None, close_engine=False)
    w.spec = SpecRun(Speculator(drafter))
    return w, eng


SHORT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"


def test_a_reply_that_ended_on_a_verify_round_keeps_it_replayable(model):
    """The bundled model drafts for itself (greedy): its short reply ends on a round whose
    picks hold the end token, which is never decoded; the round stays the newest decode."""
    w, eng = make_worker(model, NgramDrafter(NgramSimple(3, 8)))
    spec = Speculator(DraftSimple(eng, model.path, n_max=3))
    w.spec = run = SpecRun(spec)
    try:
        w.handle(c.Send(SHORT))
        for _ in range(40):
            w.handle(c.Step())
            if run.pending is None:
                break
        rec = run.record
        assert run.pending is None and rec is not None and rec.spec is not None
        assert eng.vocab.is_eog(rec.spec.picks[-1])  # the reply ended inside this round
        assert rec.spec.draft and eng.records[-1].index == rec.index
        w.handle(c.SpecStage())
        assert w.state.notice.startswith("Round stage 1/4 · draft (draft-simple)")
        w.handle(c.SpecStage())
        n = len(rec.call.tokens)
        assert f"ONE llama_decode of {n} tokens" in w.state.notice
        w.handle(c.SpecRowMove(-1))
        assert w.state.notice.startswith(f"Verify row {n} of {n} ")
        assert w.build_view().logits is not None
    finally:
        spec.close()
        w.stop()
        eng.close()


@pytest.fixture
def ngram(model):
    w, eng = make_worker(model, NgramDrafter(NgramSimple(3, 8)))
    yield w
    w.stop()
    eng.close()


def test_after_a_plain_step_the_keys_say_it_drafted_nothing(ngram):
    w = ngram
    w.handle(c.SpecStage())
    assert w.state.notice.startswith("No round yet") and "--spec-type" not in w.state.notice
    w.handle(c.Send(LIST_X4))
    for _ in range(16):
        w.handle(c.Step())
        sp = w.spec.record.spec if w.spec.record is not None else None
        if sp is not None and sp.draft:
            break
    assert w.spec.pending is not None and w.spec.record.spec.draft
    w.handle(c.SpecStage())
    assert w.state.notice.startswith("Round stage 1/4")
    n = len(w.engine.records)
    w.handle(c.Verify("batched"))  # it first decodes the waiting pick alone: a plain step
    assert len(w.engine.records) > n and w.spec.pending is None
    for key in (c.SpecStage(), c.SpecRowMove(-1)):
        w.handle(key)
        said = w.state.notice
        assert said.startswith("The last step drafted nothing"), said
        assert "--spec-type" not in said


def _reply_that_ends_in_a_round(model, first_seed: int) -> tuple[Worker, Engine, SpecRun]:
    """Sampled replies, from `first_seed` on, until one ends while a verify round is the newest
    decode. Most do (11 of the first 12 seeds on an AMX build), but which ones depends on the
    kernels: seed 11's reply ran past 200 rounds on an AVX2-only build, and a reply can end on a
    plain step that drafted nothing."""
    for seed in range(first_seed, first_seed + 8):
        settings = SamplerSettings(temp=0.8, seed=seed)
        eng = Engine(model, EngineConfig(n_ctx=1024, n_threads=2), settings)
        w = Worker(eng, raw=True, autoplay=False, autosave_dir=None, close_engine=False)
        w.spec = run = SpecRun(Speculator(NgramDrafter(NgramSimple(3, 8))))
        w.handle(c.Send(SHORT))
        for _ in range(1024):  # a round takes a cell at least: the context ends it by then
            w.handle(c.Step())
            if eng.stop_reason:
                break
        rec = run.record
        if (
            eng.stop_reason == "end of generation"
            and rec is not None
            and rec.spec is not None
            and eng.records[-1].index == rec.index
        ):
            return w, eng, run
        w.stop()
        eng.close()
    pytest.fail(f"no reply of seeds {first_seed} to {first_seed + 7} ended inside a verify round")


@pytest.mark.parametrize("first_seed", [7, 11])
def test_a_sampled_reply_that_ends_in_a_round_stars_its_end_token(model, first_seed):
    """The row an end token was sampled from shows that pick's chain: the ★ is the end token.
    A preview there would sample again with the RNG that already moved on (the walk saw ★ on
    '↵' under 'last <|im_end|>'), a pick no key takes since the reply is over."""
    w, eng, run = _reply_that_ends_in_a_round(model, first_seed)
    try:
        assert run.record is not None and run.record.spec is not None
        end = run.record.spec.picks[-1]
        assert eng.vocab.is_eog(end)  # the reply ended inside this round
        assert w.desk.ended is not None and w.desk.ended[2].selected == end
        view = w.build_view().logits
        assert view is not None and view.next_pick == end
    finally:
        w.stop()
        eng.close()
