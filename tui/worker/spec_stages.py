"""The `.` key (``--spec-type``): the last draft-verify round replayed stage by stage.

The round itself was one ``llama_decode`` (:meth:`tui.engine.speculative.spec_verify.Speculator.round`);
these stages are a reading of its record, in the order the round ran them: 1 the draft (its
tokens, and where they came from), 2 the verify batch (k + 1 rows, logits on every row, the
decode's ms), 3 the accept (row by row, the target's pick against the draft, up to the first
mismatch), 4 the cut (the rejected rows' cells that ``llama_memory_seq_rm`` removed, in the
target's cache and in the draft model's). Each stage goes to the notice and lights the
pipeline stages it stands for; nothing is decoded again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.model.tokens import quoted
from .stages import BATCH, DECODE, DETOKENIZE, FEED_BACK, LOGITS, SAMPLE

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..engine.run.step import SpecInfo, StepRecord
    from .parts import WorkerParts

    Piece = Callable[[int], bytes]

N_STAGES = 4
SHOWN = 8  # drafted tokens / accept rows a notice spells out (the rest are counted)
LIT = ((), (BATCH, DECODE, LOGITS), (SAMPLE, DETOKENIZE), (FEED_BACK,))


def last_round(w: WorkerParts, keys: str) -> tuple[StepRecord | None, str]:
    """The last round's record while it is still the newest decode (a reply that ended on it
    included), or the true sentence why there is none: spec off, no round yet, or a later step
    that drafted nothing (the waiting pick decoded alone, a forced token, a new prompt)."""
    run = w.spec
    if run is None:
        return None, f"No round to look at: {keys} (--spec-type)."
    rec = run.record
    if rec is None or rec.spec is None:
        return None, f"No round yet: {keys}; a step in a reply runs one."
    newest = w.engine.records[-1] if w.engine.records else None
    if newest is None or newest.index != rec.index:
        return None, (
            f"The last step drafted nothing: it was a plain decode after the round ({keys} "
            "only until the next step)."
        )
    return rec, ""


def next_stage(w: WorkerParts) -> None:
    """Advance the stage cursor over the last round (after the fourth: the first again)."""
    run, s = w.spec, w.state
    rec, why = last_round(w, ". walks a draft-verify round's stages")
    if run is None or rec is None or rec.spec is None:
        s.note(why)
        return
    if not rec.spec.draft:
        s.note("The last step drafted nothing: it was one plain one-token decode, no stages.")
        return
    stage = 0 if run.stage is None else (run.stage + 1) % N_STAGES
    run.show_stage(stage)
    piece = w.engine.vocab.piece
    text = (_draft, _verify, _accept, _cut)[stage](rec, rec.spec, piece, _plain_ms(run.plain_ms))
    s.light(LIT[stage])
    s.note(f"Round stage {stage + 1}/{N_STAGES} · {text}")


def _q(piece: Piece, tok: int) -> str:
    return quoted(piece(tok), tok)


def _some(ids: list[int], piece: Piece) -> str:
    shown = " ".join(_q(piece, t) for t in ids[:SHOWN])
    return shown + (f" … (+{len(ids) - SHOWN})" if len(ids) > SHOWN else "")


def _plain_ms(ms: list[float]) -> float | None:
    return sum(ms) / len(ms) if ms else None


def _draft(rec: StepRecord, sp: SpecInfo, piece: Piece, plain: float | None) -> str:
    k = len(sp.draft)
    if sp.source is not None:
        where = (
            f"copied from context tokens {sp.source}–{sp.source + k - 1}, the continuation of "
            "the latest earlier occurrence of the newest n-gram (no llama_decode)"
        )
    elif sp.draft_decodes:
        where = (
            f"drafted greedily by the draft model in {sp.draft_decodes} llama_decode call(s) "
            f"of its own, {sp.draft_ms:.2f} ms"
        )
    else:
        where = "drafted without a decode"
    return f"draft ({sp.type}): {k} token(s) {_some(sp.draft, piece)}, {where}."


def _verify(rec: StepRecord, sp: SpecInfo, piece: Piece, plain: float | None) -> str:
    toks = rec.call.tokens
    n_logits = sum(t.logits for t in toks)
    vs = f"; a one-token decode in this run: {plain:.2f} ms mean" if plain is not None else ""
    return (
        f"verify batch: ONE llama_decode of {len(toks)} tokens (the waiting pick "
        f"{_q(piece, toks[0].id)} + {len(toks) - 1} drafted) at pos {toks[0].pos}–"
        f"{toks[-1].pos}, logits on {n_logits} of {len(toks)} rows, {rec.decode_ms:.2f} ms{vs}."
    )


def _accept(rec: StepRecord, sp: SpecInfo, piece: Piece, plain: float | None) -> str:
    parts = []
    for i, pick in enumerate(sp.picks[:SHOWN]):
        if i < len(sp.draft):
            d = sp.draft[i]
            mark = "= draft ✓" if d == pick else f"≠ draft {_q(piece, d)} ✗ first mismatch"
        else:
            mark = "(one more: every draft token accepted)"
        parts.append(f"row {i} picks {_q(piece, pick)} {mark}")
    more = f"; … {len(sp.picks) - SHOWN} more rows" if len(sp.picks) > SHOWN else ""
    return (
        f"accept: the target's chain samples row by row: {'; '.join(parts)}{more}. Accepted "
        f"{sp.accepted} of {len(sp.draft)}, the round emitted {len(sp.picks)}."
    )


def _cut(rec: StepRecord, sp: SpecInfo, piece: Piece, plain: float | None) -> str:
    gone = rec.call.tokens[len(sp.picks) :]
    if gone:
        cut = (
            f"llama_memory_seq_rm(seq 0, {gone[0].pos}, -1) removed {sp.removed} cell(s), "
            f"pos {gone[0].pos}–{gone[-1].pos} ({_some([t.id for t in gone], piece)}), "
            "marked ✕ in the KV grid (tab 4)"
        )
    else:
        cut = "nothing to cut: every row's token was kept"
    if sp.source is not None:
        draft = "ngram-simple has no cache of its own"
    else:
        draft = f"the draft model's cache cut {sp.draft_removed} cell(s) to the same length"
    return (
        f"cut the cache: {cut}; {draft}. The cache holds {rec.kv_used} cells; the last pick "
        f"{_q(piece, sp.picks[-1])} waits as the next batch's first token."
    )
