"""Speculative decoding in the app (``--spec-type``): one draft-verify round per step.

A round (:meth:`tui.engine.speculative.spec_verify.Speculator.round`) ends on a pick that is not decoded
yet: the target's replacement for the first rejected draft token, or the one more after a
fully accepted draft. llama-server keeps it the same way, as the first token of the next
verify batch. So while speculation runs the worker holds that pick (``SpecRun.pending``):
the text draws it after the context, marked as picked and waiting for the next batch. Any
other command first settles it (:func:`settle` decodes it alone), so the rest of the worker
keeps its rule that every pick is in the cache.

The header figure is arithmetic on the records: accepted / drafted, tokens emitted per
``llama_decode``, and tokens per second of the rounds' decode time (verify decodes, one-token
decodes and the draft model's) against this run's plain one-token decodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine.model.errors import TokenstepError
from ..engine.model.tokens import quoted
from ..engine.run import loop
from ..engine.run.step import StepRecord
from ..engine.sampler.sampling import softmax
from . import commands as cmd_types
from . import spec_stages
from .spec_run import SpecMarks, SpecRun
from .stages import BATCH, DECODE, DETOKENIZE, FEED_BACK, LOGITS, SAMPLE
from .state import LastPick

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..engine.sampler.chain_result import ChainResult
    from .parts import WorkerParts


def step(w: WorkerParts, run: SpecRun, ended: Callable[[WorkerParts], None]) -> None:
    """One round: draft after the pick waiting (the reply's first pick is sampled here as
    usual), verify in one llama_decode, accept, and cut the rejected tail. ``ended`` is
    playback's own end of a reply (why it stopped, the autosave, the queued message)."""
    s, eng = w.state, w.engine.local
    if eng is None:  # --spec-type is refused with --server before the worker starts
        raise TokenstepError(f"--spec-type {w.engine.capabilities.missing('fork')}.")
    before = eng.kv.used
    s.ran("step", unsaved=True)
    if run.pending is None:  # the reply's first pick, from the prompt's logits
        turn = loop.sample(eng)
        sp = turn.sampled
        w.note_pick((eng.logits_record, repr(eng.settings.to_dict()), sp.chain) if sp.eog else None)
        if turn.stop is not None:
            ended(w)
            return
        run.hold(turn.token)
    assert run.pending is not None
    got = run.spec.round(eng, run.pending)
    if got is None:
        run.take_pending()
        ended(w)
        return
    note_round(w, run, got, before)
    if run.pending is not None and eng.vocab.is_eog(run.pending):
        # the logits pane shows the row the end token came from with that pick's chain (★ on
        # the end token), not a preview by the RNG that moved on: no step samples it again
        chain = last_chain(got)
        if chain is not None:
            w.note_pick((eng.logits_record, repr(eng.settings.to_dict()), chain))
        run.take_pending()  # the end token is never decoded: the reply ends here
        eng.stopped("end of generation")
        ended(w)


# The commands that leave a pick waiting for the next batch (the one place that says so: an
# observer's call is a ``Look``); a rewind and a new chat drop it, every other command that
# may work on the context decodes it first.
KEEPS_PENDING = (
    cmd_types.Step,
    cmd_types.TogglePlay,
    cmd_types.Pause,
    cmd_types.RewindTokens,
    cmd_types.Adjust,
    cmd_types.Greedy,
    cmd_types.Seed,
    cmd_types.ChainEdit,
    cmd_types.PathsShown,
    cmd_types.SurpriseScale,
    cmd_types.LensShown,
    cmd_types.LensMode,
    cmd_types.AttentionTabs,
    cmd_types.AttentionToggle,
    cmd_types.AttentionLayer,
    cmd_types.AttentionHead,
    cmd_types.SpecRowMove,
    cmd_types.SpecStage,
    cmd_types.Look,
)


def spec_commands(w: WorkerParts) -> dict[type, Callable[[Any], None]]:
    """The worker's handlers for the speculative-decoding keys (< > rows, . stages)."""
    return {
        cmd_types.SpecRowMove: lambda c: spec_row(w, c.delta),
        cmd_types.SpecStage: lambda c: spec_stages.next_stage(w),
    }


def settle_before(w: WorkerParts, run: SpecRun, cmd: cmd_types.Command) -> None:
    """Before a command: a rewind forgets the pending pick, anything that works on the
    context decodes it first (:func:`settle`), the rest leave it waiting."""
    if run.pending is None:
        return
    if isinstance(cmd, (cmd_types.RewindTokens, cmd_types.NewChat)):
        drop(run)
    elif not isinstance(cmd, KEEPS_PENDING):
        settle(w, run)  # looking (attention, the lens, its grid) never decodes the pick


def note_round(w: WorkerParts, run: SpecRun, rec: StepRecord, before: int) -> None:
    """The record for the panes, the marks for the text, and the sentence for the notice."""
    s, eng = w.state, w.engine
    sp = rec.spec
    assert sp is not None
    k, a = len(sp.draft), sp.accepted
    piece = eng.vocab.piece
    rejected = piece(sp.draft[a]) if a < k and len(sp.picks) == a + 1 else None
    n = eng.n_past
    start = n - a if k else n
    pick = sp.picks[-1]
    run.verified(rec, SpecMarks(start, n, rejected, piece(pick), run.summary()))
    s.note_pick(round_pick(w, rec))  # stages 5 and 6 say what the round's last pick was
    s.light((SAMPLE, DETOKENIZE, FEED_BACK, BATCH, DECODE, LOGITS))
    # the cells the round kept, and the rejected rows' cells that left right after the verify
    s.note_records((rec,), (before, eng.kv.used), (eng.kv.used, eng.kv.used + sp.removed))
    if not k:
        run.decoded_alone(rec.decode_ms)
        why = f" ({sp.why_none})" if sp.why_none else ""
        s.note(f"Nothing to draft here{why}: one token decoded as usual, its pick waits.")
        return
    got = quoted(piece(pick), pick)
    how = (
        f"the first differing pick {got} replaces {quoted(piece(sp.draft[a]), sp.draft[a])}"
        if rejected is not None
        else f"all accepted, and the last row gives one more: {got}"
    )
    s.note(
        f"Drafted {k} ({sp.type}), verified in ONE llama_decode of {k + 1} tokens with logits "
        f"on every row: accepted {a}; {how}; {sp.removed} cell(s) cut "
        f"(llama_memory_seq_rm). {got} is the next batch's first token; < > move the "
        "logits pane across the rows, . walks the round's stages."
    )


def last_chain(rec: StepRecord) -> ChainResult | None:
    """The chain of the round's last pick: its verify row's, else the record's."""
    sp = rec.spec
    assert sp is not None
    row = sp.rows[len(sp.picks) - 1] if len(sp.rows) >= len(sp.picks) else None
    return row.chain if row is not None and row.chain is not None else rec.chain


def round_pick(w: WorkerParts, rec: StepRecord) -> LastPick | None:
    """The round's last pick (the one that waits for the next batch), as stage 5 shows a
    pick: p from the row it was sampled from (the context's current logits), p′ from that
    row's chain."""
    eng, sp = w.engine, rec.spec
    if sp is None or not sp.picks or eng.logits is None:
        return None
    t = sp.picks[-1]
    chain = last_chain(rec)
    st = eng.settings
    return LastPick(
        t,
        eng.vocab.piece(t),
        float(softmax(eng.logits)[t]),
        chain.p_final(t) if chain is not None else float("nan"),
        False,
        eng.vocab.is_eog(t),
        st.is_greedy,
        st.seed,
        st.mirostat,
    )


def spec_row(w: WorkerParts, delta: int) -> None:
    """< and >: the logits pane shows the last verify batch's row before/after (past either
    end: the current logits again)."""
    run, s = w.spec, w.state
    rec, why = spec_stages.last_round(w, "< > move across a round's verify rows")
    if run is None or rec is None or rec.spec is None:
        s.note(why)
        return
    n = len(rec.spec.rows)
    at = (n if run.row is None else run.row) + delta
    run.show_row(at if 0 <= at < n else None)
    if run.row is None:
        s.note("The logits pane shows the current row again: the one the waiting pick came from.")
        return
    tok = rec.call.tokens[run.row]
    row = rec.spec.rows[run.row]
    after = quoted(w.engine.vocab.piece(tok.id), tok.id)
    if row.pick is None:
        what = "never sampled: it comes after the first mismatch"
    else:
        what = f"the target picked {quoted(w.engine.vocab.piece(row.pick), row.pick)}"
        if run.row < len(rec.spec.draft):
            d = rec.spec.draft[run.row]
            what += (
                ", the draft's token"
                if d == row.pick
                else (f", not the draft's {quoted(w.engine.vocab.piece(d), d)}")
            )
    s.note(f"Verify row {run.row + 1} of {n} (after {after}, pos {tok.pos}): {what}.")


def settle(w: WorkerParts, run: SpecRun) -> None:
    """Decode the pending pick alone, so the context holds every pick again."""
    token = run.take_pending()
    if token is None:
        return
    before = w.engine.kv.used
    rec = w.engine.feed(token)
    if rec is not None:
        run.decoded_alone(rec.decode_ms)
        w.state.note_records((rec,), (before, w.engine.kv.used))


def drop(run: SpecRun) -> None:
    """Forget the pending pick (a rewind or a new message: it was never decoded)."""
    run.take_pending()
