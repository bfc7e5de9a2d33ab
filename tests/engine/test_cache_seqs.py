"""Issue 5, claim 6: sequences keep their K/V apart. Fork, then both in one batch per step."""

from __future__ import annotations

import numpy as np
import pytest

from tui.engine import SamplerSettings

PROMPT = "My favourite thing about autumn is"
SEED = 11


def single(make_engine, seed, fa, n):
    """The oracle: a plain one-sequence engine with the given seed, stepped n times."""
    eng = make_engine(SamplerSettings(temp=0.9, seed=seed), n_ctx=256, flash_attn=fa, n_seq_max=1)
    eng.prefill(eng.vocab.tokenize(PROMPT))
    logits = [eng.logits.copy()]
    picks = []
    for _ in range(n):
        tok = eng.sample().token
        picks.append(tok)
        if eng.vocab.is_eog(tok):
            break
        eng.feed(tok)
        logits.append(eng.logits.copy())
    return picks, logits


def test_fork_runs_two_sequences_in_one_decode_each_like_its_own_engine(make_engine):
    """With flash attention on, a batch row of one sequence goes through the same kernels as
    a one-token decode, and the mask hides the other sequence's cells completely, so each
    sequence's logits equal, bit for bit, those of an engine that only ever saw that
    sequence. (With -fa off, llama.cpp's matrix kernels for a 2-row batch round differently
    from its one-row kernels: the numbers would then differ in the last bits.)"""
    n = 10
    eng = make_engine(SamplerSettings(temp=0.9, seed=SEED), n_ctx=256, flash_attn="on")
    prompt = eng.vocab.tokenize(PROMPT)
    eng.prefill(prompt)
    assert eng.fork() == 1
    assert eng.kv.shared(0, 1) == len(prompt) == eng.kv.used  # copied by tagging, not by bytes
    assert eng.branches[1].seed == SEED + 1
    got: dict[int, list[int]] = {0: [], 1: []}
    rows: dict[int, list[np.ndarray]] = {0: [eng.logits.copy()], 1: [eng.branches[1].logits]}
    for _ in range(n):
        rec = eng.step_seqs()
        if rec is None:
            break
        assert len(rec.call.tokens) == len({t.seq_ids for t in rec.call.tokens})  # one decode
        assert {t.seq_ids for t in rec.call.tokens} <= {(0,), (1,)}
        assert not rec.kv_problems, rec.kv_problems  # llama.cpp's seq_pos_min/max agree
        for s, row in rec.rows.items():
            got[s].append(row.token)
            rows[s].append(eng.seq_logits(s).copy())  # type: ignore[union-attr]
    for s, seed in ((0, SEED), (1, SEED + 1)):
        picks, logits = single(make_engine, seed, "on", n)
        m = len(got[s])
        assert got[s] == picks[:m]  # its own sampler state: the same picks as alone
        for a, b in zip(rows[s], logits, strict=False):
            assert np.array_equal(a, b)
        assert eng.kv.tokens(s) == prompt + got[s]
        assert eng.kv.positions(s) == list(range(len(prompt) + m))
    assert got[0] != got[1]  # two different continuations
    # the shared prompt cells are tagged with both, each sequence's own cells with one
    assert eng.kv.shared(0, 1) == len(prompt)
    assert eng.kv.used == len(prompt) + len(got[0]) + len(got[1])


def test_mask_is_per_sequence(make_engine):
    eng = make_engine(SamplerSettings(temp=0.9, seed=SEED), n_ctx=256)
    prompt = eng.vocab.tokenize(PROMPT)
    eng.prefill(prompt)
    eng.fork()
    rec = eng.step_seqs(force={0: 11, 1: 22})
    assert rec is not None
    p = len(prompt)
    mask = eng.kv.mask([(t.seq_ids[0], t.pos) for t in rec.call.tokens])
    # rows: seq 0's new token, seq 1's new token; columns: prompt cells, then the two new cells
    assert mask.shape == (2, p + 2)
    assert mask[:, :p].all()  # both see the shared prefix
    assert list(mask[0, p:]) == [True, False] and list(mask[1, p:]) == [False, True]
    assert eng.kv.tokens(0)[-1] == 11 and eng.kv.tokens(1)[-1] == 22


def test_drop_a_fork_frees_only_its_own_cells(make_engine):
    eng = make_engine(SamplerSettings(temp=0.9, seed=SEED), n_ctx=256)
    prompt = eng.vocab.tokenize(PROMPT)
    eng.prefill(prompt)
    eng.fork()
    for _ in range(3):
        eng.step_seqs(force={0: 11, 1: 22})
    eng.drop_seq(1)
    assert eng.kv.seq_ids() == [0] and eng.kv.used == len(prompt) + 3
    assert not eng.kv.check(eng.ctx)
    assert eng.step() is not None  # the single-sequence loop goes on as before


def test_fork_needs_room_for_a_second_sequence(make_engine):
    from tui.engine import TokenstepError

    eng = make_engine(n_ctx=256, n_seq_max=1)
    eng.prefill(eng.vocab.tokenize(PROMPT))
    with pytest.raises(TokenstepError, match="n_seq_max"):
        eng.fork()
