"""--spec-type in the app: the worker steps one draft-verify round per key, the panes get the
verify batch, the round's marks and the header figure, and the pick that waits for the next
batch is settled before any command that works on the context."""

from __future__ import annotations

import pytest

from tests.support.app import run_async
from tests.support.spec import LIST_X4, spec_worker  # noqa: F401 (the fixture)
from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.speculative.spec_draft import DraftSimple
from tui.engine.speculative.spec_ngram import NgramSimple
from tui.engine.speculative.spec_verify import NgramDrafter, Speculator
from tui.worker import commands as c
from tui.worker.spec_run import SpecRun
from tui.worker.thread import Worker


def test_each_step_is_one_round(spec_worker):  # noqa: F811
    w = spec_worker
    w.handle(c.Send(LIST_X4))
    verified = None
    for _ in range(6):
        records = len(w.engine.records)
        w.handle(c.Step())
        assert len(w.engine.records) == records + 1  # one llama_decode per step
        v = w.build_view()
        rec = v.batch.last_records[-1]
        assert rec.spec is not None
        if rec.phase == "verify":
            verified = (v, rec)
            assert all(t.logits for t in rec.call.tokens)  # logits on every row
            assert "ONE llama_decode" in w.state.notice
        assert v.text.spec is not None and v.text.spec.pending is not None
        assert w.spec.pending == rec.spec.picks[-1]
        assert w.engine.tokens[-1] == rec.call.tokens[len(rec.spec.picks) - 1].id
    assert verified is not None
    v, rec = verified
    st = w.spec.spec.stats
    assert v.header.spec is not None
    assert v.header.spec.startswith(f"spec {st.accepted / st.drafted:.0%} of {st.drafted} · ")
    assert f"{st.emitted / (st.rounds + st.plain):.2f} tok/decode" in v.header.spec


def test_a_rejected_draft_token_is_marked_beside_its_replacement(spec_worker):  # noqa: F811
    w = spec_worker
    w.handle(c.Send(LIST_X4))
    for _ in range(12):
        w.handle(c.Step())
        rec = w.state.last_records[-1]
        sp = rec.spec
        if sp is not None and sp.draft and sp.accepted < len(sp.draft):
            marks = w.build_view().text.spec
            assert marks is not None
            assert marks.rejected == w.engine.vocab.piece(sp.draft[sp.accepted])
            assert marks.pending == w.engine.vocab.piece(sp.picks[-1])
            assert marks.end - marks.start == sp.accepted
            assert marks.end == w.engine.n_past
            return
    pytest.fail("no round rejected part of its draft")


def test_the_waiting_pick_is_decoded_before_a_verify_and_dropped_by_a_rewind(spec_worker):  # noqa: F811
    w = spec_worker
    w.handle(c.Send(LIST_X4))
    w.handle(c.Step())
    pending = w.spec.pending
    assert pending is not None
    n = w.engine.n_past
    w.handle(c.Verify("batched"))
    assert w.spec.pending is None
    assert w.engine.n_past == n + 1 and w.engine.tokens[-1] == pending
    assert w.state.verify is not None and w.state.verify.top1_agree
    w.handle(c.Step())
    assert w.spec.pending is not None
    n = w.engine.n_past
    w.handle(c.RewindTokens(1))
    assert w.spec.pending is None and w.engine.n_past == n - 1


def test_looking_keeps_the_pick_waiting_and_a_plain_call_decodes_it(spec_worker):  # noqa: F811
    """The app's looking commands (attention's every layer, the lens's grid: a ``Look``) leave
    the waiting pick alone, as the other looking keys do; any other call may work on the
    context, so the pick is decoded first."""
    w = spec_worker
    w.handle(c.Send(LIST_X4))
    w.handle(c.Step())
    pending, n = w.spec.pending, w.engine.n_past
    assert pending is not None
    seen: list[str] = []
    for cmd in (
        c.lens_command("grid", (), lambda: seen.append("grid")),
        c.attention_command("all", (), lambda: seen.append("all")),
    ):
        w.handle(cmd)
        assert w.spec.pending == pending and w.engine.n_past == n
    assert seen == ["grid", "all"]  # each ran
    w.handle(c.Call(lambda: seen.append("call")))
    assert seen[-1] == "call" and w.spec.pending is None
    assert w.engine.n_past == n + 1 and w.engine.tokens[-1] == pending


@run_async
async def test_the_app_draws_a_round(make_engine, tmp_path):
    """In the app: → runs one round; the header shows the figure, the text ends with the
    waiting pick (after the struck rejected draft token, when there is one), and the pane's
    incremental text equals its full rebuild."""
    from tests.support.app import SIZE, make_app, send, wait_for
    from tests.support.text_pane import check_incremental
    from tui.widgets.header import StatusHeader
    from tui.widgets.logits import LogitsPane
    from tui.widgets.text import ConversationPane

    app = make_app(make_engine, tmp_path, raw=True)
    app.worker.spec = SpecRun(Speculator(NgramDrafter(NgramSimple(3, 8))))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, LIST_X4)
        pane = app.query_one(ConversationPane)
        for _ in range(4):
            n = len(app.worker.engine.records)
            await pilot.press("right")
            await wait_for(
                pilot,
                lambda n=n: (
                    pane.view is not None
                    and pane.view.text.spec is not None
                    and len(pane.view.batch.last_records) == 1
                    and pane.view.batch.last_records[0].index == n
                ),
                "a round drawn",
            )
            check_incremental(pane)
            marks = pane.view.text.spec
            tail = (marks.rejected or b"").decode() + marks.pending.decode()
            assert pane.plain.rstrip("▌").endswith(tail)
        header = app.query_one(StatusHeader).render().plain
        assert "spec " in header and "tok/decode" in header
        logits = app.query_one(LogitsPane)
        await pilot.press("less_than_sign")  # < : the last row of the verify batch
        await wait_for(
            pilot,
            lambda: str(logits.border_title).startswith("logits → sampler · verify row "),
            "the logits pane on a verify row",
        )


def reply_of(w: Worker, limit: int = 400) -> list[int]:
    """Step the reply to its end; its tokens (the pick that ended it not included)."""
    w.handle(c.Send("Name three colors."))
    start = w.state.reply_start
    for _ in range(limit):
        if w.state.activity != "generating":
            break
        w.handle(c.Step())
    assert w.state.activity == "done"
    return w.engine.tokens[start:]


def test_a_speculative_reply_is_the_plain_reply(model, spec_worker, draft_model_path):  # noqa: F811
    """Greedy, a whole chat reply stepped round by round (the Q2_K draft model drafting)
    equals the one stepped token by token, and both stop on the same end token."""
    eng = Engine(model, EngineConfig(n_ctx=1024, n_threads=2), SamplerSettings(greedy=True))
    plain = Worker(eng, raw=False, autoplay=False, autosave_dir=None, close_engine=False)
    try:
        want = reply_of(plain)
    finally:
        plain.stop()
        eng.close()
    spec_worker.raw = False
    spec = Speculator(DraftSimple(spec_worker.engine, draft_model_path, n_max=3))
    spec_worker.spec = SpecRun(spec)
    try:
        got = reply_of(spec_worker)
    finally:
        spec.close()
    assert spec.stats.rounds > 0
    assert got == want
    assert spec_worker.engine.stop_reason == "end of generation"


def test_the_logits_pane_moves_across_the_verify_rows(spec_worker):  # noqa: F811
    w = spec_worker
    w.handle(c.Send(LIST_X4))
    rec = None
    for _ in range(12):
        w.handle(c.Step())
        rec = w.state.last_records[-1]
        if rec.spec is not None and rec.spec.accepted < len(rec.spec.draft):
            break
    assert rec is not None and rec.spec is not None and rec.phase == "verify"
    sp = rec.spec
    n = len(sp.rows)
    current = w.build_view().logits
    w.handle(c.SpecRowMove(-1))  # from the current row back to the batch's last row
    v = w.build_view().logits
    assert v.spec_row == f"logits → sampler · verify row {n} of {n}"  # 1-based, as "of n"
    assert [r.id for r in v.candidates] == [t.id for t in sp.rows[n - 1].top]
    assert v.next_pick is None  # after the first mismatch: never sampled
    # so no p′: the pane draws "–" for a cut row, as everywhere else (not "0")
    assert all(r.cut_by == "never sampled" for r in v.candidates)
    for i in range(n - 2, -1, -1):
        w.handle(c.SpecRowMove(-1))
        v = w.build_view().logits
        assert v.spec_row == f"logits → sampler · verify row {i + 1} of {n}"
        assert v.next_pick == sp.rows[i].pick
        assert v.candidates[0].logit == sp.rows[i].top[0].logit
    row = sp.accepted  # the mismatch row: the chain's pick there, with its cuts
    for _ in range(row):  # from row 0
        w.handle(c.SpecRowMove(1))
    assert w.spec.row == row and "not the draft's" in w.state.notice
    v = w.build_view().logits
    assert v.next_pick == sp.picks[-1] and v.chain is sp.rows[row].chain
    w.handle(c.SpecRowMove(n))  # past the end: the current row again
    assert w.build_view().logits.spec_row is None
    assert w.build_view().logits.candidates == current.candidates
    assert w.spec.pending == sp.picks[-1]  # moving across the rows kept the pick waiting
