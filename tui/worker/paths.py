"""The paths not taken in the current turn: every rewind, force and fork leaves a branch.

A branch is the reply as it stood (its tokens after ``reply_start``) with each token's p, p'
and entropy. A rewound or forked branch keeps its KV cells in a parked sequence while a seq_id
is free (:mod:`tui.engine.run.paths`); a force leaves the sampler's own pick as a one-token branch
that was never decoded. :func:`jump` makes any branch the live reply again, from the parked
cells where llama.cpp still holds them and decoded again otherwise, and says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.model.errors import TokenstepError
from ..engine.record.run_record import Pick
from ..engine.run import paths
from ..engine.run.sequences import pick_p

if TYPE_CHECKING:
    from .parts import PathSession, WorkerParts
    from .state import PathBranch


def _reply(w: WorkerParts) -> tuple[int, list[int]]:
    start = w.state.reply_start
    if start is None:
        raise TokenstepError("there is no reply yet: send a message first.")
    return start, w.engine.tokens[start:]


def _add(
    w: WorkerParts,
    eng: PathSession,
    tokens: list[int],
    values: list[Pick | None],
    how: str,
    seq: int | None,
    keep: PathBranch | None = None,
) -> None:
    """Keep a branch unless a known one already contains it; drop those it contains, except
    ``keep`` (the path a jump is about to take: it stays, with its cells, until the jump
    takes it)."""
    s = w.state
    if not tokens:
        if seq is not None:
            paths.drop(eng, seq)
        return
    t = tuple(tokens)
    for b in s.paths:
        if b.tokens[: len(t)] == t:
            if seq is not None and b.seq is None and len(b.tokens) == len(t):
                b.seq = seq
            elif seq is not None:
                paths.drop(eng, seq)
            return
    for b in [b for b in s.paths if t[: len(b.tokens)] == b.tokens and b is not keep]:
        s.paths.remove(b)
        if b.seq is not None:
            paths.drop(eng, b.seq)
    s.add_path(t, tuple(values), how, seq)


def _park(w: WorkerParts, eng: PathSession, keep: int | None = None) -> int | None:
    """Park sequence 0, giving up the oldest branch's cells when every seq_id is taken (never
    those of ``keep``, the parked path a jump is about to take back: with no other seq_id the
    live reply is left without cells and is decoded again if it is wanted later). Only while
    the tree pane is showing: otherwise a rewind frees its cells as it always did, and a jump
    decodes the path again."""
    if not w.state.paths_shown:
        return None
    if not paths.free_seqs(eng):
        for b in w.state.paths:
            if b.seq is not None and b.seq != keep:
                paths.drop(eng, b.seq)
                b.seq = None
                break
    if not paths.free_seqs(eng):
        return None
    return paths.park(eng)


def leave_live(w: WorkerParts, how: str, keep: PathBranch | None = None) -> None:
    """The live reply becomes a branch (before a rewind or a jump), its cells parked (in a
    seq_id other than ``keep``'s, the jump's target, which stays a branch until taken)."""
    eng: PathSession | None = w.engine.local
    if eng is None:  # a server backend holds no sequences to park
        return
    start, tokens = _reply(w)
    if not tokens or any(b.tokens[: len(tokens)] == tuple(tokens) for b in w.state.paths):
        return
    seq = _park(w, eng, keep.seq if keep is not None else None)
    values = list(eng.run.picks_along(eng.tokens))[start:]
    _add(w, eng, tokens, values, how, seq, keep)


def leave_forks(w: WorkerParts, keep: PathBranch | None = None) -> None:
    """Every forked sequence becomes a parked branch instead of being dropped (``keep``: a
    jump's target, which stays a branch)."""
    eng: PathSession | None = w.engine.local
    if eng is None:  # a server backend holds no sequences to park
        return
    start = w.state.reply_start
    for seq in list(eng.branches):
        if start is None:
            eng.drop_seq(seq)
            continue
        if w.state.paths_shown:
            paths.park_fork(eng, seq)
            parked = eng.parked[seq]
            _add(w, eng, parked.tokens[start:], parked.values[start:], "fork", seq, keep)
            continue
        tokens = eng.kv.tokens(seq)
        values = list(eng.run.picks_along(tokens, seq))  # its own, and its parent's before it
        eng.drop_seq(seq)
        _add(w, eng, tokens[start:], values[start:], "fork", None, keep)
    w.state.unforked()


def leave_pick(w: WorkerParts, forced: int) -> None:
    """Before a force: the token the sampler would have picked is a one-token branch."""
    eng: PathSession | None = w.engine.local
    if eng is None:  # a server backend holds no sequences to park
        return
    if w.state.reply_start is None or eng.logits is None or eng.branches:
        return
    pick = eng.preview().selected
    if pick == forced or pick < 0:
        return
    start, tokens = _reply(w)
    source = eng.records.get(eng.logits_record) if eng.logits_record is not None else None
    p, entropy = pick_p(eng.logits, source, pick)
    chain = eng.preview()
    cuts = tuple((st.name, st.n) for st in chain.stages)
    # the pick the chain would have made: written to the record if a jump takes this path
    value = Pick(0, eng.n_past, pick, p, chain.p_final(pick), entropy, False, eng.chain.seed, cuts, eng.logits_record)
    values = list(eng.run.picks_along(eng.tokens))[start:]
    _add(w, eng, [*tokens, pick], [*values, value], "force", None)


def jump(w: WorkerParts, branch_id: int) -> None:
    """Make branch ``branch_id`` the live reply; the live one becomes a branch."""
    eng: PathSession | None = w.engine.local
    if eng is None:  # a server backend holds no sequences to park
        raise TokenstepError(w.engine.capabilities.missing("fork") or "no paths here.")
    s = w.state
    b = next((b for b in s.paths if b.id == branch_id), None)
    if b is None:
        raise TokenstepError(f"there is no path {branch_id} in this turn.")
    start, _ = _reply(w)
    if eng.branches:
        leave_forks(w, keep=b)
    leave_live(w, "jump", keep=b)  # b stays a branch even where the live reply contains it
    s.paths.remove(b)
    full = eng.tokens[:start] + list(b.tokens)
    got = paths.restore(eng, full, b.seq, [None] * start + list(b.values))
    if b.seq is not None and b.seq in eng.parked:
        paths.drop(eng, b.seq)  # sequence 0 now sees those cells itself
    eng.stopped(None)
    s.playback.pause()
    s.playback.reopen()
    s.ran("jump", (), unsaved=True)
    s.forget_step()
    if got.seq is not None:
        how = (
            f"{got.from_cache} token(s) replayed from the KV cache (sequence {got.seq}'s cells, "
            "llama_memory_seq_rm + llama_memory_seq_cp)"
        )
        if got.recomputed:
            how += f", {got.recomputed} decoded again for its logits"
        if got.reordered:
            how += (
                f", {got.reordered} decoded again to keep llama.cpp's cells in position order "
                "(the next token would have filled a freed cell under them)"
            )
    else:
        how = f"{got.recomputed} token(s) decoded again (llama.cpp no longer held their cells)"
    note = f"Path {b.id}: {how}."
    s.jumped(note)
    s.note(f"Jumped to {note[0].lower()}{note[1:]}")


def new_turn(w: WorkerParts) -> None:
    """A new message: the branches were of the last turn; their parked cells are freed."""
    eng: PathSession | None = w.engine.local
    if eng is None:  # a server backend holds no sequences to park
        return
    paths.drop_all(eng)
    w.state.new_turn()


# -- saved sessions ----------------------------------------------------------------------------
def to_json(w: WorkerParts) -> dict[str, Any]:
    return {
        "reply_start": w.state.reply_start,
        "branches": [
            {
                "id": b.id,
                "how": b.how,
                "tokens": list(b.tokens),
                "values": [None if v is None else value_json(v) for v in b.values],
            }
            for b in w.state.paths
        ],
    }


def value_json(v: Pick) -> dict[str, Any]:
    """A branch's pick as the session file keeps it: all but where it sits (the branch's
    tokens say that) and its record (records of another context mean nothing on resume)."""
    return {
        "p": v.p,
        "p_final": v.p_final,
        "entropy": v.entropy,
        "forced": v.forced,
        "seed": v.seed,
        "cuts": [[stage, n] for stage, n in v.cuts],
        "partial": v.partial,
    }


def value_from(v: list[Any] | dict[str, Any], index: int, token: int) -> Pick:
    """A saved pick (checked by ``resume.check_paths``). Format 1 kept ``[p, p', entropy]``
    only: its picks come back with seed -1 and no cuts."""
    if isinstance(v, list):
        return Pick(0, index, token, float(v[0]), v[1], float(v[2]), False, -1, (), None)
    return Pick(
        seq=0,
        index=index,
        token=token,
        p=float(v["p"]),
        p_final=None if v.get("p_final") is None else float(v["p_final"]),
        entropy=float(v["entropy"]),
        forced=v["forced"],
        seed=v["seed"],
        cuts=tuple((str(stage), int(n)) for stage, n in v["cuts"]),
        record=None,
        partial=bool(v.get("partial", False)),
    )


def from_json(w: WorkerParts, data: dict[str, Any] | None) -> int:
    """Branches of a saved session (their cells are gone: a jump decodes them again)."""
    eng: PathSession | None = w.engine.local
    if eng is None:  # a server backend holds no sequences to park
        return 0
    if not data or data.get("reply_start") != w.state.reply_start:
        return 0
    n_vocab = w.engine.info.n_vocab
    for d in data.get("branches", []):
        tokens = [int(t) for t in d.get("tokens", [])]
        if not tokens or any(not 0 <= t < n_vocab for t in tokens):
            continue
        raw = list(d.get("values", []))[: len(tokens)]
        raw += [None] * (len(tokens) - len(raw))
        start = w.state.reply_start or 0
        values = [
            None if v is None else value_from(v, start + j, t)
            for j, (t, v) in enumerate(zip(tokens, raw, strict=True))
        ]
        _add(w, eng, tokens, values, str(d.get("how", "rewind")), None)
    return len(w.state.paths)


# -- what the tree pane draws ------------------------------------------------------------------
@dataclass(frozen=True)
class PathRow:
    """One path of the turn, against the live reply: where it leaves it and with what."""

    id: int  # 0 for the live reply
    how: str  # "live", or what left it: "rewind", "force", "fork", "jump"
    at: int  # index in the reply of its first token that differs from the live reply
    parent: int  # the path it shares the longest prefix with (0: the live reply)
    pieces: tuple[bytes, ...]  # its tokens from ``at`` on
    p: float | None  # p of its token at ``at`` (None: not known)
    p_final: float | None
    n_tokens: int  # its length after reply_start
    cached: bool  # llama.cpp holds its cells: asked of llama.cpp (paths.holds), not remembered
    seq: int | None


@dataclass(frozen=True)
class PathsView:
    rows: tuple[PathRow, ...] = ()  # the live reply first, then the branches by branch point
    note: str | None = None  # how the last jump put its path back
    shown: bool = False  # rewinds park their cells (the pane is showing)
    free_seqs: int = 0  # seq_ids free for parking


def _row(
    eng: PathSession,
    start: int,
    id: int,
    how: str,
    tokens: tuple[int, ...],
    values: tuple[Pick | None, ...],
    others: list[tuple[int, tuple[int, ...]]],
    seq: int | None,
) -> PathRow:
    piece = eng.vocab.piece
    at, parent = 0, 0
    for oid, other in others:
        n = paths.common_prefix(list(tokens), list(other))
        if n > at or (n == at and oid == 0):
            at, parent = n, oid
    v = values[at] if at < len(values) else None
    held = paths.holds(eng, seq, eng.tokens[:start] + list(tokens))
    return PathRow(
        id,
        how,
        at,
        parent,
        tuple(piece(t) for t in tokens[at:]),
        None if v is None else v.p,
        None if v is None else v.p_final,
        len(tokens),
        held,
        seq if held else None,
    )


def paths_view(w: WorkerParts) -> PathsView:
    s = w.state
    eng: PathSession | None = w.engine.local
    if s.reply_start is None or eng is None:
        return PathsView(shown=s.paths_shown)
    start = s.reply_start
    live = tuple(eng.tokens[start:])
    branches = [b for b in s.paths if live[: len(b.tokens)] != b.tokens]  # not inside live
    rows = [
        PathRow(
            0, "live", 0, 0, tuple(eng.vocab.piece(t) for t in live), None, None, len(live), True, 0
        )
    ]
    known = [(0, live)]
    for b in sorted(branches, key=lambda b: b.id):
        rows.append(_row(eng, start, b.id, b.how, b.tokens, b.values, known, b.seq))
        known.append((b.id, b.tokens))
    rows[1:] = sorted(rows[1:], key=lambda r: (r.at, r.id))
    return PathsView(tuple(rows), s.path_note, s.paths_shown, len(paths.free_seqs(eng)))
