"""Issue 5, claims 4 and 6 together: a context shift after a fork shifts every sequence, and
llama.cpp agrees with our KV mirror for each of them. Also: a new chat restarts the counter."""

from __future__ import annotations

import llama_cpp
import numpy as np

from tui.engine import SamplerSettings

PROMPT = "Here is a long list of random English words, one per line:"
N_CTX = 64


def config(**kw):
    return {"n_ctx": N_CTX, "context_full": "shift", "n_keep": 4, "flash_attn": "on", **kw}


def llama_pos(eng, seq: int) -> tuple[int, int]:
    mem = llama_cpp.llama_get_memory(eng.ctx)
    return (
        llama_cpp.llama_memory_seq_pos_min(mem, seq),
        llama_cpp.llama_memory_seq_pos_max(mem, seq),
    )


def test_forked_shift_moves_every_sequence_and_llama_cpp_agrees(make_engine):
    eng = make_engine(SamplerSettings(temp=1.0, seed=3), **config())
    prompt = eng.vocab.tokenize(PROMPT)
    eng.prefill(prompt)
    history = []
    while eng.n_past < N_CTX - 12:  # fork late: the shared prefix reaches past the window
        rec = eng.step()
        assert rec is not None, eng.stop_reason
        history.append(rec.call.tokens[0].id)
    at = eng.n_past
    assert eng.fork() == 1
    fed: dict[int, list[int]] = {0: list(history), 1: list(history)}
    rows: dict[int, list[np.ndarray]] = {0: [], 1: []}
    shift_step = None
    for i in range(24):
        before = {s: eng.kv.tokens(s) for s in (0, 1)}
        rec = eng.step_seqs()
        assert rec is not None, eng.stop_reason
        assert len(rec.rows) == 2  # both still live: one token each, one llama_decode
        assert not rec.kv_problems, rec.kv_problems
        for s in (0, 1):
            pos = eng.kv.positions(s)
            assert pos == list(range(len(pos)))  # each sequence closed up its gap
            assert llama_pos(eng, s) == (pos[0], pos[-1])  # llama.cpp's own view, per seq
            fed[s].append(rec.rows[s].token)
            rows[s].append(eng.seq_logits(s).copy())  # type: ignore[union-attr]
        if rec.shift is None:
            continue
        shift_step = i
        ev = rec.shift
        k, d = ev.n_keep, ev.n_discard
        assert ev.n_past == N_CTX and d == (N_CTX - k) // 2
        assert set(ev.by_seq) == {0, 1} and ev.forgotten == ev.by_seq[0]
        for s in (0, 1):
            assert [f.token for f in ev.by_seq[s]] == before[s][k : k + d]
            want = before[s][:k] + before[s][k + d :] + [rec.rows[s].token]
            assert eng.kv.tokens(s) == want
            assert rec.rows[s].pos == N_CTX - d  # the new token right after the moved ones
        # The cells both still share: the kept ones and the shared ones after the window.
        assert eng.kv.shared(0, 1) == k + (at - (k + d))
        assert eng.branches[1].fork_pos == at - d
    assert shift_step is not None, "the context never filled"
    assert fed[0][len(history) :] != fed[1][len(history) :]  # the two really diverged
    # Oracle: a one-sequence engine fed the same tokens shifts at the same step; with flash
    # attention its logits equal the forked sequence's bit for bit at the step of the shift.
    for s in (0, 1):
        one = make_engine(SamplerSettings(temp=1.0), **config(n_seq_max=1))
        one.prefill(prompt)
        for t in fed[s][: len(history)]:
            one.feed(t)
        for j, t in enumerate(fed[s][len(history) : len(history) + shift_step + 1]):
            rec1 = one.feed(t)
            assert rec1 is not None
            assert (rec1.shift is not None) == (j == shift_step)
            assert np.array_equal(one.logits, rows[s][j]), (s, j)


def test_new_chat_restarts_the_work_counter(make_engine):
    eng = make_engine(n_ctx=256)
    eng.prefill(eng.vocab.tokenize("The first chat"))
    eng.step()
    assert eng.work.with_cache > 0
    eng.reset()
    assert eng.work.with_cache == eng.work.without_cache == 0 and not eng.work.points
    prompt = eng.vocab.tokenize("A second chat")
    eng.prefill(prompt)
    snap = eng.work.snapshot()
    assert snap.with_cache == len(prompt) and snap.without_cache == len(prompt)
