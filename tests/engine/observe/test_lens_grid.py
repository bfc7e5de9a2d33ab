"""The lens over every position (issue 24): a position x layer grid of the top-1 and its p,
checked against a NumPy recomputation of the head from the copied ``l_out`` rows (a middle
layer) and against llama.cpp's own logits for every position (the last layer), on SmolLM2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.cli import run_cli
from tests.support.lens import MIDDLE, forget_heads, numpy_head  # noqa: F401 (the fixture)
from tests.support.oracles import logits_oracle
from tui.engine import Engine, EngineConfig, SamplerSettings
from tui.engine.observe.lens_capture import LensCapture

PROMPT = "The capital of France is Paris, and the capital of Italy is"


@pytest.fixture(scope="module")
def oracle(model_path):
    llm = logits_oracle(model_path, 256)
    yield llm
    llm.close()


def _grid_engine(model):
    cap = LensCapture(n_layer=model.info.n_layer, capture=(f"l_out-{MIDDLE}",))
    cap.set_grid(True)
    eng = Engine(model, EngineConfig(n_ctx=256, n_threads=2), SamplerSettings(temp=0.0), [cap])
    eng.score_prompt = True  # logits on every row: the last layer keeps every row
    return eng, cap


def test_grid_middle_layer_matches_numpy_and_last_layer_llama_cpp(model, model_path, oracle):
    eng, cap = _grid_engine(model)
    try:
        tokens = eng.vocab.tokenize(PROMPT, add_special=True)
        recs = eng.prefill(tokens)
        grid = recs[-1].extras["lens_grid"]
        n = len(tokens)
        assert grid["pos"] == list(range(n)) and grid["token"] == tokens
        assert grid["left_out"] == 0 and all(len(r) == model.info.n_layer for r in grid["top1"])
        hidden = cap.captured[f"l_out-{MIDDLE}"][-1].reshape(-1, model.info.n_embd)
        assert hidden.shape[0] == n
        for j in range(n):  # the middle layer, every position, from the copied rows
            logits = numpy_head(model_path, hidden[j], None)
            assert grid["top1"][j][MIDDLE] == int(np.argmax(logits))
            z = np.exp(logits - logits.max()).sum()
            assert grid["p"][j][MIDDLE] == pytest.approx(1.0 / z, abs=1e-4)
        oracle.reset()
        oracle.eval(tokens)
        scores = np.asarray(oracle.scores[:n])
        for j in range(n):  # the last layer against llama.cpp's logits of every position
            bound = grid["rounding_bound"][j]  # the head's 8-bit activation rounding
            assert 0 < grid["max_abs_diff"][j] <= bound < 5
            top1 = grid["top1"][j][-1]
            # the same token, or a near-tie within the quantized head's rounding
            assert scores[j].max() - scores[j][top1] <= 2 * bound, (j, top1)
        same = sum(grid["top1"][j][-1] == int(np.argmax(scores[j])) for j in range(n))
        assert same >= n - 1
    finally:
        eng.close()


def test_trace_lens_grid_flag():
    r = run_cli("trace", "--lens-grid", "-p", "The capital of France is", "-n", "2", "-t", "2")
    assert r.returncode == 0, r.stderr.decode()
    recs = [json.loads(line) for line in r.stdout.decode().splitlines()]
    prefill, step = recs[0], recs[1]
    g = prefill["lens_grid"]
    assert g["pos"] == [t["pos"] for t in prefill["batch"]]
    assert g["token"] == [t["id"] for t in prefill["batch"]]
    assert all(t["logits"] for t in prefill["batch"])  # every row asked for, for the last layer
    assert g["top1"][-1][-1] == prefill["top"][0]["id"] == prefill["lens_check"]["top1"]["id"]
    assert g["top1_piece"][-1][-1] == " Paris"
    assert all(0 < p <= 1 for row in g["p"] for p in row)
    assert step["lens_grid"]["pos"] == [step["batch"][0]["pos"]]
    assert "lens" in prefill and "lens" in step  # the per-step lens comes with it


def test_lens_grid_refuses_a_server_in_one_sentence():
    r = run_cli("trace", "--server", "http://127.0.0.1:9", "--lens-grid", "-p", "x")
    assert r.returncode == 1 and r.stdout == b""
    err = r.stderr.decode()
    assert err.count("\n") == 1 and "--lens-grid needs a local model" in err
