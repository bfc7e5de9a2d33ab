"""Prefill and the prefix cache: putting a prompt into the context.

A prompt is decoded in as few ``llama_decode`` calls as ``-b`` allows (each split into ``-ub``
ubatches by llama.cpp); only its last token asks for logits. A new prompt that starts like
the cached one re-uses the common prefix's cells and decodes only the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import kv_order
from ..model.errors import ContextFullError, TokenstepError
from ..record.run_record import Rewind, Turn
from ..record.surprise import Surprise, score_rows
from ..sampler.sampling import entropy_bits, softmax
from . import replay
from .batch import plan_prompt
from .decode import decode
from .step import PrefillTurn, StepRecord

if TYPE_CHECKING:
    from .parts import PromptParts


def prefill(engine: PromptParts, tokens: list[int], *, reused: int = 0) -> list[StepRecord]:
    """Decode a prompt (after what is already in the context), split into n_batch calls."""
    engine.overlap.settle()
    if not tokens:
        raise TokenstepError("the prompt is empty: there is nothing to decode.")
    n_past, n_ctx = engine.n_past, engine.n_ctx
    if n_past + len(tokens) > n_ctx:
        raise ContextFullError(
            f"the prompt needs {n_past + len(tokens)} tokens but the context holds "
            f"{n_ctx}; use a larger -c or a shorter prompt."
        )
    engine.stopped(None)
    if n_past == 0:
        engine.first_prompt(len(tokens))
    again = _take_back(engine, len(tokens), merged=True)
    if again:
        tokens, reused = again + tokens, min(reused, engine.n_past)
    return _decode_prompt(engine, tokens, reused)


def keep_in_order(engine: PromptParts, n_new: int = 0) -> int:
    """Before ``n_new`` tokens of sequence 0 are decoded one by one (0: none, after cells were
    copied in): decode its tail again first when they would otherwise land out of position
    order (see :mod:`tui.engine.model.kv_order`). Returns how many tokens were decoded again."""
    again = _take_back(engine, n_new, merged=False)
    if again:
        _decode_prompt(engine, again, engine.n_past)
    return len(again)


def _take_back(engine: PromptParts, n_new: int, *, merged: bool) -> list[int]:
    """Remove the tail of sequence 0 that must be decoded again to keep its cells in
    position order; returns its tokens. The same tokens come back at the same indices, so
    their picks (the pending one's too: it is not decoded yet) and scores stay."""
    if engine.branches:  # forks share sequence 0's cells: decoding it again would unshare
        return []
    cfg = engine.config
    k = kv_order.keep_from(engine.kv, n_new, cfg.n_batch, cfg.n_ubatch, merged=merged)
    if k is None:
        return []
    engine.overlap.settle()  # the pending pick's value is read below
    tokens = engine.tokens
    truncate(engine, k, picks_from=len(tokens) + 1)
    return tokens[k:]


def _decode_prompt(engine: PromptParts, tokens: list[int], reused: int) -> list[StepRecord]:
    n_past = engine.n_past
    cfg = engine.config
    score = engine.score_prompt
    if score:
        _score_first(engine, tokens[0])
    calls = plan_prompt(tokens, n_past, (0,), cfg.n_batch, cfg.n_ubatch, all_logits=score)
    recs = []
    start = 0
    for i, call in enumerate(calls):
        rec = decode(
            engine,
            call,
            phase="prefill" if call.n_tokens > 1 else "decode",
            chunk=(i + 1, len(calls)),
            reused=reused,
            has_logits=i == len(calls) - 1,
            purpose="prompt",
        )
        if score:
            _score_call(engine, tokens, start, n_past, call.n_tokens)
            rec.scored_rows = call.n_tokens - (1 if i == len(calls) - 1 else 0)
        start += call.n_tokens
        recs.append(rec)
    return recs


def _score_first(engine: PromptParts, token: int) -> None:
    """The prompt's first new token, scored from the logits row the context already holds
    for its last position (kept by the rewind memory), when there is one."""
    logits = engine.logits
    if logits is None or engine.n_past == 0 or engine.run.pick_at(engine.n_past, token):
        return  # nothing to score from, or the token was picked there (its p' is kept)
    p = softmax(logits)
    engine.surprise.note(
        engine.n_past, Surprise(token, float(p[token]), None, entropy_bits(p), True)
    )


def _score_call(engine: PromptParts, tokens: list[int], start: int, n_past: int, n: int) -> None:
    """Every row of a prompt chunk decoded with all logits: row j scores the token after it."""
    targets = [tokens[start + j + 1] if start + j + 1 < len(tokens) else None for j in range(n)]
    scores = score_rows(engine.ctx, n, targets, engine.info.n_vocab)
    for j, got in enumerate(scores):
        t = targets[j]
        idx = n_past + start + j + 1
        if got is not None and t is not None and engine.run.pick_at(idx, t) is None:
            engine.surprise.note(idx, Surprise(t, got[0], None, got[1], True))


def sync_prompt(engine: PromptParts, tokens: list[int], *, reuse: bool = True) -> list[StepRecord]:
    """Make the context hold exactly ``tokens``, re-using the longest common prefix already
    cached (prompt/prefix caching) and prefilling only the rest."""
    engine.overlap.settle()
    common = 0
    if reuse:
        have = engine.tokens
        limit = min(len(have), len(tokens))
        while common < limit and have[common] == tokens[common]:
            common += 1
        # At least one token must be decoded to get logits for the prompt's last position.
        common = min(common, len(tokens) - 1)
    truncate(engine, common)
    recs = prefill(engine, tokens[common:], reused=common)
    computed = sum(r.call.n_tokens for r in recs)  # more when cells had to be put in order
    turn = PrefillTurn(
        reused=len(tokens) - computed,
        computed=computed,
        prefill_ms=sum(r.decode_ms for r in recs),
        records=(recs[0].index, recs[-1].index + 1),
        scored_rows=sum(r.scored_rows for r in recs),
    )
    engine.turns.append(turn)
    engine.run.note(Turn(turn.reused, turn.computed, turn.prefill_ms, turn.records))
    return recs


def truncate(engine: PromptParts, n_keep: int, *, picks_from: int | None = None) -> None:
    """Keep the first ``n_keep`` tokens of sequence 0 (``llama_memory_seq_rm``); the logits of
    the new last position come back from the rewind memory when it still holds them. The
    record drops the picks from context index ``picks_from`` on (default ``n_keep``: the
    removed tokens'; ``n_keep + 1`` keeps the pick waiting to be decoded, as a speculative
    round's cut does; past the end keeps every pick, for a tail decoded again as it was)."""
    engine.overlap.settle()
    n_past = engine.n_past
    if n_keep >= n_past:
        return
    positions = engine.kv.positions(0)
    p0 = positions[n_keep] if n_keep < len(positions) else 0
    if n_keep == 0 and not engine.branches and not engine.parked:
        replay.clear(engine.ctx, engine.replay)
        engine.kv.clear()
    else:
        if not replay.seq_rm(engine.ctx, engine.replay, 0, p0, -1):
            raise TokenstepError("llama.cpp could not remove tokens from the KV cache.")
        engine.kv.seq_rm(0, p0, -1)
    engine.logits_memory.truncate(n_keep)
    scores_from = n_keep if picks_from is None else picks_from
    engine.surprise.truncate(scores_from)
    engine.run.note(Rewind(n_past - n_keep, n_keep, picks_from))
