"""Sequences: sampling one token per sequence, and forking the context into several.

Sequence 0 is the main text. :func:`fork` copies it (``llama_memory_seq_cp``) into a new
seq_id that sees the same cells; each sequence then samples from its own logits row with its
own seeded chain, and :func:`step_seqs` carries one token per sequence in ONE
``llama_decode``.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from ..model.errors import TokenstepError
from ..model.tokens import quoted
from ..record.run_record import Fork, Pick
from ..sampler.sampling import entropy_bits, softmax
from . import replay
from .batch import BatchToken, DecodeCall, ubatch_chunks
from .decode import decode
from .paths import drop, free_seqs, make_room
from .prompt import keep_in_order
from .shift import context_shift
from .step import Branch, Sampled, StepRecord

if TYPE_CHECKING:
    from ..sampler.chain_result import ChainResult
    from .parts import SequenceParts


def sample(engine: SequenceParts, seq: int, force: int | None = None) -> Sampled:
    """Stages 5 and 6 for one sequence: sample (or take ``force``) from its logits row with its
    own chain, note the pick on the record that produced the row, and check for an
    end-of-generation token (which stops that sequence)."""
    if seq == 0:
        if engine.logits is None or engine.logits_record is None:
            engine.ensure_logits()
        logits, record = engine.logits, engine.logits_record
    else:
        br = engine.branches[seq]
        if br.logits is None:
            raise TokenstepError(f"sequence {seq} has no logits.")
        logits, record = br.logits, br.record
    assert logits is not None
    return sample_row(engine, seq, logits, record, engine.kv.tokens(seq), force)


def sample_row(
    engine: SequenceParts,
    seq: int,
    logits: np.ndarray,
    record: int | None,
    history: list[int],
    force: int | None = None,
) -> Sampled:
    """The pick itself, from an explicit row: ``history`` is the context the row belongs to
    (what penalties and DRY see; the grammar sees this turn's part of it). A speculative
    verify samples each of its rows this way, the row's own context as history."""
    chain = engine.chain if seq == 0 else engine.branches[seq].chain
    settings = engine.settings if seq == 0 else replace(engine.settings, seed=chain.seed)
    generated = history[min(engine.gen_start, len(history)) :]  # the grammar's: this turn's
    if force is not None:
        if not 0 <= force < engine.info.n_vocab:
            raise TokenstepError(f"token id {force} is outside the vocabulary.")
        token = force
        result = chain.run(logits, settings, commit=False, history=history, generated=generated)
        if settings.grammar and not chain.grammar.allows(force):
            raise TokenstepError(
                f"token {quoted(engine.vocab.piece(force), force)} breaks the grammar here, "
                "so it cannot be forced."
            )
    else:
        result = chain.run(logits, settings, commit=True, history=history, generated=generated)
        token = result.selected
    eog = engine.vocab.is_eog(token)
    source = engine.records.get(record) if record is not None else None  # None: on disk
    if source is not None:
        source.note_pick(seq, token, result, eog, forced=force is not None, settings=settings)
    if eog:
        if seq == 0:
            engine.stopped("end of generation")
        else:
            engine.stopped("end of generation", seq)
    forced = force is not None
    args = (engine, seq, logits, source, token, result, len(history), forced, chain.seed, record)
    if seq == 0 and engine.overlap.threaded:  # p, entropy and the Pick while the next decode runs
        engine.overlap.submit(partial(note_pick, *args))
        return Sampled(seq, token, result, logits, source, forced, eog, None)
    engine.overlap.settle()  # the row's own views first: the pick's p reads them
    return Sampled(seq, token, result, logits, source, forced, eog, note_pick(*args))


def note_pick(
    engine: SequenceParts,
    seq: int,
    logits: np.ndarray,
    source: StepRecord | None,
    token: int,
    result: ChainResult,
    index: int,
    forced: bool,
    seed: int,
    record: int | None,
) -> float:
    """What a pick leaves beside its token: p (raw softmax) and the row's entropy, the run
    record's :class:`Pick` at context index ``index``; returns p."""
    p, entropy = pick_p(logits, source, token, seq)
    cuts = tuple((st.name, st.n) for st in result.stages)
    engine.run.note(  # the one place a pick's p, p', entropy are kept: the run chart reads it
        Pick(seq, index, token, p, result.p_final(token), entropy, forced, seed, cuts, record)
    )
    return p


def pick_p(
    logits: np.ndarray, source: StepRecord | None, token: int, seq: int = 0
) -> tuple[float, float]:
    """p of ``token`` under ``logits`` and the row's entropy in bits. The record that produced
    the row already holds its top candidates (with p) and entropy; only a token outside that
    top, or a record moved to disk, needs the full softmax."""
    if source is not None:
        row = source.rows.get(seq)
        top, entropy = (row.top, row.entropy) if row is not None else (source.top, source.entropy)
        p = next((c.p for c in top if c.id == token), None)
        if p is not None:
            return p, entropy
        return float(softmax(logits)[token]), entropy
    probs = softmax(logits)
    return float(probs[token]), entropy_bits(probs)


def fork(engine: SequenceParts, src: int = 0) -> int:
    """Copy sequence ``src`` into a new seq_id with ``llama_memory_seq_cp``: the new
    sequence sees the same cells (nothing is recomputed or copied in memory, the cells are
    tagged with both ids) and gets its own sampler chain, seeded with seed + seq_id."""
    engine.overlap.settle()
    if src != 0 and src not in engine.branches:
        raise TokenstepError(f"there is no sequence {src} to fork.")
    if engine.seq_logits(src) is None or engine.kv.count(src) == 0:
        raise TokenstepError("there is nothing to fork yet: send a prompt first.")
    n_seq_max = engine.config.n_seq_max
    if not free_seqs(engine) and engine.parked:  # a fork outranks a parked path
        drop(engine, next(iter(engine.parked)))
    free = free_seqs(engine)
    if not free:
        raise TokenstepError(f"this context holds at most {n_seq_max} sequences (n_seq_max).")
    if src == 0:  # the next step decodes one token per sequence in one call: keep the order
        keep_in_order(engine, len(engine.seq_ids) + 1)
    logits = engine.seq_logits(src)
    assert logits is not None
    dst = free[0]
    replay.seq_cp(engine.ctx, engine.replay, src, dst, -1, -1)
    engine.run.note(Fork(src, dst, engine.kv.count(src)))
    engine.kv.seq_cp(src, dst)
    record = engine.logits_record if src == 0 else engine.branches[src].record
    seed = (engine.settings.seed + dst) & 0xFFFFFFFF
    engine.branches[dst] = Branch(
        dst,
        src,
        engine.kv.last_pos(src) + 1,
        engine.new_chain(seed),
        logits,
        record,
    )
    return dst


def drop_seq(engine: SequenceParts, seq: int) -> None:
    """Forget a forked sequence: its own cells are freed, shared ones stay for the others."""
    engine.overlap.settle()
    br = engine.branches.pop(seq, None)
    if br is None:
        raise TokenstepError(f"there is no forked sequence {seq}.")
    replay.seq_rm(engine.ctx, engine.replay, seq, -1, -1)
    engine.kv.seq_rm(seq, 0, -1)
    br.chain.free()


def step_seqs(engine: SequenceParts, force: dict[int, int] | None = None) -> StepRecord | None:
    """One turn for every live sequence: each samples from its own logits row with its own
    chain, then ONE ``llama_decode`` carries one token per sequence (each with its own
    seq_id and position, all asking for logits). None when every sequence has stopped."""
    engine.overlap.settle()
    force = force or {}
    picks: list[tuple[int, int]] = []
    for seq in engine.seq_ids:
        if _stopped(engine, seq):
            continue
        sampled = sample(engine, seq, force.get(seq))
        if not sampled.eog:
            picks.append((seq, sampled.token))
    if not picks:
        return None
    shift, reason = None, "context full"
    if _full(engine, picks) and engine.config.context_full == "shift":
        shift = context_shift(engine)  # every sequence, one window
        reason = engine.stop_reason if shift is None and engine.stop_reason else reason
    make_room(engine, len(picks))
    if _full(engine, picks):
        engine.stopped(reason)
        for s, _ in picks:
            if s:
                engine.stopped(reason, s)
        return None
    tokens = [BatchToken(t, engine.kv.last_pos(s) + 1, (s,), True) for s, t in picks]
    call = DecodeCall(tokens, ubatch_chunks(len(tokens), engine.config.n_ubatch))
    return decode(engine, call, shift=shift, seq_rows=picks, purpose="forks")


def _full(engine: SequenceParts, picks: list[tuple[int, int]]) -> bool:
    """No room for one more token in some sequence (-c) or in the cache's cells."""
    return any(engine.kv.count(s) + 1 > engine.n_ctx for s, _ in picks) or (
        engine.kv.used + len(picks) > engine.n_cells
    )


def _stopped(engine: SequenceParts, seq: int) -> bool:
    if seq == 0:
        return engine.stop_reason is not None
    return engine.branches[seq].stop_reason is not None
