"""Issue 5, claim 3: the cache costs memory. Our arithmetic against llama.cpp's own log."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli
from tui.engine import EngineConfig, TokenstepError
from tui.engine.model.kvcache import parse_kv_log
from tui.engine.observe import memory as mem


def test_per_token_bytes_taken_apart(make_engine):
    eng = make_engine(n_ctx=256)
    bd = mem.breakdown_for(eng)
    i = eng.info
    assert bd.bytes_per_token == i.n_layer * 2 * i.n_head_kv * i.head_dim_k * 2
    assert bd.bytes_per_token == eng.layout.bytes_per_token
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 shared by 9 query heads
    assert (i.n_layer, i.n_head, i.n_head_kv, i.head_dim_k) == (30, 9, 3, 64)
    assert bd.bytes_per_token == 23_040 and bd.mha_bytes_per_token == 69_120
    assert bd.gqa_factor == 3.0 and bd.gqa_saved_per_token == 46_080
    assert "30 layers" in bd.formula() and "23,040 B" in bd.formula()


@pytest.mark.parametrize(
    ("ctk", "ctv", "fa"),
    [("f16", "f16", "off"), ("q8_0", "q8_0", "on"), ("q4_0", "q4_0", "on"), ("q8_0", "f16", "off")],
)
def test_allocated_bytes_equal_llama_cpp_log(make_engine, ctk, ctv, fa):
    """-ctk/-ctv really select the cache types: the bytes llama.cpp logged for the cache are
    our n_cells x layers x ggml_row_size for those types, to the last printed digit."""
    eng = make_engine(n_ctx=1024, cache_type_k=ctk, cache_type_v=ctv, flash_attn=fa)
    rep = mem.memory_report(eng)
    assert len(rep.caches) == 1
    c = rep.caches[0]
    assert (c.type_k, c.type_v, c.cells, c.layers) == (ctk, ctv, eng.n_cells, eng.info.n_layer)
    assert c.agrees, c
    assert c.bytes == eng.n_cells * mem.breakdown_for(eng).bytes_per_token == rep.allocated_bytes
    # and the calculator row for this size and type says the same
    if ctk == ctv:
        row = next(r for r in rep.calc if r.n_ctx == 1024)
        assert row.bytes[ctk] == c.bytes


def test_current_use_grows_by_one_row_per_token(make_engine):
    eng = make_engine(n_ctx=256, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
    eng.prefill(eng.vocab.tokenize("Hello there, general"))
    eng.step()
    rep = mem.memory_report(eng)
    assert rep.used_cells == eng.n_past
    assert rep.used_bytes == eng.n_past * rep.breakdown.bytes_per_token
    assert rep.breakdown.bytes_per_token == 30 * 2 * 3 * 64 * 34 // 32  # q8_0: 34 B per 32


def test_calculator_rows_go_up_to_the_training_context(make_engine):
    eng = make_engine(n_ctx=256)
    rows = mem.memory_report(eng).calc
    assert [r.n_ctx for r in rows] == [1024, 2048, 4096, 8192] == mem.context_sizes(8192)
    assert rows[-1].n_ctx == eng.info.n_ctx_train
    for r in rows:
        assert r.bytes["f16"] == r.n_ctx * 23_040
        assert r.bytes["q8_0"] < r.bytes["f16"] and r.bytes["q4_0"] < r.bytes["q8_0"]
    assert mem.context_sizes(5000) == [1024, 2048, 4096, 5000]


def test_quantized_v_with_auto_flash_attention_is_turned_on_and_said(make_engine):
    eng = make_engine(n_ctx=256, cache_type_v="q8_0", flash_attn="auto")
    assert eng.flash_attn_resolved == "on"
    rep = mem.memory_report(eng)
    assert any("flash attention" in n for n in rep.notes)
    assert eng.flash_attn_note and "quantized V" in eng.flash_attn_note


def test_quantized_v_without_flash_attention_is_refused_in_one_sentence():
    with pytest.raises(TokenstepError, match="flash attention"):
        EngineConfig(cache_type_v="q4_0", flash_attn="off").validate()
    assert mem.config_problem("q4_0", "off") == mem.QUANTIZED_V_NOTE
    assert mem.config_problem("q4_0", "on") is None
    res = run_cli("trace", "-p", "x", "-ctv", "q4_0", "-fa", "off")
    assert res.returncode == 1 and b"flash attention" in res.stderr
    assert res.stderr.count(b"\n") == 1


def test_sliding_window_log_gives_two_caches():
    """llama.cpp's log format for a model with SWA layers (lines as llama-kv-cache-iswa.cpp
    and llama-kv-cache.cpp print them)."""
    lines = [
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells",
        "llama_kv_cache: size =   32.00 MiB (  4096 cells,   4 layers,  1/1 seqs), "
        "K (f16):   16.00 MiB, V (f16):   16.00 MiB",
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 1536 cells",
        "llama_kv_cache: size =   60.00 MiB (  1536 cells,  20 layers,  1/1 seqs), "
        "K (f16):   30.00 MiB, V (f16):   30.00 MiB",
    ]
    reps = parse_kv_log(lines)
    assert [(r.kind, r.cells, r.layers) for r in reps] == [("non-SWA", 4096, 4), ("SWA", 1536, 20)]


@pytest.fixture(scope="module")
def swa_path(tmp_path_factory):
    from tests.support.swa_model import write_swa_model

    return write_swa_model(tmp_path_factory.mktemp("swa") / "tiny-swa.gguf")


@pytest.mark.parametrize("swa_full", [False, True])
def test_sliding_window_model_shows_each_cache_as_llama_cpp_allocates_it(swa_path, swa_full):
    import json

    from tests.support.swa_model import N_LAYER, N_SWA
    from tui.engine import Engine, EngineConfig, Model
    from tui.engine.model import gguf_header, info

    eng = Engine(Model(swa_path), EngineConfig(n_ctx=1024, n_threads=2, swa_full=swa_full))
    try:
        rep = mem.memory_report(eng)
        assert [c.kind for c in rep.caches] == ["non-SWA", "SWA"]
        assert all(c.agrees for c in rep.caches), rep.caches
        assert [c.layers for c in rep.caches] == [N_LAYER // 2, N_LAYER // 2]
        small = -(-(N_SWA * eng.config.n_seq_max + eng.config.n_ubatch) // 256) * 256
        assert [c.cells for c in rep.caches] == [1024, 1024 if swa_full else small]
        assert rep.allocated_bytes == sum(c.bytes for c in rep.caches)
        assert any("sliding-window" in n for n in rep.notes)
        eng.prefill(eng.vocab.tokenize("hello " * 40))
        for _ in range(N_SWA + 10):  # past the window: the mirror still agrees with llama.cpp
            rec = eng.step(force=100)
            assert rec is not None and not rec.kv_problems
    finally:
        eng.close()
    # `tokenstep info` predicts the same caches from the header alone (tools' defaults)
    hdr = gguf_header.validate(swa_path)
    plan = info.cache_plan(hdr, info.facts(hdr), 1024, n_seq=2)
    assert [(p.kind, p.cells, len(p.layers)) for p in plan] == [
        ("non-SWA", 1024, 2),
        ("SWA", small, 2),
    ]
    if not swa_full:
        assert [p.bytes["f16"] for p in plan] == [c.bytes for c in rep.caches]
    res = run_cli("info", "-m", str(swa_path), "-c", "1024", "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)["kv_caches"]
    assert [(c["kind"], c["layers"]) for c in got] == [("non-SWA", 2), ("SWA", 2)]
    res = run_cli("info", "-m", str(swa_path), "-c", "1024")
    assert b"two caches" in res.stdout
