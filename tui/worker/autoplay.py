"""Autoplay on the overlap design: between two decodes the decode thread picks, notes, feeds.

While a reply autoplays on a local session, the engine's observation runs on its own thread
(:mod:`tui.engine.run.overlap`): each row's top candidates and entropy, each pick's p and the run
record's ``Pick``, and here also the logits pane's last pick (:func:`note_last_pick`), are
computed while the next ``llama_decode`` runs. The view is not built between decodes either:
the decode thread only says one is owed, and the key lane's thread builds it while the next
``llama_decode`` runs, under the state lock the decode thread lends (:mod:`.key_lane`), once
the observation thread has run every job given so far (:func:`observed`). Nothing else
touches the session then, so a view never reads half a record; and no thread but the decode
thread touches the llama context.

Everything else runs as before: the decode thread settles the observation and takes it back
(:func:`inline`) before a command, a view of its own, an ended reply's autosave and shutdown,
so a step in step mode, a rewind or a save reads complete records at once. A run whose views
replay an observer context (attention, the lens, the scored prompt: their replays belong to
the decode thread), a forked run and speculative rounds keep the whole step on the decode
thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.sampler.sampling import softmax
from .state import LastPick

if TYPE_CHECKING:
    from ..engine.run.step import Sampled
    from ..engine.sampler.sampling import SamplerSettings
    from .parts import WorkerParts


def eligible(w: WorkerParts) -> bool:
    """A step whose views need nothing from the decode thread: a local session that no decode
    observer watches, no observer context, one sequence, no speculative rounds."""
    local = w.engine.local
    return (
        local is not None
        and not local.observers
        and w.observers.ctx is None
        and w.spec is None
        and len(local.seq_ids) == 1
    )


def begin(w: WorkerParts) -> None:
    """Before an autoplay step (decode thread): observation off this thread when the step may
    have it, else back on it."""
    local = w.engine.local
    if local is not None and eligible(w):
        local.overlap.start()
    else:
        inline(w)


def threaded(w: WorkerParts) -> bool:
    local = w.engine.local
    return local is not None and local.overlap.threaded


def inline(w: WorkerParts) -> None:
    """Decode thread: every record complete (a job's error is raised here), observation back
    on this thread."""
    local = w.engine.local
    if local is None:
        return
    try:
        local.overlap.settle()
    finally:
        local.overlap.stop()


def observed(w: WorkerParts) -> bool:
    """From a thread other than the decode thread, while its ``llama_decode`` runs: wait until
    the observation thread has run every job given so far. False when one failed (the decode
    thread says so at its next settle; until then nothing reads the records)."""
    local = w.engine.local
    return local is None or local.overlap.wait()


def note_last_pick(w: WorkerParts, sp: Sampled, settings: SamplerSettings) -> None:
    """The logits pane's last pick: now, or (observation off the thread) as the observation
    thread's job after the pick's own, while the next decode runs. ``settings``: the ones
    the pick ran with (a key on the lane may replace them meanwhile)."""
    if sp.p is None and threaded(w):
        local = w.engine.local
        assert local is not None
        local.overlap.submit(lambda: w.state.note_pick(last_pick(w, sp, settings)))
    else:
        w.state.note_pick(last_pick(w, sp, settings))


def last_pick(w: WorkerParts, sp: Sampled, settings: SamplerSettings) -> LastPick:
    p, p_final = pick_probabilities(sp)
    piece = w.engine.vocab.piece(sp.token)
    return LastPick(
        sp.token,
        piece,
        p,
        p_final,
        sp.forced,
        sp.eog,
        settings.is_greedy,
        settings.seed,
        settings.mirostat,
    )


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
