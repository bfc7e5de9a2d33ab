"""Stepping the reply: one token at a time, autoplay, rewind, and forked sequences.

Each function runs one command on the worker thread and leaves the state saying which pipeline
stages it lit and what it did. :func:`decode_one` is the single place that samples (or forces)
a token, stops on an end-of-generation token, and feeds it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..engine.model.tokens import quoted
from ..engine.run import loop
from ..engine.run.step import Sampled, ShiftEvent, StepRecord
from ..engine.sampler.sampling import softmax
from . import chat, paths, saving, spec_step
from .chat import clip, cut
from .remote_view import lost_cache_note, rewind_note
from .stages import BATCH, DECODE, DETOKENIZE, FEED_BACK, LOGITS, SAMPLE
from .state import LastPick

if TYPE_CHECKING:
    from .parts import ForkSession, WorkerParts


def user_step(w: WorkerParts) -> None:
    """→: pause a playing reply, else decode one token."""
    s = w.state
    if s.playing:
        s.playback.pause()
        s.note("Paused: step mode. Each → is one decode.")
        return
    step(w, None)


def force(w: WorkerParts, token: int) -> None:
    w.state.playback.pause()
    if w.state.activity == "generating" and w.engine.n_past:
        paths.leave_pick(w, token)  # the sampler's own pick is a path not taken
    step(w, token)


def step(w: WorkerParts, forced: int | None) -> None:
    """One decode: sample (or take ``forced``), feed it back, decode it."""
    s, eng = w.state, w.engine
    if s.activity == "idle" or eng.n_past == 0:
        s.note("Send a message first: type it in the chat box and press Enter.", "warn")
        return
    if s.activity == "done":
        s.playback.pause()
        s.note(f"The reply has ended ({eng.stop_reason}). ← rewinds; or type a new message.")
        return
    if len(eng.seq_ids) > 1:
        step_forked(w, forced)
        return
    if w.spec is not None and forced is None:  # --spec-type: one draft-verify round
        spec_step.step(w, w.spec, reply_ended)
        return
    before = eng.kv.used
    rec = decode_one(w, forced)
    s.ran("force" if forced is not None else "step", unsaved=True)
    if rec is None:
        reply_ended(w)
        return
    if stepped(w, rec, before):
        return  # the notice says what the shift forgot
    lost = lost_cache_note(rec)
    if forced is not None:
        s.note(
            f"Forced token {quoted(eng.vocab.piece(forced), forced)}; "
            "it was decoded like any sampled token." + lost
        )
    elif s.mode == "step" or lost:
        s.note("Stepped one token: sample, detokenize, feed back, decode." + lost)
    if lost:
        s.note(s.notice, "warn")


def decode_one(w: WorkerParts, forced: int | None) -> StepRecord | None:
    """One turn of the engine's loop (:func:`tui.engine.run.loop.advance`: sample or force, stop
    on an end token, else feed and decode), and the pick noted for the panes. The record is
    None when generation stopped (end token or a full context)."""
    eng = w.engine
    greedy, seed = eng.settings.is_greedy, eng.settings.seed
    turn = loop.sample(eng, forced)  # may decode the last token again after a deep rewind
    p, p_final = pick_probabilities(turn.sampled)
    sp = turn.sampled
    mirostat = eng.settings.mirostat
    piece = eng.vocab.piece(sp.token)
    w.state.note_pick(LastPick(sp.token, piece, p, p_final, sp.forced, sp.eog, greedy, seed, mirostat))
    settings = repr(eng.settings.to_dict())
    w.note_pick((eng.logits_record, settings, sp.chain) if sp.eog else None)
    if eng.n_past >= eng.n_ctx:  # a context shift (or a stop) comes first: not lent
        return loop.feed(eng, turn).record
    with w.lane.lendable():  # the pick is noted: a key may be answered during the decode
        return loop.feed(eng, turn).record


def stepped(w: WorkerParts, rec: StepRecord, before: int) -> bool:
    """Note one decode step (one sequence or several): the stages it lit, its record, the
    cells it wrote, its time. True when a context shift came first (and was noted)."""
    s = w.state
    s.light((SAMPLE, DETOKENIZE, FEED_BACK, BATCH, DECODE, LOGITS))
    s.note_records((rec,), (before, w.engine.kv.used))
    if rec.shift is None:
        return False
    shifted(w, rec.shift)
    return True


def shifted(w: WorkerParts, ev: ShiftEvent) -> None:
    """A context shift forgot tokens [n_keep, n_keep + n_discard): cut them out of the
    text's spans and say what was forgotten."""
    s, a, n = w.state, ev.n_keep, ev.n_discard
    s.shifted(cut(s.spans, a, n), a, n)
    gone = b"".join(w.engine.vocab.piece(f.token) for f in ev.forgotten)
    text = gone.decode("utf-8", errors="replace")
    shown = text if len(text) <= 40 else text[:39] + "…"
    s.note(
        f"Context full: shifted. Kept the first {a} tokens, forgot {n} ({shown!r}); "
        "tab 0 lists them.",
        "warn",
    )


def step_forked(w: WorkerParts, forced: int | None) -> None:
    """After a fork: every live sequence samples from its own logits row with its own
    chain, and ONE llama_decode carries one token per sequence."""
    s = w.state
    eng: ForkSession = w.require("fork")
    before = eng.kv.used
    # Sequence 0's row, as the logits pane shows it: its pick is stage 5's (the preview runs
    # on a clone of the same RNG, so it names the token the step takes).
    row0 = None if eng.logits is None else (np.array(eng.logits), eng.preview())
    settings = eng.settings
    with w.lane.lendable():  # forks never shift: the decode may be lent
        rec = eng.step_seqs({0: forced} if forced is not None else None)
    s.ran("force" if forced is not None else "step", unsaved=True)
    s.note_pick(None)
    seq0 = rec.rows.get(0) if rec is not None else None
    if seq0 is not None and row0 is not None:
        logits0, chain0 = row0
        t = seq0.token
        s.note_pick(
            LastPick(
                t,
                eng.vocab.piece(t),
                float(softmax(logits0)[t]),
                chain0.p_final(t),
                forced is not None,
                False,
                settings.is_greedy,
                settings.seed,
                settings.mirostat,
            )
        )
    if rec is None:
        s.playback.end(eng.stop_reason)
        s.light((SAMPLE, DETOKENIZE))
        s.note(f"Every sequence has stopped ({eng.stop_reason or 'end of generation'}).")
        turn_ended(w)
        return
    s.fork_stepped({seq: row.token for seq, row in rec.rows.items()})
    if not stepped(w, rec, before) and s.mode == "step":
        ids = ", ".join(str(q) for q in rec.rows)
        s.note(f"One llama_decode for sequences {ids}: one token each, own positions.")


def pick_probabilities(sp: Sampled) -> tuple[float, float]:
    """p and p' of the token just picked. The record whose logits it came from already holds
    the top candidates (with p); only a token outside that top needs the full softmax. p' is
    the pick's own chain (a preview when forced: survivors do not depend on the RNG)."""
    p = sp.p
    if p is None:
        p = next((c.p for c in sp.source.top if c.id == sp.token), None) if sp.source else None
    if p is None:
        p = float(softmax(sp.logits)[sp.token])
    return p, sp.chain.p_final(sp.token)


def reply_ended(w: WorkerParts) -> None:
    """The loop stopped (an end token was picked, or the context is full): say why, then
    the turn's end."""
    s, eng = w.state, w.engine
    s.playback.end(eng.stop_reason)
    s.light((SAMPLE, DETOKENIZE))
    if eng.stop_reason == "end of generation":
        s.note("End of generation: the model sampled an end token. ← rewinds and resamples.")
    else:
        s.note(f"Context full ({eng.n_ctx} tokens): ctrl+n starts a new chat.", "warn")
    turn_ended(w)


def turn_ended(w: WorkerParts) -> None:
    """The reply ended: autosave, then send the message queued while it played."""
    saving.autosave(w)
    chat.send_queued(w)


def toggle_play(w: WorkerParts) -> None:
    s = w.state
    if s.mode == "autoplay":
        s.playback.pause()
        s.note("Step mode: → decodes one token, ← rewinds one, space plays again.")
    else:
        s.playback.play()
        if s.activity == "done":
            s.note("Autoplay on. The reply has ended; the next message plays on its own.")
        elif s.activity == "idle":
            s.note("Autoplay on: replies generate on their own.")
        else:
            s.note("Playing. Space pauses.")
    s.ran("mode")


def pause(w: WorkerParts) -> None:
    if w.state.mode == "autoplay":
        toggle_play(w)


def rewind(w: WorkerParts, n: int) -> None:
    s, eng = w.state, w.engine
    s.playback.pause()  # rewinding is stepping: autoplay would resample at once
    n = min(n, chat.reply_tokens(w))
    if len(eng.seq_ids) > 1:
        paths.leave_forks(w)  # each fork is a path not taken, its cells parked
    if n <= 0:
        s.note("Nothing to rewind: the reply is empty (rewind stops at your message).")
        return
    paths.leave_live(w, "rewind")
    before = eng.kv.used
    removed = eng.rewind(n)
    s.playback.reopen()
    s.ran("rewind", (FEED_BACK,), unsaved=True)
    s.forget_step((eng.kv.used, eng.kv.used))
    s.cut_to(clip(s.spans, eng.n_past))
    if eng.logits is not None:
        how = "the logits for the new last token came from memory, nothing was recomputed"
    else:
        how = "its logits were not kept, so the next step decodes that token again"
    kept = next((b.seq for b in s.paths if b.seq is not None and b.how == "rewind"), None)
    if kept is not None and eng.kv.used == before:
        how += f"; the cells stay for the path not taken (sequence {kept})"
    over_http = rewind_note(eng, removed)  # a server's slot: no cells to count
    s.note(over_http or f"Rewound {removed} token: KV cells {before} → {eng.kv.used}; {how}.")


def fork(w: WorkerParts) -> None:
    """Copy sequence 0 into a new seq_id; later steps decode both in one batch."""
    s = w.state
    eng: ForkSession = w.require("fork")
    if s.activity == "done" and not eng.branches:
        s.playback.reopen()  # a fork may continue where the reply ended
        eng.stopped(None)
    at = eng.n_past
    dst = eng.fork(0)
    s.forked(at, [0, dst])
    s.playback.pause()
    s.ran("fork", ())
    s.note(
        f"Forked: sequence {dst} shares all {at} KV cells of sequence 0 "
        "(llama_memory_seq_cp); → steps both in one llama_decode."
    )


def jump(w: WorkerParts, branch_id: int) -> None:
    """Make a path not taken the live reply (see :func:`tui.worker.paths.jump`)."""
    paths.jump(w, branch_id)
    w.state.cut_to(clip(w.state.spans, w.engine.n_past))


def drop_forks(w: WorkerParts) -> None:
    eng: ForkSession | None = w.engine.local
    if eng is not None:  # only a local session forks
        for seq in eng.seq_ids[1:]:
            eng.drop_seq(seq)
    w.state.unforked()
