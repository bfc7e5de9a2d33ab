"""Attention weights captured from the real model's graph, checked against the model itself."""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from tui.engine import Engine, EngineConfig, SamplerSettings, TokenstepError
from tui.engine.observe.attention_capture import AttentionCapture, find_capture, parse_layers
from tui.engine.observe.attention_map import context_attention, top_attended

SENTENCE = "The cat sat on the mat because it was tired."
LAYER = 5


@pytest.fixture
def attn_engine(model):
    made: list[Engine] = []

    def make(cap: AttentionCapture | None, **config: object) -> Engine:
        cfg = EngineConfig(**{"n_ctx": 512, "n_threads": 2, **config})  # type: ignore[arg-type]
        eng = Engine(model, cfg, SamplerSettings(temp=0.0), observers=[cap] if cap else [])
        made.append(eng)
        return eng

    yield make
    for e in made:
        e.close()


def _qk(cap: AttentionCapture, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """Q (n_tokens, n_head, d) and K (n_tokens, n_head_kv, d) of the last decode, after RoPE."""
    q = np.concatenate([a[0] for a in cap.captured[f"Qcur-{layer}"]], axis=0)
    k = np.concatenate([a[0] for a in cap.captured[f"Kcur-{layer}"]], axis=0)
    return q, k


def _reference(
    q: np.ndarray,
    q_pos: list[int],
    k: np.ndarray,
    k_pos: list[int],
    head_dim: int,
    kv_head_of,
) -> np.ndarray:
    """softmax(Q·Kᵀ·scale + causal mask) from scratch. The K cache is f16 and ggml's matmul
    converts Q to f16 for it, so both are rounded to f16 first."""
    q16 = q.astype(np.float16).astype(np.float64)
    k16 = k.astype(np.float16).astype(np.float64)
    n_head = q.shape[1]
    scale = 1.0 / np.sqrt(head_dim)
    mask = np.where(np.array(k_pos)[None, :] <= np.array(q_pos)[:, None], 0.0, -np.inf)
    out = np.empty((n_head, len(q_pos), len(k_pos)))
    for h in range(n_head):
        s = q16[:, h, :] @ k16[:, kv_head_of(h), :].T * scale + mask
        s = np.exp(s - s.max(axis=1, keepdims=True))
        out[h] = s / s.sum(axis=1, keepdims=True)
    return out


def test_rows_sum_to_one_and_future_is_exactly_zero(model, attn_engine):
    n_layer = model.info.n_layer
    cap = AttentionCapture(n_layer, range(n_layer))
    eng = attn_engine(cap)
    recs = eng.prefill(eng.vocab.tokenize(SENTENCE))
    recs.append(eng.step())
    recs.append(eng.step())
    for rec in recs:
        att = rec.extras["attention"]
        assert sorted(att) == list(range(n_layer))
        assert "attention_problems" not in rec.extras
        q_pos = np.array([t.pos for t in rec.call.tokens])
        k_pos = np.array(rec.extras["attention_keys"]["pos"])
        future = k_pos[None, :] > q_pos[:, None]
        for w in att.values():
            assert w.shape == (model.info.n_head, len(q_pos), len(k_pos))
            np.testing.assert_allclose(w.sum(axis=2), 1.0, atol=1e-3)
            assert np.all(w[:, future] == 0.0)  # the causal mask, in the data itself
            assert np.all(w[:, ~future] > 0.0)
    # The prefill really had a future to hide: 11 tokens, a lower-triangular pattern.
    assert recs[0].call.n_tokens > 5


def test_weights_equal_numpy_softmax_of_captured_q_k(model, attn_engine):
    info = model.info
    assert (info.n_head, info.n_head_kv) == (9, 3)  # SmolLM2: 3 query heads per KV head
    cap = AttentionCapture(info.n_layer, [LAYER], capture=(f"Qcur-{LAYER}", f"Kcur-{LAYER}"))
    cap.census_on = True
    eng = attn_engine(cap)
    group = info.n_head // info.n_head_kv
    gqa = lambda h: h // group  # noqa: E731  (ggml broadcasts K head h // group to query head h)
    wrong = lambda h: h % info.n_head_kv  # noqa: E731

    rec = eng.prefill(eng.vocab.tokenize(SENTENCE))[-1]
    # The last node named Qcur-<layer> / Kcur-<layer> is the one after RoPE.
    nodes = cap.last_census.layer_nodes if cap.last_census else []
    assert [n for n in nodes if n.startswith("Qcur-0:")][-1] == "Qcur-0:ROPE"
    assert [n for n in nodes if n.startswith("Kcur-0:")][-1] == "Kcur-0:ROPE"
    q, k = _qk(cap, LAYER)
    pos = [t.pos for t in rec.call.tokens]
    ref = _reference(q, pos, k, pos, info.head_dim_k, gqa)
    got = rec.extras["attention"][LAYER]
    assert np.max(np.abs(got - ref)) < 1e-3
    # The head mapping matters: a wrong grouping does not match.
    assert np.max(np.abs(got - _reference(q, pos, k, pos, info.head_dim_k, wrong))) > 1e-2

    keys_k, keys_pos = [k], list(pos)
    for _ in range(2):  # decode steps: one query row against every cached key
        rec = eng.step()
        q, k = _qk(cap, LAYER)
        keys_k.append(k)
        keys_pos += [t.pos for t in rec.call.tokens]
        ref = _reference(
            q, [t.pos for t in rec.call.tokens], np.concatenate(keys_k), keys_pos,
            info.head_dim_k, gqa,
        )  # fmt: skip
        assert rec.extras["attention_keys"]["pos"] == keys_pos
        assert np.max(np.abs(rec.extras["attention"][LAYER] - ref)) < 1e-3


def test_reused_cells_out_of_order_are_mapped_to_positions(model, attn_engine):
    """Remove positions 2..3: llama.cpp puts the next token into a freed cell, so cell order
    is no longer position order. Columns must still follow positions."""
    info = model.info
    cap = AttentionCapture(info.n_layer, [LAYER], capture=(f"Qcur-{LAYER}", f"Kcur-{LAYER}"))
    eng = attn_engine(cap)
    toks = eng.vocab.tokenize(SENTENCE)
    eng.prefill(toks)
    _, k_prompt = _qk(cap, LAYER)
    mem = llama_cpp.llama_get_memory(eng.ctx)
    assert llama_cpp.llama_memory_seq_rm(mem, 0, 2, 4)
    eng.kv.seq_rm(0, 2, 4)
    rec = eng.step()
    keys = rec.extras["attention_keys"]
    new_pos = rec.call.tokens[0].pos
    assert keys["pos"] == sorted(keys["pos"]) and keys["pos"][-1] == new_pos == len(toks)
    assert keys["cell"] != sorted(keys["cell"])  # the new token sits in a reused, lower cell
    assert "attention_problems" not in rec.extras

    q, k_new = _qk(cap, LAYER)
    k_by_pos = {p: k_prompt[p] for p in range(len(toks))} | {new_pos: k_new[0]}
    k_all = np.stack([k_by_pos[p] for p in keys["pos"]])
    gqa = lambda h: h // (info.n_head // info.n_head_kv)  # noqa: E731
    ref = _reference(q, [new_pos], k_all, keys["pos"], info.head_dim_k, gqa)
    got = rec.extras["attention"][LAYER]
    assert np.max(np.abs(got - ref)) < 1e-3
    # Reading the columns in cell order instead would put the newest token's weight elsewhere.
    by_cell = got[:, :, np.argsort(np.argsort(keys["cell"]))]
    assert np.max(np.abs(by_cell - ref)) > 1e-3


def test_capture_does_not_change_the_logits(model, attn_engine):
    plain = attn_engine(None, flash_attn="off")
    captured = attn_engine(AttentionCapture(model.info.n_layer, range(model.info.n_layer)))
    toks = plain.vocab.tokenize(SENTENCE)
    plain.prefill(toks)
    captured.prefill(toks)
    assert plain.logits is not None and captured.logits is not None
    np.testing.assert_allclose(captured.logits, plain.logits, rtol=0, atol=1e-5)
    assert plain.step().call.tokens[0].id == captured.step().call.tokens[0].id


def test_several_ubatches_give_the_same_weights(model, attn_engine):
    toks = None
    out = []
    for ub in (512, 4):
        cap = AttentionCapture(model.info.n_layer, [0, 29], census=True)
        eng = attn_engine(cap, n_batch=512, n_ubatch=ub)
        toks = toks or eng.vocab.tokenize(SENTENCE)
        rec = eng.prefill(toks)[-1]
        assert rec.extras["graph"]["n_graphs"] == len(rec.call.ubatches)
        out.append(rec.extras["attention"])
    assert len(toks) > 8  # so that n_ubatch=4 really split it into 3 graphs
    for layer in (0, 29):
        np.testing.assert_allclose(out[1][layer], out[0][layer], atol=1e-5)


def test_layers_can_change_and_off_captures_nothing(model, attn_engine):
    cap = AttentionCapture(model.info.n_layer, [])
    eng = attn_engine(cap)
    recs = eng.prefill(eng.vocab.tokenize(SENTENCE))
    assert "attention" not in recs[-1].extras
    mem = llama_cpp.llama_get_memory(eng.ctx)
    llama_cpp.llama_memory_seq_rm(mem, 0, 1, 3)
    eng.kv.seq_rm(0, 1, 3)
    assert "attention" not in eng.step().extras
    cap.set_layers([7])  # the cell map kept following while capture was off
    rec = eng.step()
    assert list(rec.extras["attention"]) == [7]
    assert rec.extras["attention_keys"]["pos"] == eng.kv.positions(0)
    assert "attention_problems" not in rec.extras
    np.testing.assert_allclose(rec.extras["attention"][7].sum(axis=2), 1.0, atol=1e-3)


def test_context_attention_assembles_rows_from_records(model, attn_engine):
    cap = AttentionCapture(model.info.n_layer, [3])
    eng = attn_engine(cap)
    first = eng.prefill(eng.vocab.tokenize(SENTENCE))[-1]
    last = eng.step()
    ca = context_attention(eng, 3)
    assert ca is not None
    n = eng.n_past
    assert ca.weights.shape == (model.info.n_head, n, n)
    assert ca.captured.all() and ca.tokens == eng.tokens
    np.testing.assert_array_equal(ca.weights[:, : first.call.n_tokens, : first.call.n_tokens],
                                  first.extras["attention"][3])  # fmt: skip
    np.testing.assert_array_equal(ca.weights[:, -1, :], last.extras["attention"][3][:, 0, :])
    assert np.all(np.triu(ca.head(None), k=1) == 0.0)
    ranked = top_attended(ca.head(0)[-1], 3)
    assert len(ranked) == 3 and ranked[0][1] >= ranked[1][1] >= ranked[2][1]
    assert context_attention(eng, 4) is None  # layer 4 was never captured


def test_layer_arguments():
    assert parse_layers("all", 30) == list(range(30))
    assert parse_layers("3,1,3", 30) == [1, 3]
    with pytest.raises(TokenstepError, match="out of range: this model has 30 layers"):
        parse_layers("999", 30)
    with pytest.raises(TokenstepError, match="comma list or 'all'"):
        parse_layers("three", 30)
    with pytest.raises(TokenstepError):
        AttentionCapture(30, [30])


def _pair_norms(k: np.ndarray) -> np.ndarray:
    """Length of each rotated pair (2i, 2i+1) of every head: RoPE turns the pairs of a key
    by its position, so these lengths survive a position change (llama.cpp's K shift)."""
    k = k.astype(np.float64).reshape(k.shape[0], -1, 2)
    return np.hypot(k[..., 0], k[..., 1])


def test_columns_follow_tokens_through_holes_and_a_context_shift(model, attn_engine):
    """After a removed range and a context shift, each key column must still be the token we
    say it is: the cached K in that column's cell has the same pair lengths as the K that token
    wrote when it was decoded (the shift re-rotates keys but cannot change those lengths)."""
    layer = LAYER
    names = (f"Kcur-{layer}", f"cache_k_l{layer} (view)")  # the cache as kq reads it
    cap = AttentionCapture(model.info.n_layer, [layer], capture=names, census=True)
    eng = attn_engine(cap)
    written: dict[int, np.ndarray] = {}

    def note(rec):
        assert "attention_problems" not in rec.extras, rec.extras["attention_problems"]
        k = np.concatenate([a[0] for a in cap.captured[names[0]]])
        for kv_id, kk in zip(rec.extras["attention_rows"]["kv_id"], k, strict=True):
            written[kv_id] = kk.astype(np.float16)  # the cache stores f16
        return rec

    for rec in eng.prefill(eng.vocab.tokenize(SENTENCE)):
        note(rec)
    mem = llama_cpp.llama_get_memory(eng.ctx)
    assert llama_cpp.llama_memory_seq_rm(mem, 0, 2, 4)
    eng.kv.seq_rm(0, 2, 4)
    note(eng.step())
    assert eng.context_shift() is not None
    rec = note(eng.step())
    assert rec.extras["graph"].get("pre_graph_nodes", 0) > 0  # the K shift graph ran first
    rec = note(eng.step())

    keys = rec.extras["attention_keys"]
    assert keys["pos"] == eng.kv.positions(0) == list(range(len(keys["pos"])))
    assert keys["cell"] != sorted(keys["cell"])  # cells are not in position order any more
    w = rec.extras["attention"][layer]
    np.testing.assert_allclose(w.sum(axis=2), 1.0, atol=1e-3)
    cache = cap.captured[names[1]][-1][0]  # (n_kv, n_head_kv, head_dim)
    for cell, kv_id in zip(keys["cell"], keys["kv_id"], strict=True):
        np.testing.assert_allclose(
            _pair_norms(cache[cell]), _pair_norms(written[kv_id]), rtol=2e-2, atol=2e-2
        )
    # The same check with cells taken in plain order fails: the mapping is doing work.
    plain = sorted(keys["cell"])
    assert any(
        not np.allclose(_pair_norms(cache[c]), _pair_norms(written[k]), rtol=2e-2, atol=2e-2)
        for c, k in zip(plain, keys["kv_id"], strict=True)
    )
    ca = context_attention(eng, layer)  # rows survive the shift, matched by kv_id
    assert ca is not None and ca.positions == keys["pos"]
    np.testing.assert_array_equal(ca.weights[:, -1, :], w[:, 0, :])


def test_forks_stepped_together_see_only_their_own_tokens(model, attn_engine):
    cap = AttentionCapture(model.info.n_layer, [0])
    eng = attn_engine(cap, n_seq_max=2)
    n_prompt = len(eng.prefill(eng.vocab.tokenize(SENTENCE))[-1].call.tokens)
    eng.step()
    seq = eng.fork(0)
    rec = eng.step_seqs()
    rec = eng.step_seqs()  # one llama_decode, one token for each sequence
    assert rec is not None and rec.call.n_tokens == 2
    assert "attention_problems" not in rec.extras
    keys, rows = rec.extras["attention_keys"], rec.extras["attention_rows"]
    assert rows["seq"] == [[0], [seq]]
    w = rec.extras["attention"][0]
    for i, (s,) in enumerate(rows["seq"]):
        mine = np.array([s in ks for ks in keys["seqs"]])
        assert np.all(w[:, i, ~mine] == 0.0)  # the other branch's tokens are masked
        np.testing.assert_allclose(w[:, i, mine].sum(axis=1), 1.0, atol=1e-3)
        assert mine.sum() == n_prompt + 3  # shared prompt + first step + own two tokens
    for s in (0, seq):
        ca = context_attention(eng, 0, s)
        assert ca is not None and ca.tokens == eng.kv.tokens(s) and ca.captured[-1]


def test_replayed_asks_capture_what_reading_every_name_captures(model, attn_engine):
    """The fast ask path (node addresses checked against the last decode of the same graph)
    must give exactly what the slow path (every node's name read, as the census does) gives,
    through graph changes: prefill vs step, a rewind, a hole, a context shift, a new layer."""
    n_layer = model.info.n_layer
    fast = AttentionCapture(n_layer, [LAYER])
    slow = AttentionCapture(n_layer, [LAYER], census=True)
    engs = [attn_engine(fast), attn_engine(slow)]
    toks = engs[0].vocab.tokenize(SENTENCE)

    def both(act):
        return [act(e) for e in engs]

    def hole(e):
        assert llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(e.ctx), 0, 2, 4)
        e.kv.seq_rm(0, 2, 4)

    recs = [both(lambda e: e.prefill(toks)[-1])]
    for _ in range(4):
        recs.append(both(lambda e: e.step()))
    assert both(lambda e: e.rewind(2)) == [2, 2]
    for _ in range(3):
        recs.append(both(lambda e: e.step()))
    both(hole)
    recs.append(both(lambda e: e.step()))
    assert all(both(lambda e: e.context_shift()))
    for _ in range(2):
        recs.append(both(lambda e: e.step()))
    for cap in (fast, slow):
        cap.set_layers([7, 12])
    recs.append(both(lambda e: e.prefill(toks[:3])[-1]))
    for _ in range(3):
        recs.append(both(lambda e: e.step()))
        assert fast.copies == 2  # one graph split per captured layer; the cell map costs none
    for a, b in recs:
        assert "attention_problems" not in a.extras and "attention_problems" not in b.extras
        assert a.extras["attention_keys"] == b.extras["attention_keys"]
        assert sorted(a.extras["attention"]) == sorted(b.extras["attention"])
        for layer, w in a.extras["attention"].items():
            np.testing.assert_array_equal(w, b.extras["attention"][layer])
    assert fast.n_replayed >= 8 and fast.n_learned >= 3  # both paths really ran
    assert slow.n_replayed == slow.n_learned == 0
    # The per-sequence key cache, extended step by step, agrees with the mirror.
    rows = fast.key_rows(engs[0])
    assert [tuple(k) for k in rows.T.tolist()] == fast.live_keys(engs[0])


def test_attention_off_splits_nothing(model, attn_engine):
    cap = AttentionCapture(model.info.n_layer, [])
    eng = attn_engine(cap)
    eng.prefill(eng.vocab.tokenize(SENTENCE))
    for _ in range(3):
        eng.step()
        assert cap.copies == 0  # the cell map is read in the ask phase: no graph split
    assert cap.live_keys(eng)[-1][0] == eng.n_past - 1


def _dense_from_records(eng: Engine, layer: int) -> np.ndarray:
    """Oracle: the whole (n_head, n, n) matrix straight from the step records' extras, each
    row from the record that decoded that token, columns matched by kv_id (NaN: no row)."""
    ids = [k[2] for k in find_capture(eng).live_keys(eng)]  # type: ignore[union-attr]
    col = {k: i for i, k in enumerate(ids)}
    n = len(ids)
    out = np.full((model_heads := 9, n, n), np.nan, dtype=np.float32)
    for rec in eng.records:
        att = rec.extras.get("attention")
        if not att or layer not in att:
            continue
        keys = rec.extras["attention_keys"]["kv_id"]
        for i, kv_id in enumerate(rec.extras["attention_rows"]["kv_id"]):
            if kv_id not in col:
                continue
            row = np.zeros((model_heads, n), dtype=np.float32)
            for j, k in enumerate(keys):
                if k in col:
                    row[:, col[k]] = att[layer][:, i, j]
            out[:, col[kv_id], :] = row
    return out


def test_rows_are_laid_out_on_demand_like_the_dense_matrix(model, attn_engine):
    """The heatmap's rows (built per row, nothing n × n) equal the dense matrix assembled
    from the records, through a rewind, a hole and a layer that was off for some tokens."""
    cap = AttentionCapture(model.info.n_layer, [LAYER])
    eng = attn_engine(cap)
    eng.prefill(eng.vocab.tokenize(SENTENCE))
    for _ in range(4):
        eng.step()
    eng.rewind(2)
    eng.step()
    assert llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(eng.ctx), 0, 2, 4)
    eng.kv.seq_rm(0, 2, 4)
    eng.step()
    cap.set_layers([3])  # two tokens decoded without layer LAYER: rows not captured
    eng.step()
    eng.step()
    cap.set_layers([LAYER])
    eng.step()
    ca = context_attention(eng, LAYER)
    assert ca is not None
    want = _dense_from_records(eng, LAYER)
    n = len(ca.positions)
    assert list(ca.captured) == [not np.isnan(want[0, i, 0]) for i in range(n)]
    assert ca.captured.sum() == n - 2
    for i in range(n):
        for h in (0, 8):
            np.testing.assert_array_equal(ca.row(i, h), want[h, i])  # the model's own weights
        np.testing.assert_allclose(ca.row(i, None), want[:, i].mean(axis=0), rtol=1e-6)
