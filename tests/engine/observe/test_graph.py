"""Graph census and profile mode, on the real model's graph."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.observe.census import sections, split_layer
from tui.engine.observe.graph_tap import GraphTap


@pytest.fixture
def tap_engine(model):
    made: list[Engine] = []

    def make(tap: GraphTap | None, **config: object) -> Engine:
        cfg = EngineConfig(**{"n_ctx": 512, "n_threads": 2, **config})  # type: ignore[arg-type]
        eng = Engine(model, cfg, SamplerSettings(temp=0.0), observers=[tap] if tap else [])
        made.append(eng)
        return eng

    yield make
    for e in made:
        e.close()


def _logged_nodes(eng: Engine) -> int:
    """llama.cpp's own count when it reserved the graph: 'sched_reserve: graph: nodes = N'."""
    for line in eng.log_lines:
        m = re.search(r"graph: nodes = (\d+)", line)
        if m:
            return int(m.group(1))
    raise AssertionError("llama.cpp logged no node count")


def test_census_matches_llama_cpp_and_names_the_chain(model, tap_engine):
    tap = GraphTap(census=True, n_layer=model.info.n_layer)
    eng = tap_engine(tap, flash_attn="off")
    rec = eng.prefill(eng.vocab.tokenize("The cat sat on the mat."))[-1]
    g = rec.extras["graph"]
    assert g["n_nodes"] == _logged_nodes(eng)  # every node the scheduler asked us about
    assert g["n_graphs"] == 1
    assert g["n_layers"] == model.info.n_layer == len(g["nodes_per_layer"])
    assert g["same_chain_every_layer"]
    chain = g["layer_chain"]
    want = ["attn_norm", "Qcur", "Kcur", "Vcur", "kq", "kq_soft_max", "kqv", "kqv_out",
            "attn_out", "ffn_inp", "ffn_norm", "ffn_gate", "ffn_up", "ffn_out", "l_out"]  # fmt: skip
    for name in want:
        assert name in chain, name
    order = [chain.index(n) for n in ["attn_norm", "kq", "kq_soft_max", "kqv", "attn_out",
                                      "ffn_norm", "ffn_out", "l_out"]]  # fmt: skip
    assert order == sorted(order)
    assert g["prologue"][0].startswith("embd:")
    assert [e.split(":")[0] for e in g["epilogue"]][-2:] == ["result_norm", "result_output"]
    assert g["ops"]["SOFT_MAX"] == model.info.n_layer  # one kq_soft_max per layer
    assert sum(g["ops"].values()) == g["n_nodes"]


def test_flash_attention_graph_has_no_softmax(model, tap_engine):
    """The census sees the graph as built: with flash attention the softmax is fused away."""
    tap = GraphTap(census=True, n_layer=model.info.n_layer)
    eng = tap_engine(tap, flash_attn="on")
    rec = eng.prefill(eng.vocab.tokenize("The cat sat."))[-1]
    g = rec.extras["graph"]
    assert "kq_soft_max" not in g["layer_chain"] and "SOFT_MAX" not in g["ops"]
    assert g["ops"].get("FLASH_ATTN_EXT") == model.info.n_layer
    assert g["n_nodes"] == _logged_nodes(eng)


def test_sections_follow_the_graph_names(model, tap_engine):
    tap = GraphTap(census=True, n_layer=model.info.n_layer)
    eng = tap_engine(tap, flash_attn="off")
    eng.prefill(eng.vocab.tokenize("Hello"))
    assert tap.last_census is not None and "kq_soft_max-0:SOFT_MAX" in tap.last_census.layer_nodes
    secs = sections(tap._nodes)
    where = {(n.name, s.part, s.layer) for n, s in zip(tap._nodes, secs, strict=True)}
    assert ("kq_soft_max-3", "attention", 3) in where
    assert ("ffn_gate-3", "ffn", 3) in where
    assert ("l_out-29", "ffn", 29) in where
    assert ("embd", "prologue", None) in where
    assert ("result_output", "epilogue", None) in where
    assert split_layer("Kcur-12 (view) (permuted)") == ("Kcur", 12)


def test_profile_times_every_node_and_keeps_the_logits(model, tap_engine):
    n_layer = model.info.n_layer
    plain = tap_engine(None, flash_attn="off")
    tap = GraphTap(census=True, profile=True, n_layer=n_layer)
    eng = tap_engine(tap, flash_attn="off")
    toks = eng.vocab.tokenize("The cat sat on the mat.")
    plain.prefill(toks)
    rec = eng.prefill(toks)[-1]
    prof = rec.extras["profile"]
    assert "slower" in prof["note"]
    assert len(tap._times) == rec.extras["graph"]["n_nodes"]
    assert len(prof["attention_ms"]) == len(prof["ffn_ms"]) == n_layer
    assert all(x > 0 for x in prof["attention_ms"] + prof["ffn_ms"])
    parts = (
        prof["prologue_ms"]
        + sum(prof["attention_ms"])
        + sum(prof["ffn_ms"])
        + sum(prof["epilogue_ms"].values())
    )
    assert parts == pytest.approx(prof["total_ms"], abs=0.01 + 1e-3 * prof["total_ms"])
    assert set(prof["epilogue_ms"]) >= {"result_norm", "result_output"}
    assert prof["total_ms"] <= rec.decode_ms  # node times are inside the measured decode
    assert plain.logits is not None and eng.logits is not None
    np.testing.assert_allclose(eng.logits, plain.logits, rtol=0, atol=1e-5)
