"""Attention weights of older decodes leave memory: the capture moves them to its weight file
and the record log spills the records that carried them, so memory stays flat with attention
on (the peak-RSS figure is benchmark 8). The oracle is the same session on a second engine
that keeps every array in memory: the heatmap's rows and the trace's JSON must not change."""

from __future__ import annotations

import numpy as np

from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.observe.attention_capture import AttentionCapture
from tui.engine.observe.attention_map import context_attention
from tui.engine.record.attention_store import StoredArray, StoredInts
from tui.engine.run.trace import record_to_dict

LAYER = 13
TEXT = "The lighthouse keeper counted the ships that passed in the night."


def _play(model, hot: int, window: int) -> tuple[Engine, AttentionCapture]:
    cap = AttentionCapture(model.info.n_layer, [LAYER])
    cap.hot_decodes = hot
    eng = Engine(
        model,
        EngineConfig(n_ctx=256, n_threads=2, flash_attn="off"),
        SamplerSettings(temp=0.0),
        observers=[cap],
    )
    eng.records.window = window
    toks = eng.vocab.tokenize(TEXT)
    eng.prefill(toks)
    for i in range(24):
        if eng.step() is None:
            eng.step(force=toks[i % len(toks)])
    eng.rewind(3)  # rows computed before the rewind lose the columns of the tokens gone
    for i in range(4):
        if eng.step() is None:
            eng.step(force=toks[i])
    return eng, cap


def test_old_weights_leave_memory_and_read_back_the_same(model) -> None:
    eng, cap = _play(model, hot=2, window=4)
    ref, ref_cap = _play(model, hot=10**9, window=10**9)
    try:
        assert eng.tokens == ref.tokens
        # Only the newest decodes keep arrays; the others point at the weight file.
        stored = [r for r in eng.records if isinstance(r.extras["attention"][LAYER], StoredArray)]
        in_memory = [r for r in eng.records if isinstance(r.extras["attention"][LAYER], np.ndarray)]
        assert stored and len(in_memory) == 2
        assert isinstance(stored[0].extras["attention_keys"]["kv_id"], StoredInts)
        assert cap.store is not None and cap.store.bytes_stored > 0
        assert ref_cap.store is None
        # Records with attention are spilled like any other (they used to stay pinned).
        assert eng.records.spilled > 0 and ref.records.spilled == 0
        # The heatmap reads the same rows, every head and the mean, from the file.
        a, b = context_attention(eng, LAYER), context_attention(ref, LAYER)
        assert a is not None and b is not None and a.captured.all()
        n = len(a.positions)
        for i in range(n):
            for head in (0, 4):
                np.testing.assert_array_equal(a.row(i, head), b.row(i, head))
            # the mean over heads sums a contiguous copy, not a strided view: same to 1 ulp
            np.testing.assert_allclose(a.row(i, None), b.row(i, None), rtol=1e-6, atol=1e-9)
        # The trace's JSON of a record whose weights moved is the same as the original's.
        for rec in stored:
            mine, theirs = record_to_dict(eng, rec), record_to_dict(ref, ref.records[rec.index])
            assert mine["attention"] == theirs["attention"]
            assert mine["attention_keys"] == theirs["attention_keys"]
        # A saved (or spilled) record leaves the weights out and keeps their shape.
        for d in eng.records.dicts():
            assert "attention" not in d and str(LAYER) in d["attention_shape"]
    finally:
        eng.close()
        ref.close()
