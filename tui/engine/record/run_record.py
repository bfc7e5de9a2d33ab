"""One record of the run: every ``llama_decode`` of the run's context, every pick with what it
had when it was sampled, every turn, fork, rewind, context shift, path taken back and new chat, in order.

The engine writes it where each act happens (:func:`tui.engine.run.decode.decode`,
``sequences.sample``, ``sync_prompt``, ``fork``, ``rewind``, ``context_shift``, ``reset``,
``spec_verify``'s round, the llama-server backend's request); the timeline, tab 0 and the run
chart (its p and p′), the surprise map and the header's context length read it. Observer and ``verify`` contexts write nothing: looking is not part of the run.
The newest :data:`KEEP` events stay as objects (a pick with four stages 0.9 kB, a decode
0.26 kB: about 4 MB at most), sequence 0's picks by context index, and totals as running
sums, so hours of play cost O(1) per event. Events are frozen and reads return tuples under
one lock, so a view built on the key lane sees a consistent copy.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field, fields, replace
from typing import Any

KEEP = 4096  # events kept as objects; totals count every event of the chat
TIMELINE_KEEP = 2048  # decode calls the timeline can draw; older ones are only counted


@dataclass(frozen=True, slots=True)
class Decode:
    """One ``llama_decode`` of the run's context. ``purpose``: "prompt" (a prefill chunk),
    "step", "verify", "forks" or "again" (cells decoded again to keep their order)."""

    record: int  # the engine's StepRecord index
    purpose: str
    phase: str  # the record's phase: "prefill", "decode", "verify"
    rows: int  # tokens in the batch
    ms: float  # measured llama_decode time (over llama-server: the server's prompt time)
    n_past: int | None = None  # sequence 0's cells after it (None: not said)


@dataclass(frozen=True, slots=True)
class Round:
    """A speculative round ended: the picks it emitted and what the drafter's own model cost."""

    record: int
    verify: bool  # False: nothing was drafted, a plain one-token decode ran
    emitted: int
    draft_decodes: int
    draft_ms: float


@dataclass(frozen=True, slots=True)
class Pick:
    """A token picked (or forced) for a sequence at context index ``index``, with what it had
    when it was sampled: p (raw softmax), p′ (after the chain; None where the chain left it
    out), the row's entropy, the chain's survivors after each stage and its seed."""

    seq: int
    index: int
    token: int
    p: float
    p_final: float | None
    entropy: float
    forced: bool
    seed: int
    cuts: tuple[tuple[str, int], ...]  # (stage, survivors after it), in chain order
    record: int | None  # the record whose logits row it was sampled from (None: on disk)
    # over llama-server: the row was the server's top K only, so p is the server's own
    # probability (a token outside the top K: the filled row's share of the rest) and the
    # entropy an upper bound; the screen says so
    partial: bool = False


@dataclass(frozen=True, slots=True)
class Turn:
    """A prompt made the context hold it: tokens found in the cache against those decoded."""

    reused: int
    computed: int
    prefill_ms: float
    records: tuple[int, int]  # [first, end) record indices of its prefill


@dataclass(frozen=True, slots=True)
class Fork:
    src: int
    dst: int
    at: int  # the source sequence's length


@dataclass(frozen=True, slots=True)
class Rewind:
    """Sequence 0's cells from ``n_past`` on left the cache (a rewind, a speculative round's
    rejected rows, a prompt that replaced the tail). Its picks at context index ``picks_from``
    and later go with them: ``n_past`` unless the pick waiting to be decoded (index
    ``n_past``) stays, or a tail decoded again as it was keeps all of its picks."""

    removed: int
    n_past: int  # sequence 0's length after it
    picks_from: int | None = None  # None: n_past


@dataclass(frozen=True, slots=True)
class Shift:
    n_keep: int
    n_discard: int
    before_record: int
    n_past: int | None = None  # sequence 0's cells after it (None: not said)


@dataclass(frozen=True, slots=True)
class Restore:
    """Sequence 0 took a parked sequence's cells back (``llama_memory_seq_cp``, a jump to a
    path not taken): no decode ran, its length changed."""

    seq: int
    n_past: int  # sequence 0's cells after it


@dataclass(frozen=True, slots=True)
class Clear:
    """A new chat: the context's memory was cleared; per-chat figures start again."""


Event = Decode | Round | Pick | Turn | Fork | Rewind | Shift | Restore | Clear


@dataclass(frozen=True)
class DecodeTotals:
    """Sums over every ``llama_decode`` of the chat, drawn or not."""

    prefill_calls: int = 0
    prefill_tokens: int = 0
    prefill_ms: float = 0.0
    decode_calls: int = 0
    decode_tokens: int = 0  # tokens emitted: a verify round's picks, not its batch's rows
    decode_ms: float = 0.0
    verify_calls: int = 0  # --spec-type: verify decodes among the decode calls
    draft_calls: int = 0  # draft-simple: the draft model's own llama_decode calls
    draft_ms: float = 0.0


def add(t: DecodeTotals, ev: Decode | Round) -> DecodeTotals:
    """The totals after one more event (a new frozen object)."""
    if isinstance(ev, Round):
        t = replace(t, draft_calls=t.draft_calls + ev.draft_decodes, draft_ms=t.draft_ms + ev.draft_ms)
        if ev.verify:  # the round emitted its picks; the rejected rows emit nothing
            t = replace(t, decode_tokens=t.decode_tokens + ev.emitted, verify_calls=t.verify_calls + 1)
        return t
    if ev.phase == "prefill":
        return replace(
            t,
            prefill_calls=t.prefill_calls + 1,
            prefill_tokens=t.prefill_tokens + ev.rows,
            prefill_ms=t.prefill_ms + ev.ms,
        )
    emitted = 0 if ev.phase == "verify" else ev.rows  # a verify's picks come with its Round
    return replace(
        t,
        decode_calls=t.decode_calls + 1,
        decode_tokens=t.decode_tokens + emitted,
        decode_ms=t.decode_ms + ev.ms,
    )


@dataclass
class _Chat:
    """The running figures of the chat since the last :class:`Clear`."""

    totals: DecodeTotals = DecodeTotals()
    decodes: deque[Decode] = field(default_factory=lambda: deque(maxlen=TIMELINE_KEEP))
    n_decodes: int = 0
    turns: deque[Turn] = field(default_factory=lambda: deque(maxlen=KEEP))
    n_turns: int = 0
    # by sequence, then context index: sequence 0's, and a fork's (its parent's copied at the
    # fork); at most n_seq_max x n_ctx picks
    picks: dict[int, dict[int, Pick]] = field(default_factory=lambda: {0: {}})
    n_past: int = 0  # sequence 0's cells, as the newest event that changed them says


class RunRecord:
    """The append-only record. Writers call :meth:`note`; readers get tuples and frozen
    objects."""

    def __init__(self, keep: int = KEEP) -> None:
        self.events: deque[Event] = deque(maxlen=max(1, keep))
        self.n = 0  # events ever noted (older ones are counted, not kept)
        self._chat = _Chat()
        self._lock = threading.Lock()

    def note(self, ev: Event) -> None:
        with self._lock:
            self.events.append(ev)
            self.n += 1
            chat = self._chat
            n_past = getattr(ev, "n_past", None)  # Decode, Rewind, Shift, Restore
            if n_past is not None:
                chat.n_past = n_past
            if isinstance(ev, Clear):
                self._chat = _Chat()
            elif isinstance(ev, Decode | Round):
                chat.totals = add(chat.totals, ev)
                if isinstance(ev, Decode):
                    chat.decodes.append(ev)
                    chat.n_decodes += 1
            elif isinstance(ev, Turn):
                chat.turns.append(ev)
                chat.n_turns += 1
            elif isinstance(ev, Pick):
                chat.picks.setdefault(ev.seq, {})[ev.index] = ev
            elif isinstance(ev, Fork):
                src = chat.picks.get(ev.src, {})
                chat.picks[ev.dst] = {k: p for k, p in src.items() if k < ev.at}
            elif isinstance(ev, Rewind):
                start = ev.n_past if ev.picks_from is None else ev.picks_from
                mine = chat.picks[0]
                for k in [k for k in mine if k >= start]:
                    del mine[k]
            elif isinstance(ev, Shift):
                for seq, picks in chat.picks.items():
                    moved: dict[int, Pick] = {}
                    for k, p in picks.items():
                        if k < ev.n_keep:
                            moved[k] = p
                        elif k >= ev.n_keep + ev.n_discard:
                            moved[k - ev.n_discard] = replace(p, index=k - ev.n_discard)
                    chat.picks[seq] = moved
            # the picks hold at most one pick per sequence and context index: bounded

    # -- readers: functions of the record -------------------------------------------------------
    def totals(self) -> DecodeTotals:
        return self._chat.totals

    def timeline(self) -> tuple[tuple[tuple[str, int, float], ...], DecodeTotals, int]:
        """(phase, rows, ms) of the chat's newest decode calls, the totals over all of them,
        and how many older calls are only counted."""
        with self._lock:
            chat = self._chat
            calls = tuple((d.phase, d.rows, d.ms) for d in chat.decodes)
            return calls, chat.totals, chat.n_decodes - len(calls)

    def turns(self) -> tuple[Turn, ...]:
        with self._lock:
            return tuple(self._chat.turns)

    def n_turns(self) -> int:
        return self._chat.n_turns

    def pick_at(self, index: int, token: int, seq: int = 0) -> Pick | None:
        """The sequence's pick at context index ``index`` if it is still ``token``."""
        got = self._chat.picks.get(seq, {}).get(index)
        return got if got is not None and got.token == token else None

    def picks_along(self, tokens: list[int], seq: int = 0) -> tuple[Pick | None, ...]:
        """One pick (or None) per token of ``tokens`` (the sequence's context, oldest first)."""
        with self._lock:
            picks = self._chat.picks.get(seq, {})
            got = [picks.get(i) for i in range(len(tokens))]
        return tuple(p if p is not None and p.token == t else None for p, t in zip(got, tokens, strict=True))

    def n_past(self) -> int:
        """Sequence 0's cells (the context's length): the header's ctx reads it."""
        return self._chat.n_past

    def n_picks(self) -> int:
        """Sequence 0's picks held now (a view's cheap change check, with :attr:`n`)."""
        return len(self._chat.picks[0])

    def recent(self) -> tuple[Event, ...]:
        with self._lock:
            return tuple(self.events)


def event_to_dict(ev: Event) -> dict[str, Any]:
    """An event as one JSON object: ``{"event": "pick", ...fields}``; the one serializer of
    the record (``trace --events`` writes these lines)."""
    d: dict[str, Any] = {"event": type(ev).__name__.lower()}
    for f in fields(ev):
        v = getattr(ev, f.name)
        d[f.name] = round(v, 6) if isinstance(v, float) else v
    if isinstance(ev, Pick):
        d["cuts"] = [list(c) for c in ev.cuts]
    if isinstance(ev, Turn):
        d["records"] = list(ev.records)
    return d

