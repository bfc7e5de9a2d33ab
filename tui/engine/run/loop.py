"""The loop, written once: sample (or force), stop on end of generation, feed back.

:func:`advance` is one turn for sequence 0: what :meth:`Engine.step` and the TUI's decode
worker run, on any :class:`~tui.engine.run.backend.Backend`. :func:`generate` repeats it for
``tokenstep trace``, ``tokenstep verify``, :meth:`Engine.generate` and the tests. It yields a
record once the token sampled from its logits is known, BEFORE that token is fed (so a caller
may still look at, or verify, the context the record left); the last sampled token is not
decoded unless ``decode_last``. With observation off the decode thread
(:meth:`Engine.observe_off_thread`) a record comes after that token's decode instead (its
views were computed beside it), just before the decode after it, so that what the caller
does with it (``tokenstep trace`` hands it to its writer thread) also runs beside a decode.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .step import Sampled, StepRecord

if TYPE_CHECKING:
    from .backend import Backend


@dataclass
class Advance:
    """One turn of the loop for sequence 0."""

    sampled: Sampled  # the token, the logits row and chain it came from, and their record
    record: StepRecord | None = None  # the decode that fed the token (None: not fed)
    stop: str | None = None  # why generation ended at this turn (the engine's stop_reason)

    @property
    def token(self) -> int:
        return self.sampled.token


def sample(engine: Backend, force: int | None = None) -> Advance:
    """Stages 5 and 6: sample (or take ``force``), note the pick on the record that produced
    the logits; an end-of-generation token stops the turn here."""
    sampled = engine.sample(force)
    return Advance(sampled, stop=engine.stop_reason if sampled.eog else None)


def feed(engine: Backend, turn: Advance) -> Advance:
    """Stage 7 for a turn that did not stop: decode its token (None with ``stop`` when the
    context is full and cannot shift)."""
    if turn.stop is None:
        turn.record = engine.feed(turn.token)
        if turn.record is None:
            turn.stop = engine.stop_reason
    return turn


def advance(engine: Backend, force: int | None = None) -> Advance:
    """One turn: sample (or force), stop on end of generation, feed."""
    return feed(engine, sample(engine, force))


def generate(
    engine: Backend,
    n_predict: int,
    prompt: list[int] | None = None,
    *,
    decode_last: bool = False,
) -> Iterator[StepRecord]:
    """Prefill ``prompt`` (if given), then sample up to ``n_predict`` tokens, yielding each
    record once it is complete (a record is complete when the token sampled from its logits
    is known). Each token is decoded except the last, which is only sampled (its K/V would be
    needed only for a token after it), unless ``decode_last``."""
    late = engine.overlap.threaded  # views computed during the next decode
    pending = engine.prefill(prompt) if prompt is not None else []
    ready: list[StepRecord] = []  # late: complete (a decode settled their views, decode.py)
    for i in range(max(n_predict, 0)):
        turn = sample(engine)
        yield from ready if late else pending  # late: handed on just before the next decode
        ready = []
        if not late:
            pending = []
        if i == n_predict - 1 and not decode_last:
            break
        rec = feed(engine, turn).record
        if rec is None:
            break
        if late:
            ready = pending
        pending = [rec]
    if late:
        engine.overlap.settle()
    yield from ready
    yield from pending
