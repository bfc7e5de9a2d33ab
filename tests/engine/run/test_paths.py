"""The paths not taken, in the engine: parked sequences keep an abandoned continuation's cells,
and restoring a path gives the same next distribution as a fresh context fed the same tokens
(the oracle: a second engine that never saw the other paths)."""

from __future__ import annotations

import numpy as np

from tests.support.greedy import PROMPT, greedy_reply
from tui.engine import SamplerSettings
from tui.engine.model import kv_order
from tui.engine.run import paths


def _fresh_logits(make_engine, tokens: list[int]) -> np.ndarray:
    fresh = make_engine(n_seq_max=1)
    fresh.prefill(tokens)
    assert fresh.logits is not None
    return fresh.logits.copy()


def _close(a: np.ndarray, b: np.ndarray) -> None:
    # one batched prefill against one-token decodes: float rounding only (verify shows ~1e-3)
    assert int(np.argmax(a)) == int(np.argmax(b))
    assert float(np.max(np.abs(a - b))) < 0.05


def test_a_parked_path_comes_back_from_the_cache(make_engine):
    eng = greedy_reply(make_engine, 4, 5)
    first = eng.tokens
    seq = paths.park(eng)
    assert seq == 1 and eng.parked[1].tokens == first
    eng.rewind(3)
    eng.step(force=eng.vocab.tokenize(" Berlin")[0])
    eng.step()
    assert eng.tokens != first
    assert not eng.kv.check(eng.ctx)
    got = paths.restore(eng, first, seq)
    assert got.seq == 1 and got.recomputed == 0 and got.from_cache == 3
    assert eng.tokens == first and not eng.kv.check(eng.ctx)
    assert eng.logits is not None
    _close(eng.logits, _fresh_logits(make_engine, first))
    # and a step from there decodes on top of the parked cells
    rec = eng.step()
    assert rec is not None and not rec.kv_problems


def test_a_path_whose_cells_are_gone_is_recomputed(make_engine):
    eng = greedy_reply(make_engine, 1, 4)  # no seq_id to park in
    first = eng.tokens
    assert paths.park(eng) is None
    eng.rewind(2)
    eng.step(force=eng.vocab.tokenize(" and")[0])
    got = paths.restore(eng, first)
    assert got.seq is None and got.from_cache == 0 and got.recomputed == 2
    assert eng.tokens == first and not eng.kv.check(eng.ctx)
    assert eng.logits is not None
    _close(eng.logits, _fresh_logits(make_engine, first))


def test_a_token_decoded_again_after_parking_is_not_kept_twice(make_engine):
    """Seq 0 re-decodes the parked path's own next token: that new cell sits at the same
    position as the parked one, so restoring drops it and takes the parked cells."""
    eng = greedy_reply(make_engine, 2, 4)
    first = eng.tokens
    seq = paths.park(eng)
    eng.rewind(3)
    eng.step()  # greedy: the same token as before, in a new cell
    got = paths.restore(eng, first, seq)
    assert eng.tokens == first and not eng.kv.check(eng.ctx)
    assert got.from_cache + got.recomputed == 3
    assert len(eng.kv.positions(0)) == len(set(eng.kv.positions(0)))


def test_a_fork_becomes_a_parked_path(make_engine):
    eng = make_engine(SamplerSettings(temp=0.9, seed=3), n_seq_max=3)
    eng.prefill(eng.vocab.tokenize(PROMPT))
    eng.step()
    dst = eng.fork(0)
    for _ in range(3):
        eng.step_seqs()
    fork_tokens = eng.kv.tokens(dst)
    paths.park_fork(eng, dst)
    assert dst in eng.parked and not eng.branches
    vals = eng.parked[dst].values
    assert all(v is not None for v in vals[-3:])
    got = paths.restore(eng, fork_tokens, dst)
    # The fork's three cells alternate with sequence 0's, which the restore freed: three holes
    # under them, and the next one-token step would fill the lowest (llama.cpp searches from
    # cell 0 once 2 x n_tokens cells are free below its head). So the three are decoded again,
    # in position order, and the parked cells give nothing.
    assert (got.from_cache, got.recomputed, got.reordered) == (0, 0, 3)
    assert eng.tokens == fork_tokens
    pos = kv_order.read_positions(eng.ctx, 0)
    assert pos == sorted(pos) == eng.kv.positions(0)
    assert eng.logits is not None
    _close(eng.logits, _fresh_logits(make_engine, fork_tokens))
