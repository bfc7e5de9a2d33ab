"""Issue 30's findings, each pinned: looking at the run must not rewrite its history or count
as a turn, and the speculative panes must say what the rounds did (calls against emitted
tokens, the draft model's decodes, the round's pick in stages 5 and 6, what the draft cost)."""

from __future__ import annotations

import pytest

from tests.support.spec import LIST_X4, spec_worker  # noqa: F401 (the fixture)
from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.record.surprise import along
from tui.worker import commands as c
from tui.worker.thread import Worker

LOOKS = [
    c.AttentionTabs(True, False),
    c.AttentionToggle(),
    c.LensShown(True),
    "grid",
    c.SurpriseScale(),
]


def _look(w: Worker) -> None:
    for cmd in LOOKS:
        grid = c.lens_command("grid", (), w.lens.toggle_grid)  # what the app sends for G
        w.run_now(grid if cmd == "grid" else cmd)  # type: ignore[arg-type]
        assert w.error is None, w.error
        w.build_view()


@pytest.fixture(scope="module")
def looked(model):
    """One run looked at, shared by the tests that read it (reading is all they do: looking
    never changes what is looked at); building it decodes a reply and every look, 30 to 40 s
    on a loaded 2-core machine."""
    eng = Engine(model, EngineConfig(n_ctx=512, n_threads=2), SamplerSettings(temp=0.0))
    w = Worker(eng, autoplay=False, autosave_dir=None, close_engine=False)
    w.run_now(c.Send("Name three colors."))
    for _ in range(6):
        w.run_now(c.Step())
    before = {
        "values": list(along(eng.run, eng.surprise, eng.tokens)),
        "turns": len(eng.turns) - w.state.turns_from,
        "timeline": w.build_view().timeline.totals,
    }
    _look(w)
    yield w, before
    w.observers.close()
    eng.close()


def test_looking_does_not_rewrite_the_steps_p_and_p_prime(looked):
    """Finding 2: after a, 8, G, u the run chart's step values were "not known" or changed
    (the rebuilt context lost them, or a re-decode replaced them)."""
    w, before = looked
    eng = w.engine
    after = list(along(eng.run, eng.surprise, eng.tokens))
    start = w.state.reply_start
    assert start is not None
    for i in range(start, len(after)):
        assert before["values"][i] is not None, i  # the reply's picks: p and p′ kept
        assert after[i] == before["values"][i], i
    chart = w.build_view().text.surprise.values
    for i in range(start, len(after)):
        v = before["values"][i]
        assert chart[i] == (v.p, v.p_final, v.entropy)


def test_looking_is_not_a_turn(looked):
    """Finding 3: tab 0 listed 5 turns after one message plus a, 8, G (each re-decode of the
    context counted as a prefill turn); it is one turn, and the timeline counts no decode of
    the looking."""
    w, before = looked
    v = w.build_view()
    assert before["turns"] == 1
    assert len(v.cache.turns) == 1
    assert v.timeline.totals == before["timeline"]


def test_the_timeline_counts_calls_and_emitted_tokens_in_spec_mode(spec_worker):  # noqa: F811
    """Finding 4: "decode 116 steps" after 20 llama_decode calls that emitted 77 tokens: the
    verify batches' rejected rows were counted as steps."""
    w = spec_worker
    w.run_now(c.Send(LIST_X4))
    verifies = 0
    for _ in range(10):
        w.run_now(c.Step())
        rec = w.state.last_records[-1]
        verifies += rec.phase == "verify"
    assert verifies, "no round drafted anything"
    recs = [r for r in w.engine.records if r.phase != "prefill"]
    emitted = sum(len(r.spec.picks) if r.spec is not None and r.phase == "verify" else 1 for r in recs)
    rows = sum(r.call.n_tokens for r in recs)
    tot = w.build_view().timeline.totals
    assert tot.decode_calls == len(recs) and tot.verify_calls == verifies
    assert tot.decode_tokens == emitted
    assert rows > emitted  # a rejected row was decoded: counting rows would say more


def test_stage_5_and_6_say_the_rounds_pick(spec_worker):  # noqa: F811
    """Finding 6: after every round (plain ones too) stages 5 and 6 read "—"."""
    w = spec_worker
    w.run_now(c.Send(LIST_X4))
    for _ in range(4):
        w.run_now(c.Step())
        v = w.build_view()
        pick = v.text.last_pick
        assert pick is not None and w.spec is not None
        assert pick.id == w.spec.pending
        assert 0.0 < pick.p <= 1.0 and 0.0 <= pick.p_final <= 1.0


def test_the_header_says_what_the_draft_cost_without_a_plain_decode(spec_worker):  # noqa: F811
    """Finding 8: draft-simple read "spec 100% of 15 · 4.00 tok/decode" while its draft model's
    decodes took longer than the verify; "x plain" never came, as no plain decode ran."""
    run = spec_worker.spec
    st = run.spec.stats
    st.rounds, st.drafted, st.accepted, st.emitted = 5, 15, 15, 20
    st.verify_ms, st.draft_ms = 78.0, 83.0
    summary = run.summary()
    assert summary is not None and "x plain" not in summary
    assert "draft 83 ms vs verify 78 ms" in summary
